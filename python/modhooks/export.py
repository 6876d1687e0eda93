# SPDX-License-Identifier: BSD-3-Clause
"""Exporting a model with hook points at its module boundaries.

``export`` traces the model with ``torch.export.export`` while Python forward hooks on the
chosen submodules put a hook-point operator on each one's output (and, for ``inputs``, a
forward pre-hook on its inputs); ``aoti_compile_and_package`` compiles the program with
AOTInductor and writes the point table into the package's metadata, where the C++ runtime
(``modhooks::aoti::Model``) reads it. With ``backend="executorch"`` the points take the form
ExecuTorch runs, and ``to_executorch`` writes a ``.pte`` that ``modhooks::executorch::Program``
runs.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

import torch
from torch.utils import _pytree as pytree

from . import ABI, _ops

# Metadata keys of a package; the C++ runtime reads the same ones (src/aoti/package.cpp).
ABI_KEY = "modhooks.abi"
POINTS_KEY = "modhooks.points"
# The constant methods of an ExecuTorch program that hold the same (src/executorch/program.cpp).
EXECUTORCH_ABI_METHOD = "modhooks_abi"
EXECUTORCH_POINTS_METHOD = "modhooks_points"
BACKENDS = ("aoti", "executorch")

Selector = Iterable[str] | Callable[[str, torch.nn.Module], bool] | None


def _chosen(model: torch.nn.Module, selector: Selector, default_all: bool) -> dict[str, torch.nn.Module]:
    modules = dict(model.named_modules())
    if selector is None:
        return {n: m for n, m in modules.items() if n} if default_all else {}
    if callable(selector):
        return {n: m for n, m in modules.items() if selector(n, m)}
    chosen = {}
    for name in selector:
        if name not in modules:
            raise KeyError(
                f"modhooks.export: {name!r} is not a submodule of the model "
                f"(named_modules() has {sorted(n for n in modules if n)})"
            )
        chosen[name] = modules[name]
    return chosen


def _own_tensors(model: torch.nn.Module) -> set[int]:
    """The ids of the tensors the model holds: parameters, buffers and plain tensor attributes
    (constants), shared ones included."""
    owned: set[int] = set()
    for module in model.modules():
        for held in (module._parameters.values(), module._buffers.values(), vars(module).values()):
            owned |= {id(t) for t in held if isinstance(t, torch.Tensor)}
    return owned


class _Placer:
    """The hooks that put the points while the model is traced, and what they saw."""

    def __init__(self, model: torch.nn.Module, strict: bool, backend: str):
        self.model = model
        self.backend = backend
        # Strict export traces the hooks with the real tensors' identities; non-strict export
        # swaps fake tensors into the model while it traces, so a point looks at what the model
        # holds then (see `owned`).
        self.strict = strict
        self._owned = _own_tensors(model)
        self.args: dict[str, list[set[int]]] = {}  # ids of each open call's input tensors
        self.table: dict[str, dict[str, Any]] = {}  # point name -> its metadata, graph order
        self._token: torch.Tensor | None = None
        # Set for an eager run that fills `table` only (see `export`): no operator is placed.
        self.recording = False

    def owned(self) -> set[int]:
        """The ids of the tensors the model holds while it is traced."""
        return self._owned if self.strict else self._owned | _own_tensors(self.model)

    def token(self) -> torch.Tensor:
        """The empty tensor every point writes into, which chains the points in tracing order."""
        if self._token is None:
            self._token = torch.empty(0)
        return self._token

    def entry(self, name: str, module: torch.nn.Module) -> dict[str, Any]:
        return self.table.setdefault(
            name, {"name": name, "type": type(module).__name__, "inputs": False, "outputs": False}
        )

    def remember_args(self, name: str):
        def pre(module, args, kwargs):
            leaves = pytree.tree_leaves((args, kwargs))
            self.args.setdefault(name, []).append({id(t) for t in leaves if isinstance(t, torch.Tensor)})

        return pre

    def input_point(self, name: str):
        def pre(module, args, kwargs):
            leaves, spec = pytree.tree_flatten((args, kwargs))
            at = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]
            if not at:
                return None
            self.entry(name, module)["inputs"] = True
            if self.recording:
                return None
            if self.backend == "executorch":
                return self._functional(name, True, leaves, spec, at)
            owned = self.owned()
            return self._copying(torch.ops.modhooks.input_point, name, leaves, spec, at, owned)

        return pre

    def output_point(self, name: str):
        def post(module, args, kwargs, output):
            opened = self.args[name].pop()
            leaves, spec = pytree.tree_flatten(output)
            at = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]
            if not at:
                return None
            entry = self.entry(name, module)
            entry["outputs"] = True
            entry["single"] = isinstance(output, torch.Tensor)
            if self.recording:
                return None
            if self.backend == "executorch":
                return self._functional(name, False, leaves, spec, at)
            tensors = [leaves[i] for i in at]
            owned = self.owned()
            if (all(self._fresh(t, opened, owned) for t in tensors)
                    and len({id(t) for t in tensors}) == len(tensors)):
                torch.ops.modhooks.output_point_(tensors, self.token(), name)
                return None
            return self._copying(torch.ops.modhooks.output_point, name, leaves, spec, at, owned)

        return post

    def _copying(self, op, name: str, leaves: list, spec, at: list[int], owned: set[int]):
        """The copying operator `op` on the tensors `leaves[at]`: the structure rebuilt with the
        new tensors it writes, which the module's caller (or the module) then uses. The copy of a
        tensor the model holds (`owned`) is made from its sizes alone: `empty_like` of a constant
        would be a constant too, which the compiled program cannot write."""
        copies = [torch.empty(leaves[i].shape, dtype=leaves[i].dtype, device=leaves[i].device)
                  if id(leaves[i]) in owned else torch.empty_like(leaves[i]) for i in at]
        op([leaves[i] for i in at], copies, self.token(), name)
        for i, c in zip(at, copies):
            leaves[i] = c
        return pytree.tree_unflatten(leaves, spec)

    @staticmethod
    def _functional(name: str, inputs: bool, leaves: list, spec, at: list[int]):
        """ExecuTorch's point on the tensors `leaves[at]`: the structure rebuilt with the new
        tensors the operator returns."""
        for i, c in zip(at, torch.ops.modhooks.point([leaves[i] for i in at], name, inputs)):
            leaves[i] = c
        return pytree.tree_unflatten(leaves, spec)

    @staticmethod
    def _fresh(t: torch.Tensor, inputs: set[int], owned: set[int]) -> bool:
        """Whether writing into `t` changes nothing but the module's output: not one of the
        call's inputs, not a parameter, buffer or constant, not a view of another tensor."""
        return id(t) not in inputs and id(t) not in owned and t._base is None


def export(
    model: torch.nn.Module,
    args: tuple,
    kwargs: dict | None = None,
    points: Selector = None,
    inputs: Selector = None,
    dynamic_shapes: Any = None,
    strict: bool = False,
    backend: str = "aoti",
) -> torch.export.ExportedProgram:
    """``torch.export.export`` with a hook point on the output of every chosen submodule.

    ``points``: module paths as ``named_modules()`` names them, or a predicate
    ``(name, module) -> bool``; by default every submodule (the root, ``""``, only when named).
    ``inputs``: modules whose inputs are points too, where pre-hooks run and which forward hooks
    see as ``args``. Traced under ``torch.no_grad()``: AOTInductor packages and ExecuTorch
    programs are for inference. ``backend``: ``"aoti"`` for ``aoti_compile_and_package``,
    ``"executorch"`` for ``to_executorch``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"modhooks.export: backend {backend!r} is not one of {BACKENDS}")
    outputs = _chosen(model, points, default_all=True)
    at_inputs = _chosen(model, inputs, default_all=False)
    placer = _Placer(model, strict, backend)
    handles = []
    try:
        for name, module in at_inputs.items():
            handles.append(module.register_forward_pre_hook(placer.input_point(name), with_kwargs=True))
        for name, module in outputs.items():
            # After the input point, so that an input copied there counts as this call's input.
            handles.append(module.register_forward_pre_hook(placer.remember_args(name), with_kwargs=True))
            handles.append(module.register_forward_hook(placer.output_point(name), with_kwargs=True))
        with torch.no_grad():
            ep = torch.export.export(
                model, tuple(args), kwargs, dynamic_shapes=dynamic_shapes, strict=strict
            )
            if strict:
                # Strict export traces the hooks with TorchDynamo, which keeps what they put in
                # the graph and drops what they write into Python objects: the point table.
                _record_table(model, args, kwargs, placer)
    finally:
        for h in handles:
            h.remove()
    _check_in_place_points(ep)
    ep.graph_module.meta[POINTS_KEY] = _in_graph_order(ep, placer.table)
    return ep


def _record_table(model: torch.nn.Module, args: tuple, kwargs: dict | None, placer: _Placer) -> None:
    """Fills `placer.table` by running `model` once in eager with its hooks recording only; the
    model's buffers are put back as they were (a BatchNorm in training mode would update them)."""
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    placer.recording = True
    try:
        model(*args, **(kwargs or {}))
    finally:
        placer.recording = False
        for name, b in model.named_buffers():
            b.copy_(buffers[name])


def _check_in_place_points(ep: torch.export.ExportedProgram) -> None:
    """Refuses a program where the in-place operator writes into what the graph takes in (a
    parameter, buffer, constant or input, or a view of one): the compiled package would return
    the written tensors as extra outputs and change the model's own tensors. `_Placer` chooses
    the copying operator there; this reads the traced graph to prove it did."""
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.modhooks.output_point_.default:
            continue
        for arg in node.args[0]:
            source = arg
            while source.op == "call_function" and _is_view(source.target):
                source = source.args[0]
            if source.op in ("placeholder", "get_attr"):
                raise RuntimeError(
                    f"modhooks.export: the point {node.args[-1]!r} would write into "
                    f"{source.target!r}, which the program takes in; please report this "
                    "(modhooks chose the in-place operator for a tensor the model holds)"
                )


def _is_view(target) -> bool:
    """Whether the graph's operator `target` returns a view of its first argument."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def _in_graph_order(ep: torch.export.ExportedProgram, table: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The points the graph holds, in the order its nodes call them (a name traced twice, or a
    point an export pass dropped, is listed as the graph has it)."""
    order: list[str] = []
    for name in _point_calls(ep.graph):
        if name not in order:
            order.append(name)
    return [table[n] for n in order if n in table]


def _point_calls(graph: torch.fx.Graph) -> list[str]:
    """The point names of `graph`'s point operators (either backend's), in node order."""
    aoti = {torch.ops.modhooks.output_point_.default, torch.ops.modhooks.output_point.default,
            torch.ops.modhooks.input_point.default}
    names = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in aoti:
            names.append(node.args[-1])
        elif _is_executorch_point(node.target):
            names.append(node.args[1])
    return names


def _is_executorch_point(target) -> bool:
    """Whether `target` is ExecuTorch's point operator, as export or an edge program holds it."""
    return getattr(target, "_schema", None) is not None and target._schema.name == "modhooks::point"


def point_table(ep: torch.export.ExportedProgram) -> list[dict[str, Any]]:
    """The points of a program made by ``export``: name, module type, whether inputs and
    outputs are points, and whether the output is a single tensor."""
    return list(ep.graph_module.meta.get(POINTS_KEY, []))


def aoti_compile_and_package(
    ep: torch.export.ExportedProgram,
    package_path: str | None = None,
    inductor_configs: dict[str, Any] | None = None,
) -> str:
    """``torch._inductor.aoti_compile_and_package``, with the point table and the modhooks ABI
    in the package's metadata (``aot_inductor.metadata``). A program exported without points
    compiles too: its package lists none."""
    if _backend_of(ep) == "executorch":
        raise ValueError("modhooks.aoti_compile_and_package: this program was exported with "
                         "backend='executorch'; export it with backend='aoti' (the default)")
    configs = dict(inductor_configs or {})
    metadata = dict(configs.get("aot_inductor.metadata", {}))
    metadata[ABI_KEY] = ABI
    metadata[POINTS_KEY] = json.dumps(point_table(ep), separators=(",", ":"))
    configs["aot_inductor.metadata"] = metadata
    return torch._inductor.aoti_compile_and_package(
        ep, package_path=package_path, inductor_configs=configs
    )


def _backend_of(ep: torch.export.ExportedProgram) -> str | None:
    """The backend whose points `ep` holds; None where it has none."""
    for node in ep.graph.nodes:
        if node.op == "call_function" and _is_executorch_point(node.target):
            return "executorch"
    return "aoti" if _point_calls(ep.graph) else None


def to_executorch(
    ep: torch.export.ExportedProgram,
    path: str,
    partitioners: list | None = None,
) -> str:
    """Lowers a program made by ``export(..., backend="executorch")`` with ExecuTorch's
    ``to_edge_transform_and_lower`` (``partitioners``, e.g. ``[XnnpackPartitioner()]``, delegate
    what they take) and ``to_executorch``, and writes the ``.pte`` to ``path`` with the point
    table and the modhooks ABI as the program's constant methods ``modhooks_points`` and
    ``modhooks_abi``. A point is never delegated (no backend takes its operator), so it splits a
    partition; where a partitioner swallowed one anyway this raises ``RuntimeError`` naming it,
    rather than writing a program where it would never fire. Returns ``path``."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    if _backend_of(ep) == "aoti":
        raise ValueError("modhooks.to_executorch: this program was exported with backend='aoti'; "
                         "export it with backend='executorch'")
    table = point_table(ep)
    edge = to_edge_transform_and_lower(
        ep,
        partitioner=list(partitioners or []),
        # A point is not an operator of ExecuTorch's core set.
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
        constant_methods={EXECUTORCH_ABI_METHOD: ABI,
                          EXECUTORCH_POINTS_METHOD: json.dumps(table, separators=(",", ":"))},
    )
    kept = set(_point_calls(edge.exported_program().graph))
    lost = [p["name"] for p in table if p["name"] not in kept]
    if lost:
        raise RuntimeError(f"modhooks.to_executorch: the points {lost} are inside a delegated "
                           "partition, where they could not fire; export without them or "
                           "partition without that backend")
    program = edge.to_executorch()
    with open(path, "wb") as f:
        f.write(program.buffer)
    return path
