# SPDX-License-Identifier: BSD-3-Clause
"""Resumes in Python what the C++ side saved, and compares every later step with Python's run.

usage: resume_optim.py FIXTURE_DIR NAME CHECKPOINT MODE

CHECKPOINT holds {"model", "optimizer", "epoch"} saved by modhooks (optim_test.cpp: Python's
checkpoint of NAME resumed in libtorch for a few steps). Its optimizer state must load into
Python's optimizer with the hyper-parameters of oracle_optim.CONFIGS; the steps after "epoch"
must give the parameters of the uninterrupted Python run (FIXTURE_DIR/optim/NAME_expected.pt):
MODE "exact" bit for bit (SGD, RMSprop and Adagrad on Python's own libtorch); "close" within 2e-6
relative (Adam and AdamW, whose first-moment update libtorch computes as mul_ + add_ where
Python uses lerp_); "other-libtorch" within 1e-5 relative (a C++ side on another libtorch, such
as Debian's 1.13, whose kernels round differently). Exit status 1 on any mismatch.
"""
import pathlib
import sys

import torch

import oracle_optim


TOLERANCES = {"close": (2e-6, 1e-7), "other-libtorch": (1e-5, 1e-6)}


def main(fixtures, name, path, mode):
    torch.set_num_threads(1)
    d = torch.load(fixtures / "optim" / "data.pt", weights_only=True)
    expected = torch.load(fixtures / "optim" / f"{name}_expected.pt", weights_only=True)["params"]
    ckpt = torch.load(path, weights_only=True)
    model = oracle_optim.make_model()
    model.load_state_dict(ckpt["model"])
    # Other hyper-parameters than the saved ones: load_state_dict must restore them.
    cls = oracle_optim.CONFIGS[name][0]
    opt = cls([dict(params=list(model[0].parameters())),
               dict(params=list(model[2].parameters()))], lr=1.0)
    opt.load_state_dict(ckpt["optimizer"])
    failed = False
    for g, want in zip(opt.param_groups, oracle_optim.CONFIGS[name][1:]):
        for key, value in want.items():
            got = g[key]
            if (tuple(got) if isinstance(got, (tuple, list)) else got) != value:
                print(f"{name}: group {key} = {got}, want {value}")
                failed = True
    for s in range(ckpt["epoch"], oracle_optim.STEPS):
        oracle_optim.train_step(model, opt, d["x"][s], d["y"][s])
        for i, (p, w) in enumerate(zip(model.parameters(), expected[s])):
            if mode == "exact":
                ok = torch.equal(p, w)
            else:
                rtol, atol = TOLERANCES[mode]
                ok = torch.allclose(p, w, rtol=rtol, atol=atol)
            if not ok:
                print(f"{name}: step {s + 1} parameter {i} differs by "
                      f"{(p - w).abs().max().item():.3g}")
                failed = True
    if failed:
        sys.exit(1)
    print(f"resume_optim {name}: steps {ckpt['epoch'] + 1}..{oracle_optim.STEPS} match")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
