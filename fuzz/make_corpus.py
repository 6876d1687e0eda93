# SPDX-License-Identifier: BSD-3-Clause
"""Writes the fuzzers' seed corpora: files Python torch and safetensors write, so mutation starts
from every structure the readers accept (each dtype, views, shared storages, parameters, module
state dicts with _metadata, pickle protocols 2 to 5) and from some they must reject.

    python make_corpus.py OUT   ->  OUT/torch_save, OUT/unpickler, OUT/load_object,
                                    OUT/safetensors, OUT/load_state_dict
"""
import io
import os
import pickle
import random
import sys
import zipfile
from collections import OrderedDict

import torch
from safetensors.torch import save as safetensors_bytes

# Every dtype a checkpoint holds; safetensors has no complex128.
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128,
          torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
          torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def small(dtype, shape=(2, 3)):
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3) - 2.5
    t = t.reshape(shape) if len(shape) else t.flatten()[0].reshape(())
    return t.to(dtype) if dtype != torch.bool else t > 0


def module_state_dicts():
    torch.manual_seed(0)
    nested = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Sequential(
        torch.nn.BatchNorm1d(2), torch.nn.Linear(2, 2, bias=False)))
    yield "sequential", nested.state_dict()
    yield "linear", torch.nn.Linear(2, 2).state_dict()
    yield "batchnorm", torch.nn.BatchNorm1d(3).state_dict()
    yield "embedding", torch.nn.Embedding(4, 2).state_dict()


def state_dicts():
    for dtype in DTYPES:
        name = str(dtype).replace("torch.", "")
        yield "dtype_" + name, OrderedDict(t=small(dtype))
        yield "scalar_" + name, OrderedDict(t=small(dtype, ()))
    yield "all_dtypes", OrderedDict((str(d), small(d)) for d in DTYPES)
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    yield "views", OrderedDict(base=base, row=base[1], col=base[:, 2], t=base.t(),
                               step=base[::2, 1::3], offset=base.flatten()[5:9])
    shared = torch.ones(3)
    yield "shared", OrderedDict(a=shared, b=shared, c=shared[1:])
    yield "expanded", OrderedDict(e=torch.ones(1).expand(4))
    yield "empty", OrderedDict(e=torch.empty(0, 3), z=torch.zeros(()))
    yield "parameter", OrderedDict(p=torch.nn.Parameter(torch.ones(2)),
                                   g=torch.ones(2, requires_grad=True))
    yield "no_entries", OrderedDict()
    yield from module_state_dicts()


def torch_save_bytes(obj, protocol):
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_protocol=protocol)
    return buf.getvalue()


def data_pkl(archive):
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main(out):
    for name, sd in state_dicts():
        for protocol in (2, 4, 5):
            archive = torch_save_bytes(sd, protocol)
            write(f"{out}/torch_save", f"{name}_p{protocol}.pt", archive)
            write(f"{out}/unpickler", f"{name}_p{protocol}.pkl", data_pkl(archive))
        try:
            write(f"{out}/safetensors", name + ".safetensors",
                  safetensors_bytes({k: v.contiguous() for k, v in sd.items()},
                                    metadata={"format": "pt"}))
        except (TypeError, ValueError, KeyError, RuntimeError):
            pass  # what safetensors cannot hold: complex128, shared or non-contiguous storages
    # Objects a state dict is not, which the readers must reject cleanly.
    for name, obj in {"nested_dict": {"model": OrderedDict(w=torch.ones(2)), "epoch": 3},
                      "list": [torch.ones(2)], "plain_dict": {"a": 1, "b": "x"},
                      "tensor": torch.ones(2)}.items():
        archive = torch_save_bytes(obj, 2)
        write(f"{out}/torch_save", name + ".pt", archive)
        write(f"{out}/unpickler", name + ".pkl", data_pkl(archive))
    for protocol in range(2, 6):
        write(f"{out}/unpickler", f"py_objects_p{protocol}.pkl",
              pickle.dumps(OrderedDict(a=1, b=(1, 2, 3), c={"d": None, "e": True}), protocol))
    # load_object: what a training script saves, beside every pickle above.
    for name in os.listdir(f"{out}/unpickler"):
        with open(f"{out}/unpickler/{name}", "rb") as f:
            write(f"{out}/load_object", name, f.read())
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    shared = [1, 2]
    for name, obj in {"training": {"model": model.state_dict(),
                                   "optimizer": optimizer.state_dict(), "epoch": 3},
                      "values": [1.5, -0.0, float("nan"), 2 ** 62, "text", None, True, 1 + 2j,
                                 (torch.Size([2, 3]), torch.float16, torch.device("cpu"))],
                      "shared": {"a": shared, "b": shared, "t": torch.ones(2)[1:]}}.items():
        for protocol in (2, 4):
            write(f"{out}/load_object", f"{name}_p{protocol}.pkl",
                  data_pkl(torch_save_bytes(obj, protocol)))
    rng = random.Random(0)
    for i in range(8):
        write(f"{out}/load_state_dict", f"random_{i}", rng.randbytes(64 << (i % 4)))


if __name__ == "__main__":
    main(sys.argv[1])
