# SPDX-License-Identifier: BSD-3-Clause
"""Checkpoint files written by Python torch and safetensors, with what each must load as.

Writes under <out>/checkpoints/: torch.save files (state dicts of an MLP and of a CNN with
BatchNorm, every dtype, views sharing a storage, parameters, a big-endian file, objects that are
not state dicts, and what the MLP and the CNN compute on given inputs), a safetensors file, and
expected.json describing every tensor of every file that must load: dtype, shape, stride,
storage offset and the hex of its bytes in row-major order, plus `_metadata` and which entries
share a storage. check_cpp_checkpoints.py compares the files the C++ tests write back against
the same description.
"""
import collections
import ctypes
import io
import json
import pathlib
import zipfile

import safetensors.torch
import torch

# dtypes torch.save writes with a legacy storage class (_rebuild_tensor_v2).
V2_DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128,
]
# dtypes torch.save writes as an UntypedStorage plus the dtype (_rebuild_tensor_v3).
V3_DTYPES = [
    torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
]
# dtypes safetensors spells, as far as libtorch 1.13 has them, and the newer ones.
SAFETENSORS_DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
]
SAFETENSORS_NEW_DTYPES = [torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn,
                          torch.float8_e5m2]


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def row_major_bytes(t):
    """The tensor's elements in row-major order, as bytes."""
    c = t.detach().clone(memory_format=torch.contiguous_format)
    s = c.untyped_storage()
    return ctypes.string_at(s.data_ptr(), s.nbytes()) if s.nbytes() else b""


def describe(sd):
    tensors = {}
    storages = {}
    for key, t in sd.items():
        ptr = t.untyped_storage().data_ptr()
        tensors[key] = {
            "dtype": dtype_name(t.dtype),
            "shape": list(t.shape),
            "stride": list(t.stride()),
            "storage_offset": t.storage_offset(),
            "requires_grad": t.requires_grad,
            "hex": row_major_bytes(t).hex(),
            # The first key that has the same storage, so the C++ test can check sharing.
            "shares_storage_with": storages.setdefault(ptr, key) if t.numel() else key,
        }
    metadata = getattr(sd, "_metadata", None)
    return {
        "keys": list(sd.keys()),
        "tensors": tensors,
        "metadata": {p: dict(m) for p, m in metadata.items()} if metadata is not None else None,
    }


def sample(dtype, shape, generator):
    """Values that exercise every bit pattern class of the dtype: signs, zeros, extremes."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_complex:
        real = torch.randn(shape, generator=generator, dtype=torch.float64)
        imag = torch.randn(shape, generator=generator, dtype=torch.float64)
        return torch.complex(real, imag).to(dtype)
    if dtype.is_floating_point:
        t = (torch.randn(shape, generator=generator) * 4).to(dtype)
        flat = t.view(-1)
        if flat.numel() >= 4 and dtype not in (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
            flat[0] = -0.0
            flat[1] = float("inf") if dtype not in (torch.float8_e4m3fn,) else 448.0
            flat[2] = float("nan")
        return t
    info = torch.iinfo(dtype)
    low = max(info.min, -(2**62))
    high = min(info.max, 2**62)
    t = torch.randint(low, high, shape, generator=generator, dtype=torch.int64).to(dtype)
    flat = t.view(-1)
    flat[0] = info.min
    flat[1] = info.max
    return t


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def cnn():
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.Conv2d(4, 2, 3))
    model.train()
    with torch.no_grad():
        for _ in range(3):  # moves running stats and num_batches_tracked off their defaults
            model(torch.randn(2, 3, 8, 8))
    return model


def model_outputs(generator):
    """What the MLP and the CNN of mlp.pt and cnn.pt compute, for the C++ twins to reproduce:
    the MLP's output; the CNN's output in eval mode, then in train mode, and its BatchNorm
    buffers after that train-mode step."""
    outputs = collections.OrderedDict()
    model = mlp().eval()
    outputs["mlp.input"] = torch.randn(5, 4, generator=generator)
    cnn_model = cnn().eval()
    outputs["cnn.input"] = torch.randn(2, 3, 8, 8, generator=generator)
    with torch.no_grad():
        outputs["mlp.output"] = model(outputs["mlp.input"])
        outputs["cnn.eval_output"] = cnn_model(outputs["cnn.input"])
        cnn_model.train()
        outputs["cnn.train_output"] = cnn_model(outputs["cnn.input"])
    for name, buffer in cnn_model[1].named_buffers():
        outputs["cnn.1." + name] = buffer.clone()
    return outputs


def big_endian_copy(source, target):
    """Rewrites a little-endian torch.save archive as a big-endian host would have written it."""
    buffer = io.BytesIO(source.read_bytes())
    sd = torch.load(source, weights_only=True)
    element_size = {}
    for index, t in enumerate(sd.values()):
        element_size[str(index)] = t.element_size() // (2 if t.dtype.is_complex else 1)
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            stem = info.filename.split("/", 1)[1]
            if stem == "byteorder":
                data = b"big"
            elif stem.startswith("data/"):
                width = element_size[stem.removeprefix("data/")]
                data = b"".join(data[i:i + width][::-1] for i in range(0, len(data), width))
            dst.writestr(info.filename, data)


class Exploit:
    """Pickles as a call of os.system: loading must refuse it and never run it."""

    def __reduce__(self):
        import os
        return (os.system, ("echo modhooks-must-not-run-this",))


def main(out_dir: pathlib.Path):
    out = out_dir / "checkpoints"
    out.mkdir(parents=True, exist_ok=True)
    expected = {}
    generator = torch.Generator().manual_seed(1234)

    def save(name, sd):
        torch.save(sd, out / name)
        expected[name] = describe(sd)

    save("mlp.pt", mlp().state_dict())
    save("cnn.pt", cnn().state_dict())
    save("parameters.pt", mlp().state_dict(keep_vars=True))

    dtypes = collections.OrderedDict()
    for dtype in V2_DTYPES:
        dtypes[dtype_name(dtype)] = sample(dtype, (3, 5), generator)
    dtypes["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    dtypes["empty"] = torch.zeros(0, 3)
    save("dtypes.pt", dtypes)

    new_dtypes = collections.OrderedDict(
        (dtype_name(d), sample(d, (2, 4), generator)) for d in V3_DTYPES)
    save("dtypes_v3.pt", new_dtypes)

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    views = collections.OrderedDict(
        base=base, row=base[1], column=base[:, 2], transposed=base.t(), block=base[1:3, 2:5],
        other=torch.ones(2, dtype=torch.int16))
    save("views.pt", views)

    save("plain_dict.pt", dict(mlp().state_dict()))
    # The most objects per byte of file a module's state dict has: hundreds of one-element
    # parameters and buffers over hundreds of submodules, each with its _metadata entry
    # (tests/load_memory_test.cpp); and 2,000 views of one small tensor.
    tiny = torch.nn.Sequential(*[
        torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.BatchNorm1d(1)) for _ in range(100)])
    torch.save(tiny.state_dict(), out / "tiny_modules.pt")
    row = torch.arange(4, dtype=torch.float32)
    torch.save(collections.OrderedDict((f"v{i}", row[i % 4:]) for i in range(2000)),
               out / "many_views.pt")
    # dtypes torch.save writes through _rebuild_tensor_v3 that only the newest libtorch has.
    raw = torch.randint(0, 256, (3, 4), generator=generator, dtype=torch.uint8)
    save("dtypes_newest.pt", collections.OrderedDict(
        complex32=sample(torch.complex64, (2, 3), generator).to(torch.complex32),
        float8_e8m0fnu=raw.view(torch.float8_e8m0fnu),
        float4_e2m1fn_x2=raw.clone().view(torch.float4_e2m1fn_x2)))
    # An empty tensor and its view as another dtype share an empty storage, which torch.save
    # writes under one key with two storage types.
    empty = torch.empty(0)
    save("empty_views.pt", collections.OrderedDict(e=empty, v=empty.view(torch.int32)))
    # torch.save with CRC-32s off records 0 as every record's CRC-32.
    torch.serialization.set_crc32_options(False)
    try:
        save("crc_off.pt", mlp().state_dict())
    finally:
        torch.serialization.set_crc32_options(True)
    torch.save(model_outputs(generator), out / "outputs.pt")

    big = out / "big_endian.pt"
    big_endian_copy(out / "dtypes.pt", big)
    reloaded = torch.load(big, weights_only=True)
    for key, t in dtypes.items():
        assert row_major_bytes(reloaded[key]) == row_major_bytes(t), key
    expected["big_endian.pt"] = expected["dtypes.pt"]

    st = collections.OrderedDict(
        (dtype_name(d), sample(d, (2, 3), generator)) for d in SAFETENSORS_DTYPES)
    st["scalar"] = torch.tensor(7, dtype=torch.int32)
    st["empty"] = torch.zeros(0, 2, dtype=torch.float16)
    safetensors.torch.save_file(st, out / "tensors.safetensors", metadata={"format": "pt"})
    # Python's load_file order (the file's layout order) is the order modhooks must give too.
    expected["tensors.safetensors"] = describe(
        safetensors.torch.load_file(out / "tensors.safetensors"))
    e8m0 = collections.OrderedDict(
        a=torch.randint(0, 256, (2, 3), generator=generator, dtype=torch.uint8).view(
            torch.float8_e8m0fnu))
    safetensors.torch.save_file(e8m0, out / "tensors_e8m0.safetensors")
    expected["tensors_e8m0.safetensors"] = describe(e8m0)
    st_new = collections.OrderedDict(
        (dtype_name(d), sample(d, (2, 3), generator)) for d in SAFETENSORS_NEW_DTYPES)
    safetensors.torch.save_file(st_new, out / "tensors_new.safetensors")
    expected["tensors_new.safetensors"] = describe(
        safetensors.torch.load_file(out / "tensors_new.safetensors"))

    # Files that are not state dicts, each with the text its error must contain.
    torch.save({"layer": torch.nn.Linear(2, 2)}, out / "module_object.pt")
    torch.save({"w": Exploit()}, out / "exploit.pt")
    torch.save({"model": mlp().state_dict(), "epoch": 3}, out / "nested.pt")
    torch.save([torch.ones(2)], out / "list.pt")
    with zipfile.ZipFile(out / "mlp.pt") as src, \
            zipfile.ZipFile(out / "compressed.pt", "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    expected["errors"] = {
        "module_object.pt": "torch.nn.modules.linear.Linear",
        "exploit.pt": "posix.system",
        "nested.pt": "'model' is a dict, not a tensor",
        "list.pt": "data.pkl holds a list, not a state dict",
        "compressed.pt": "is compressed (method 8)",
    }

    (out / "expected.json").write_text(json.dumps(expected, indent=1))
