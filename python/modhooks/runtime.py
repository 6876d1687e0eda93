# SPDX-License-Identifier: BSD-3-Clause
"""Running a package with hook points from Python, through the same operators the C++ runtime
serves: hooks registered here fire inside the compiled model. Meant for tests and for checking
a package before it ships; C++ programs use ``modhooks::aoti::Model``.

A hook sees the point's name where eager Python passes the module, and copies of the tensors
(the compiled model reuses its buffers, so a hook may keep what it gets). What a hook writes
into them in place, or returns instead, is what the module's caller (for a pre-hook, the module)
receives, as in C++; a replacement of other sizes, dtype or device raises ``ValueError``.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import torch

from . import ABI, _ops
from .export import ABI_KEY, POINTS_KEY


class _Handle:
    def __init__(self, hooks: list, entry: Any):
        self._hooks, self._entry = hooks, entry

    def remove(self) -> None:
        if self._entry in self._hooks:
            self._hooks.remove(self._entry)


class Package:
    """An AOTInductor package made by ``modhooks.export.aoti_compile_and_package``."""

    def __init__(self, path: str):
        self._model = torch._inductor.aoti_load_package(path)
        metadata = self._model.get_metadata()
        abi = metadata.get(ABI_KEY)
        if abi is None:
            self.table: list[dict[str, Any]] = []
        elif abi != ABI:
            raise RuntimeError(
                f"modhooks: {path} was exported for the modhooks ABI {abi}; this is {ABI}"
            )
        else:
            self.table = json.loads(metadata[POINTS_KEY])
        self._by_name = {p["name"]: p for p in self.table}
        self._pre: dict[str, list[Callable]] = {}
        self._forward: dict[str, list[Callable]] = {}
        self._args: dict[str, tuple] = {}
        self._error: BaseException | None = None  # what a hook raised in the current run

    @property
    def points(self) -> list[str]:
        return [p["name"] for p in self.table]

    def _point(self, name: str) -> dict[str, Any]:
        if name not in self._by_name:
            raise KeyError(f"modhooks: no point {name!r} in this package (it has {self.points})")
        return self._by_name[name]

    def register_forward_hook(self, name: str, hook: Callable) -> _Handle:
        """``hook(name, args, output)``; may return a replacement output."""
        self._point(name)
        hooks = self._forward.setdefault(name, [])
        hooks.append(hook)
        return _Handle(hooks, hook)

    def register_forward_pre_hook(self, name: str, hook: Callable) -> _Handle:
        """``hook(name, args)``; may return replacement args (a tuple of tensors)."""
        self._point(name)
        hooks = self._pre.setdefault(name, [])
        hooks.append(hook)
        return _Handle(hooks, hook)

    def __call__(self, *args, **kwargs):
        previous = getattr(_ops.current, "runner", None)
        _ops.current.runner = self
        self._error = None
        try:
            return self._model(*args, **kwargs)
        except RuntimeError:
            # The compiled model reports what a kernel raised as its own RuntimeError: what a
            # hook raised propagates as itself, as it does from C++.
            if self._error is not None:
                raise self._error from None
            raise
        finally:
            _ops.current.runner = previous
            self._args.clear()

    def _recording(self, fire: Callable, name: str, xs: list[torch.Tensor]):
        try:
            return fire(name, xs)
        except BaseException as e:
            self._error = e
            raise

    def fire_input(self, name: str, xs: list[torch.Tensor]) -> list[torch.Tensor] | None:
        return self._recording(self._fire_input, name, xs)

    def fire_output(self, name: str, xs: list[torch.Tensor]) -> list[torch.Tensor] | None:
        return self._recording(self._fire_output, name, xs)

    def _fire_input(self, name: str, xs: list[torch.Tensor]) -> list[torch.Tensor] | None:
        """Runs the pre-hooks of `name` on copies of `xs`; returns what the module receives
        (the copies as the hooks left them, or a replacement), None where no hook ran."""
        hooks = list(self._pre.get(name, ()))
        args = tuple(x.clone() for x in xs)
        for hook in hooks:
            result = hook(name, args)
            if result is not None:
                args = tuple(result) if isinstance(result, (tuple, list)) else (result,)
                _check_replacement(name, "args", list(args), xs)
        self._args[name] = tuple(a.clone() for a in args)
        return list(args) if hooks else None

    def _fire_output(self, name: str, xs: list[torch.Tensor]) -> list[torch.Tensor] | None:
        """Runs the forward hooks of `name` on a copy of the output `xs`; returns what the
        module's caller receives, None where no hook ran."""
        hooks = list(self._forward.get(name, ()))
        if not hooks:
            return None
        single = self._by_name.get(name, {}).get("single", len(xs) == 1)
        output: Any = xs[0].clone() if single else tuple(x.clone() for x in xs)
        args = self._args.get(name, ())
        for hook in hooks:
            result = hook(name, args, output)
            if result is not None:
                if isinstance(result, torch.Tensor) != single:
                    raise TypeError(
                        f"modhooks: a hook on point {name!r} returned a {type(result).__name__} "
                        f"as its output; the compiled graph holds "
                        + ("a tensor" if single else f"{len(xs)} tensors (a tuple)")
                    )
                output = result
                _check_replacement(name, "output", [output] if single else list(output), xs)
        return [output] if single else list(output)


def _check_replacement(name: str, what: str, got: list, expected: list[torch.Tensor]) -> None:
    """The C++ runtime's check: a replacement holds as many tensors as the graph, each of the
    same sizes, dtype and device (the compiled kernels after the point expect them)."""
    if len(got) != len(expected) or not all(isinstance(g, torch.Tensor) for g in got):
        raise TypeError(
            f"modhooks: a hook on point {name!r} returned {len(got)} values as its {what}; "
            f"the compiled graph holds {len(expected)} tensors"
        )
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape or g.dtype != e.dtype or g.device != e.device:
            raise ValueError(
                f"modhooks: a hook on point {name!r} replaced {what} tensor {i} with "
                f"{g.dtype}{list(g.shape)} on {g.device}; the compiled graph expects "
                f"{e.dtype}{list(e.shape)} on {e.device}"
            )
