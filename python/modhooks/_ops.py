# SPDX-License-Identifier: BSD-3-Clause
"""The hook-point operators, declared for export in Python: exporting needs no C++ library.

Three operators, each taking the tensors at a module boundary, the order token and the
module's path, and returning nothing:

- ``modhooks::output_point_(Tensor(a!)[] xs, Tensor(b!) token, str name) -> ()`` writes a
  replacement into the module's output tensors. Inductor re-inplaces it, so it costs no copy;
  it is placed only where every output tensor is fresh (not an input, a parameter, a buffer or
  a view).
- ``modhooks::output_point(Tensor[] xs, Tensor(a!)[] outs, Tensor(b!) token, str name) -> ()``
  writes the outputs (or their replacements) into new tensors ``outs`` that the graph
  allocates: for outputs that alias something else (``nn.Identity``, ``nn.Flatten``), where
  writing in place would write into the aliased tensor.
- ``modhooks::input_point(...)``, the same schema at a module's inputs, where pre-hooks run:
  always copying, since an input is also seen by whoever else uses it.

None returns a tensor: an operator returning an alias of its input is silently wrong (Inductor
reuses the input's buffer for a later kernel), and functionalization refuses a mutating operator
that returns tensors. Every point of a program writes into one empty ``token`` tensor, which
chains them all: points on independent branches fire in the order eager Python ran them (an
``ORDERED`` effect would order only operators that mutate nothing). The kernels never touch the
token. The C++ runtime registers the same schemas with kernels that call C++ hooks; in Python
the kernels below call the hooks of the package ``modhooks.runtime`` runs on the calling thread,
or do nothing.
"""

from __future__ import annotations

import threading

import torch
from torch import Tensor

# The package whose hooks the kernels call on this thread (modhooks.runtime sets it around a run).
current = threading.local()


# The kernels take tensors of any strides (they copy with copy_ and compare sizes only), so
# Inductor may hand them the layout it chose: without this, a point pins the traced (NCHW)
# layout, and a ResNet compiled for channels-last gains a layout copy before and after each.
_ANY_LAYOUT = (torch.Tag.flexible_layout,)


def _runner():
    return getattr(current, "runner", None)


@torch.library.custom_op("modhooks::output_point_", mutates_args=("xs", "token"), tags=_ANY_LAYOUT)
def output_point_(xs: list[Tensor], token: Tensor, name: str) -> None:
    runner = _runner()
    if runner is not None:
        replaced = runner.fire_output(name, xs)
        if replaced is not None:
            for x, r in zip(xs, replaced):
                x.copy_(r)


@output_point_.register_fake
def _(xs, token, name):
    return None


def _write_copies(outs: list[Tensor], xs: list[Tensor], replaced) -> None:
    for out, x in zip(outs, xs if replaced is None else replaced):
        out.copy_(x)


@torch.library.custom_op("modhooks::output_point", mutates_args=("outs", "token"), tags=_ANY_LAYOUT)
def output_point(xs: list[Tensor], outs: list[Tensor], token: Tensor, name: str) -> None:
    runner = _runner()
    _write_copies(outs, xs, runner.fire_output(name, xs) if runner is not None else None)


@torch.library.custom_op("modhooks::input_point", mutates_args=("outs", "token"), tags=_ANY_LAYOUT)
def input_point(xs: list[Tensor], outs: list[Tensor], token: Tensor, name: str) -> None:
    runner = _runner()
    _write_copies(outs, xs, runner.fire_input(name, xs) if runner is not None else None)


@output_point.register_fake
@input_point.register_fake
def _(xs, outs, token, name):
    return None


# The hook-point operator of ExecuTorch programs (``export(..., backend="executorch")``). ExecuTorch
# runs out-variant operators on memory its planner lays out ahead of time, so a point is a
# functional operator that returns new tensors, which the module's callers then use:
#
# - ``modhooks::point(Tensor[] xs, str name, bool inputs) -> Tensor[]``, a copy of ``xs`` at the
#   inputs (``inputs`` true) or the output of module ``name``;
# - ``modhooks::point.out(..., *, Tensor(a!)[] out) -> ()``, the form ``to_executorch`` puts in
#   the program, which the C++ runtime (component ``executorch``) implements: it copies ``xs``
#   into the planned ``out`` and calls the hooks on ``out``.
#
# Every point writes tensors of its own, so no hook can write into an input, a parameter or a
# view, whatever the module returned. The copies are contiguous: ExecuTorch's tensors are.
_executorch_lib = torch.library.Library("modhooks", "FRAGMENT")
_executorch_lib.define("point(Tensor[] xs, str name, bool inputs) -> Tensor[]")
_executorch_lib.define("point.out(Tensor[] xs, str name, bool inputs, *, Tensor(a!)[] out) -> ()")


def _point(xs: list[Tensor], name: str, inputs: bool) -> list[Tensor]:
    return [x.clone(memory_format=torch.contiguous_format) for x in xs]


def _point_out(xs: list[Tensor], name: str, inputs: bool, *, out: list[Tensor]) -> None:
    for o, x in zip(out, xs):
        o.copy_(x)


_executorch_lib.impl("point", _point, "CompositeExplicitAutograd")
_executorch_lib.impl("point.out", _point_out, "CompositeExplicitAutograd")


@torch.library.register_fake("modhooks::point")
def _(xs, name, inputs):
    return [torch.empty(x.shape, dtype=x.dtype, device=x.device) for x in xs]
