# SPDX-License-Identifier: BSD-3-Clause
"""The nn utilities in Python, for nn_utils tests in C++ to match (nn_utils_scenarios.py lists
the scenarios). For each, writes under <out>/nn_utils/:
- <name>.pt: "init.<key>" the module's state dict before the utilities, "x" its input, "y" the
  output of the first forward (training mode), "grad.<name>" the gradient of each parameter
  after backward of y.pow(2).sum(), "final.<key>" the state dict after STEPS steps of SGD
  (lr LR, built after the utilities) on the same loss, "eval" the output in eval mode after;
- <name>_sd.pt: the final state dict as torch.save writes it (metadata included);
- oracle.json: torch's version ("torch": "2.15") and per scenario ("scenarios") the keys of the
  state dict, the parameters and the buffers, in order.
Also the old spectral-norm state dicts (version none): sn_old.pt, and what loading it gives.
"""
import collections
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import nn_utils_scenarios as sc  # noqa: E402


def run(name, out):
    module, x = sc.build(name)
    init = {k: v.clone() for k, v in module.state_dict().items()}
    sc.apply(name, module)
    module.train()
    record = collections.OrderedDict()
    for key, value in init.items():
        record["init." + key] = value
    record["x"] = x
    y = module(x)
    record["y"] = y.detach().clone()
    y.pow(2).sum().backward()
    for pname, p in module.named_parameters():
        record["grad." + pname] = p.grad.clone()
    optimizer = torch.optim.SGD(module.parameters(), lr=sc.LR)
    for _ in range(sc.STEPS):
        optimizer.zero_grad()
        module(x).pow(2).sum().backward()
        optimizer.step()
    for key, value in module.state_dict().items():
        record["final." + key] = value.detach().clone()
    module.eval()
    with torch.no_grad():
        record["eval"] = module(x).clone()
    torch.save(record, out / f"{name}.pt")
    torch.save(module.state_dict(), out / f"{name}_sd.pt")
    return {
        "state_keys": list(module.state_dict().keys()),
        "parameters": [n for n, _ in module.named_parameters()],
        "buffers": [n for n, _ in module.named_buffers()],
    }


def old_spectral_norm(out):
    """PyTorch's own upgrade test: a version-none state dict holds weight, not weight_v. The
    weight is tall, so that the upgrade's pseudo-inverse is well conditioned."""
    module, x = sc.build("sn_tall")
    sc.apply("sn_tall", module)
    module(x)
    old = module.state_dict()
    del old._metadata[""]["spectral_norm"]
    old["weight"] = module.weight.detach().clone()
    del old["weight_v"]
    torch.save(old, out / "sn_old.pt")
    fresh, _ = sc.build("sn_tall")
    sc.apply("sn_tall", fresh)
    fresh.load_state_dict(old)
    torch.save(collections.OrderedDict((k, v.clone()) for k, v in fresh.state_dict().items()),
               out / "sn_old_loaded.pt")


def main(out):
    out = pathlib.Path(out) / "nn_utils"
    out.mkdir(parents=True, exist_ok=True)
    scenarios = {name: run(name, out) for name in sc.SCENARIOS}
    old_spectral_norm(out)
    version = ".".join(torch.__version__.split(".")[:2])
    oracle = {"torch": version, "scenarios": scenarios}
    (out / "oracle.json").write_text(json.dumps(oracle, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures")
