# SPDX-License-Identifier: BSD-3-Clause
"""Writes the AOTInductor packages the aoti tests load, and what Python eager does on the same
weights: the oracle of tests/aoti_test.cpp.

For each case, into the folder given as the first argument:
- <case>.pt2: the model exported with modhooks.export (points as the case says) and compiled;
- <case>.plain.pt2 for some: the same model compiled without points (torch.export as is);
- <case>.json: the point table, eager's firing order (point names, one per call), which point
  the replacement test doubles, which inputs were fed;
- <case>.safetensors: the inputs ("input.<i>"), every tensor each firing showed eager's forward
  hooks ("fire.<n>.<k>"), eager's outputs ("output.<j>") and eager's outputs with the
  replacement hook ("replaced.<j>"), and for cases with input points what eager's pre-hooks saw
  ("pre.<n>.<k>").

Beside them, call_sequence.oracle.json: Python's answers for the forward-hook call sequences of
tests/call_sequence_test.cpp, which replays them on call_sequence.pt2 (oracle_call_sequence.py's
`Parent`, points on `target` with its inputs and on `target.inner`).

Compiling takes minutes on two cores, so the folder is reused while this script, the modhooks
Python package and torch stay the same (a stamp names their hash). With `--cuda`, only the case
the GPU machine's check runs: a package compiled for CUDA (branchy_cuda).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(HERE))  # oracle_call_sequence

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import modhooks.export as mhx  # noqa: E402


class Two(nn.Module):
    """Returns a tuple."""

    def forward(self, x):
        return x * 2, x + 1


class Branchy(nn.Module):
    """Independent branches, an Identity (returns its input), a module called twice (relu),
    a tuple output and a Flatten (a view)."""

    def __init__(self):
        super().__init__()
        self.id = nn.Identity()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.relu = nn.ReLU()
        self.two = Two()
        self.flat = nn.Flatten()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = self.id(x)
        p = self.relu(self.a(x))
        q = self.relu(self.b(x))
        u, v = self.two(p + q)
        return self.head(self.flat(u.unsqueeze(1))), v


class Holds(nn.Module):
    """Returns a tensor it holds, as `which` says: its parameter (a learned table), its buffer (a
    cache), a view of the buffer, or a constant (a plain tensor attribute)."""

    def __init__(self, which: str):
        super().__init__()
        self.which = which
        self.weight = nn.Parameter(torch.randn(4, 8))
        self.register_buffer("cache", torch.randn(4, 8))
        self.scale = torch.randn(8)

    def forward(self, x):
        if self.which == "parameter":
            return self.weight
        if self.which == "buffer":
            return self.cache
        if self.which == "view":
            return self.cache[:2]
        return self.scale


class OwnTensors(nn.Module):
    """Submodules that return their own tensors, which a point must not write into."""

    def __init__(self):
        super().__init__()
        self.pos = Holds("parameter")
        self.cache = Holds("buffer")
        self.head = Holds("view")
        self.scale = Holds("constant")
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        out = self.lin(x + self.pos(x)) * self.scale(x)
        return out + self.cache(x).sum() + self.head(x).mean()


def tensors(value) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def doubled(value):
    return pytree.tree_map(lambda t: t * 2 if isinstance(t, torch.Tensor) else t, value)


def eager(model, inputs, names, input_names, replace=None):
    """Runs `model` with Python forward hooks on `names`; returns the firings (name, tensors),
    the pre-hook firings and the outputs."""
    fired, pre_fired, handles = [], [], []
    modules = dict(model.named_modules())
    for name in names:
        def hook(module, args, output, name=name):
            if tensors(output):
                fired.append((name, [t.clone() for t in tensors(output)]))
            if name == replace:
                return doubled(output)
            return None

        handles.append(modules[name].register_forward_hook(hook))
    for name in input_names:
        def pre(module, args, name=name):
            pre_fired.append((name, [t.clone() for t in tensors(args)]))

        handles.append(modules[name].register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            out = model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return fired, pre_fired, tensors(out)


def write_case(folder: pathlib.Path, case: str, model, inputs, points=None, inputs_at=None,
               replace=None, plain=False, dynamic_shapes=None, extra_inputs=(), strict=False):
    model.eval()
    ep = mhx.export(model, tuple(inputs), points=points, inputs=inputs_at,
                    dynamic_shapes=dynamic_shapes, strict=strict)
    mhx.aoti_compile_and_package(ep, package_path=str(folder / f"{case}.pt2"))
    if plain:
        with torch.no_grad():
            plain_ep = torch.export.export(model, tuple(inputs), dynamic_shapes=dynamic_shapes)
        torch._inductor.aoti_compile_and_package(plain_ep, package_path=str(folder / f"{case}.plain.pt2"))
    record_case(folder, case, model, inputs, mhx.point_table(ep), replace, plain, extra_inputs)


def record_case(folder: pathlib.Path, case: str, model, inputs, table, replace, plain,
                extra_inputs=()) -> None:
    """Writes <case>.json and <case>.safetensors: what eager's hooks on the points of `table` see
    and return, on `inputs` and each of `extra_inputs` (see the top of this file)."""
    names = [p["name"] for p in table if p["outputs"]]
    input_names = [p["name"] for p in table if p["inputs"]]
    record = {}
    runs = []
    for r, feed in enumerate([list(inputs)] + [list(e) for e in extra_inputs]):
        prefix = "" if r == 0 else f"run{r}."
        fired, pre_fired, out = eager(model, feed, names, input_names)
        _, _, replaced = eager(model, feed, names, [], replace=replace)
        for i, t in enumerate(feed):
            record[f"{prefix}input.{i}"] = t
        for n, (_, ts) in enumerate(fired):
            for k, t in enumerate(ts):
                record[f"{prefix}fire.{n}.{k}"] = t
        for n, (_, ts) in enumerate(pre_fired):
            for k, t in enumerate(ts):
                record[f"{prefix}pre.{n}.{k}"] = t
        for j, t in enumerate(out):
            record[f"{prefix}output.{j}"] = t
        for j, t in enumerate(replaced):
            record[f"{prefix}replaced.{j}"] = t
        runs.append({"inputs": len(feed), "order": [n for n, _ in fired],
                     "pre_order": [n for n, _ in pre_fired], "outputs": len(out)})
    save_file({k: v.contiguous() for k, v in record.items()}, str(folder / f"{case}.safetensors"))
    (folder / f"{case}.json").write_text(json.dumps(
        {"points": table, "runs": runs, "replace": replace, "plain": plain}, indent=1))
    print(f"{folder.name}: {case}: {len(table)} points", flush=True)


def write_shared_cases(folder: pathlib.Path, write) -> None:
    """The cases every compiled kind's fixture writes, each with its kind's `write` (this file's
    `write_case`, executorch_programs.py's `write_program`): a small ViT, a submodule that returns
    its own tensors, and the call-sequence scenarios on a point with inputs."""
    import torchvision

    import oracle_call_sequence as ocs

    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                               num_heads=2, hidden_dim=32, mlp_dim=64,
                                               num_classes=10)
    write(folder, "vit", vit, [torch.randn(2, 3, 32, 32)],
          replace="encoder.layers.encoder_layer_0")
    # Points on a submodule that returns its own tensors: copying points, one output as eager's.
    for strict in (False, True):
        write(folder, "own_tensors_strict" if strict else "own_tensors", OwnTensors(),
              [torch.randn(4, 8)], replace="pos", plain=True, strict=strict)
    # The call-sequence scenarios (tests/call_sequence_test.cpp) and Python's answers for them:
    # float64, no weights.
    write(folder, "call_sequence", ocs.Parent(), [ocs.example_input()],
          points=["target", "target.inner"], inputs_at=["target"])
    (folder / "call_sequence.oracle.json").write_text(json.dumps(ocs.oracle(), indent=1))


def build(folder: pathlib.Path) -> None:
    import torchvision
    import transformers

    torch.manual_seed(0)
    net = Branchy()
    x = torch.randn(4, 8)
    write_case(folder, "branchy", net, [x], inputs_at=["a", "two"], replace="a", plain=True)

    batch = torch.export.Dim("batch", min=2, max=64)
    write_case(folder, "dynamic", Branchy(), [torch.randn(4, 8)], replace="two",
               dynamic_shapes={"x": {0: batch}},
               extra_inputs=[[torch.randn(3, 8)], [torch.randn(7, 8)]])

    resnet = torchvision.models.resnet18(num_classes=10)
    image = torch.randn(2, 3, 64, 64)
    write_case(folder, "resnet18", resnet, [image], replace="layer2.0.bn1")
    blocks = [n for n, m in resnet.named_modules() if type(m).__name__ == "BasicBlock"]
    write_case(folder, "resnet18_blocks", resnet, [image], points=blocks, replace="layer3.1",
               plain=True)

    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=64)
    bert = transformers.BertModel(config)
    ids = torch.randint(0, 100, (2, 16))
    write_case(folder, "bert", bert, [ids], replace="encoder.layer.0.output")

    write_shared_cases(folder, write_case)

    # A package from another modhooks ABI: the same program, its metadata says 9.9.
    ep = mhx.export(Branchy().eval(), (x,))
    torch._inductor.aoti_compile_and_package(
        ep, package_path=str(folder / "other_abi.pt2"),
        inductor_configs={"aot_inductor.metadata": {mhx.ABI_KEY: "9.9", mhx.POINTS_KEY: "[]"}})
    # The two refusals that come before the compiled library is loaded: each package's library
    # cut short, so that a refusal made after loading it would be aoti.package.unloadable.
    rewritten(folder / "other_abi.pt2", folder / "other_abi_broken_library.pt2", {})
    rewritten(folder / "branchy.pt2", folder / "cuda_device_broken_library.pt2",
              {"AOTI_DEVICE_KEY": "cuda"})


def rewritten(source: pathlib.Path, target: pathlib.Path, metadata: dict[str, str]) -> None:
    """`source` as `target`, its metadata's keys `metadata` changed and its compiled library cut to
    its first 64 bytes."""
    import zipfile

    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("_metadata.json"):
                data = json.dumps({**json.loads(data), **metadata}).encode()
            elif info.filename.endswith(".so"):
                data = data[:64]
            dst.writestr(info.filename, data)


def build_cuda(folder: pathlib.Path) -> None:
    """The device check's case (scripts/device-check.sh): the branchy model compiled for CUDA,
    with eager's record on the same device. Needs no torchvision or transformers."""
    torch.manual_seed(0)
    write_case(folder, "branchy_cuda", Branchy().cuda(), [torch.randn(4, 8, device="cuda")],
               inputs_at=["a"], replace="a")


def stamp() -> str:
    digest = hashlib.sha256(torch.__version__.encode())
    for path in ([pathlib.Path(__file__), HERE / "oracle_call_sequence.py"]
                 + sorted((ROOT / "python" / "modhooks").glob("*.py"))):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_once(folder: pathlib.Path, digest: str, build_into) -> None:
    """`build_into(folder)` unless the folder's stamp says it was built for `digest`."""
    marker = folder / "stamp"
    if marker.exists() and marker.read_text() == digest:
        print(f"{folder.name}: up to date")
        return
    marker.unlink(missing_ok=True)
    build_into(folder)
    marker.write_text(digest)


def main() -> None:
    folder = pathlib.Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    if sys.argv[2:] == ["--cuda"]:
        if not torch.cuda.is_available():
            print("aoti_packages: --cuda: torch sees no CUDA device; nothing written")
            return
        build_cuda(folder)
        return
    build_once(folder, stamp(), build)


if __name__ == "__main__":
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    main()
