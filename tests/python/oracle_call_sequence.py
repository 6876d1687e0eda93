# SPDX-License-Identifier: BSD-3-Clause
"""Forward-hook call sequences: Python's answers for tests/call_sequence_test.cpp.

Every scenario registers some of the hooks of one roster on the inner module `target` of a
`Parent` (`Parent.forward` calls `target`, `target.forward` calls `target.inner`) and runs the
parent once: a global forward pre-hook (GP), the target's own pre-hooks (P1, then P0 with
prepend), its own forward hooks (F1, then F0 with prepend), an own always-call forward hook (A),
a global forward hook (GF) and a global always-call forward hook (GA), registered in that order.
A scenario gives some hooks an action (`replace`: a pre-hook returns its first argument doubled,
a forward hook returns its output + 1, or its first argument + 100 when the output is None;
`raise`: RuntimeError("<id> failed")) and may make the target's forward raise. Each hook
appends what it saw to the event log: its id, the sum of its first argument, and for forward
hooks the sum of the output (None where Python passes None). Global hooks log and act only on
`target`. What Python does is torch/nn/modules/module.py `_call_impl`: global pre-hooks, own
pre-hooks, forward, global forward hooks, own forward hooks, always-call hooks marked as called
before they run; on an exception the always-call hooks not yet marked run (global first) on the
current args and result (None if forward did not return), their own exceptions become
warnings, and the original exception propagates.

Writes, under the fixtures folder:
- call_sequence.json: the input, forward's error text and, per scenario, the hooks (in
  registration order, with prepend / always_call / action / once / edits), whether forward
  raises, the inner edits, and Python's events, output (the parent's, as a list) or error text,
  and warnings;
- call_sequence_scripted.pt: `Parent` scripted, for the TorchScript inner-module replay (hooks on
  its `target` fire where `Parent.forward` calls it; the C++ test sets `target.fail`).

tests/python/aoti_packages.py exports the same `Parent` (points on `target`, with its inputs, and
`target.inner`) as call_sequence.pt2 and writes `oracle()` beside it. An AOTInductor point has no
forward of its own that can raise: there the target's forward raising is a forward hook on the
inner point `target.inner` raising while `target`'s point is open. `oracle()` runs every
failing scenario both ways in Python and checks that they agree.

Some scenarios edit the hook lists while the call runs, as hooks may: a hook's `edits` run when
it does, before its action, and the scenario's `inner_edits` run in a forward hook on
`target.inner`, that is inside the target's forward (a point of a compiled program runs them
between its two halves). An edit registers a hook (`{"op": "register", "hook": spec}`, the spec
as a roster hook's, with `once`: it removes itself when it runs) or removes one by id
(`{"op": "remove", "id": ...}`). Python reads the forward hooks after forward returns and the
always-call hooks when the call fails, so these edits take effect in the same call; a call that
started with no hook anywhere (Python's fast exit) runs none.
"""
from __future__ import annotations

import json
import warnings

import torch
from torch import nn
from torch.nn.modules import module as nn_module

MESSAGE = "target refused its input"
X = [1.0, 2.0, 3.0, 4.0]


class Scale(nn.Module):
    def forward(self, x):
        return x * 3


class Target(nn.Module):
    """The hooked module. `fail` makes its forward raise (TorchScript keeps it an attribute)."""

    def __init__(self):
        super().__init__()
        self.inner = Scale()
        self.fail = False

    def forward(self, x):
        y = self.inner(x)  # before the check: `inner_edits` run on the way to the failure
        if self.fail:
            raise RuntimeError("target refused its input")
        return y + 0.5


class Parent(nn.Module):
    def __init__(self):
        super().__init__()
        self.target = Target()

    def forward(self, x):
        return self.target(x) - 1


def example_input() -> torch.Tensor:
    return torch.tensor(X, dtype=torch.float64)


# The roster, in registration order: id, kind, prepend, always_call.
ROSTER = [
    ("GP", "global_pre", False, False),
    ("P1", "pre", False, False),
    ("P0", "pre", True, False),
    ("F1", "forward", False, False),
    ("F0", "forward", True, False),
    ("A", "forward", False, True),
    ("GF", "global_forward", False, False),
    ("GA", "global_forward", False, True),
]


def scenario(name, actions=None, forward_raises=False, only=None, prepend=(), edits=None,
             inner_edits=()):
    """A scenario: the roster (or the hooks named in `only`), `actions` by hook id, the hooks
    named in `prepend` registered with prepend=True, `edits` by hook id (see the top)."""
    actions = actions or {}
    edits = edits or {}
    hooks = []
    for hook_id, kind, pre, always in ROSTER:
        if only is not None and hook_id not in only:
            continue
        hooks.append({"id": hook_id, "kind": kind, "prepend": pre or hook_id in prepend,
                      "always_call": always, "action": actions.get(hook_id), "once": False,
                      "edits": list(edits.get(hook_id, ()))})
    return {"name": name, "hooks": hooks, "forward_raises": forward_raises,
            "inner_edits": list(inner_edits)}


def registers(hook_id, kind, always_call=False, prepend=False, action=None, once=False):
    """The edit that registers hook `hook_id` of `kind` while the call runs."""
    return {"op": "register",
            "hook": {"id": hook_id, "kind": kind, "prepend": prepend, "always_call": always_call,
                     "action": action, "once": once, "edits": []}}


def removes(hook_id):
    return {"op": "remove", "id": hook_id}


SCENARIOS = [
    scenario("all_hooks"),
    scenario("own_hooks_only", only={"P1", "P0", "F1", "F0", "A"}),
    scenario("global_hooks_only", only={"GP", "GF", "GA"}),
    scenario("pre_hook_replaces_args", {"P0": "replace"}),
    scenario("global_pre_hook_replaces_args", {"GP": "replace"}),
    scenario("every_pre_hook_replaces_args", {"GP": "replace", "P0": "replace", "P1": "replace"}),
    scenario("forward_hook_replaces_output", {"F0": "replace"}),
    scenario("global_forward_hook_replaces_output", {"GF": "replace"}),
    scenario("always_hook_replaces_output", {"A": "replace", "GA": "replace"}),
    scenario("pre_and_forward_hooks_replace", {"P1": "replace", "F1": "replace"}),
    scenario("global_pre_hook_raises", {"GP": "raise"}),
    scenario("pre_hook_raises", {"P1": "raise"}),
    scenario("pre_hook_raises_after_replacement", {"P0": "replace", "P1": "raise"}),
    scenario("forward_raises", forward_raises=True),
    scenario("forward_raises_after_replacement", {"P1": "replace"}, forward_raises=True),
    scenario("forward_raises_always_hooks_only", forward_raises=True, only={"A", "GA"}),
    scenario("forward_hook_raises", {"F0": "raise"}),
    scenario("forward_hook_raises_after_replacement", {"GF": "replace", "F1": "raise"}),
    scenario("global_forward_hook_raises", {"GF": "raise"}),
    scenario("prepended_always_hook_ran_before_forward_hook_raises", {"F1": "raise"},
             prepend={"A"}),
    scenario("always_hook_raises", {"A": "raise"}),
    scenario("global_always_hook_raises", {"GA": "raise"}),
    scenario("always_hooks_raise_after_forward_raises", {"A": "raise", "GA": "raise"},
             forward_raises=True),
    scenario("always_hook_raises_after_pre_hook_raises", {"P0": "raise", "A": "raise"}),
    scenario("always_hooks_replace_after_forward_raises", {"GA": "replace", "A": "replace"},
             forward_raises=True),
    # Hook lists edited during the call: read when Python's _call_impl reads them.
    scenario("pre_hook_registers_one_shot_forward_hook", only={"P1"},
             edits={"P1": [registers("S", "forward", once=True)]}),
    scenario("pre_hook_registers_prepended_forward_hook", {"P1": "replace"}, only={"P1", "F1"},
             edits={"P1": [registers("S", "forward", prepend=True, action="replace")]}),
    scenario("pre_hook_removes_forward_hook", only={"P1", "F1", "F0", "GF"},
             edits={"P1": [removes("F1")]}),
    scenario("pre_hook_removes_global_forward_hook", only={"GP", "F1", "GF"},
             edits={"GP": [removes("GF")]}),
    scenario("pre_hook_registers_global_forward_hook", only={"P1", "F1"},
             edits={"P1": [registers("G", "global_forward")]}),
    scenario("pre_hook_registers_pre_hook", only={"P1", "F1"},
             edits={"P1": [registers("Q", "pre"), registers("GQ", "global_pre")]}),
    scenario("forward_registers_global_forward_hook", only={"P1"},
             inner_edits=[registers("G", "global_forward")]),
    scenario("forward_registers_forward_hook_reading_args", {"P1": "replace"}, only={"P1"},
             inner_edits=[registers("S", "forward", action="replace")]),
    scenario("forward_removes_forward_hooks", only={"GP", "F1", "F0", "GF"},
             inner_edits=[removes("F0"), removes("GF")]),
    scenario("no_hooks_when_called_then_forward_registers_some", only=set(),
             inner_edits=[registers("G", "global_forward"), registers("S", "forward")]),
    scenario("forward_hook_registers_forward_hook", only={"F1", "F0"},
             edits={"F0": [registers("S", "forward"), registers("G", "global_forward")]}),
    scenario("forward_raises_after_pre_hook_registers_always_hooks", only={"P1"},
             edits={"P1": [registers("B", "forward", always_call=True),
                           registers("GB", "global_forward", always_call=True)]},
             forward_raises=True),
    scenario("forward_raises_after_pre_hook_removes_always_hook", only={"P1", "A", "GA"},
             edits={"P1": [removes("A")]}, forward_raises=True),
    scenario("forward_registers_always_hook_and_raises", {"P1": "replace"}, only={"P1"},
             inner_edits=[registers("B", "forward", always_call=True, action="replace")],
             forward_raises=True),
    scenario("forward_hook_removes_started_always_hook_then_raises", {"F1": "raise"},
             only={"A", "F1"}, prepend={"A"},
             edits={"F1": [removes("A"), registers("B", "forward", always_call=True)]}),
    scenario("forward_hook_registers_always_hook_then_raises", {"F1": "raise"},
             only={"F1", "A", "GF"},
             edits={"GF": [registers("GB", "global_forward", always_call=True),
                           registers("B", "forward", always_call=True, prepend=True)]}),
    scenario("pre_hook_registers_always_hook_then_raises", {"P1": "raise"}, only={"P1"},
             edits={"P1": [registers("B", "forward", always_call=True)]}),
]


def total(value):
    return None if value is None else float(value.sum())


class Registry:
    """The handles of a run's hooks by id, and the edits hooks make to the lists."""

    def __init__(self, target, events):
        self.target = target
        self.events = events
        self.handles = {}
        self.extra = []  # handles of hooks registered outside the scenario (target.inner's)

    def add(self, spec):
        self.handles[spec["id"]] = register(spec, make_hook(spec, self), self.target)

    def edit(self, edits):
        for e in edits:
            if e["op"] == "register":
                self.add(e["hook"])
            else:
                self.handles[e["id"]].remove()

    def remove_all(self):
        for h in [*self.extra, *self.handles.values()]:
            h.remove()


def make_hook(spec, registry):
    hook_id, kind, action = spec["id"], spec["kind"], spec["action"]
    is_global = kind.startswith("global_")
    target, events = registry.target, registry.events

    def edits():
        if spec.get("once"):
            registry.handles[hook_id].remove()
        registry.edit(spec.get("edits", ()))

    if kind in ("pre", "global_pre"):
        def hook(module, args):
            if is_global and module is not target:
                return None
            events.append({"hook": hook_id, "args": total(args[0])})
            edits()
            if action == "raise":
                raise RuntimeError(f"{hook_id} failed")
            if action == "replace":
                return (args[0] * 2,)
            return None
    else:
        def hook(module, args, output):
            if is_global and module is not target:
                return None
            events.append({"hook": hook_id, "args": total(args[0]), "out": total(output)})
            edits()
            if action == "raise":
                raise RuntimeError(f"{hook_id} failed")
            if action == "replace":
                return output + 1 if output is not None else args[0] + 100
            return None
    return hook


def register(spec, hook, target):
    kind = spec["kind"]
    if kind == "global_pre":
        return nn_module.register_module_forward_pre_hook(hook)
    if kind == "global_forward":
        return nn_module.register_module_forward_hook(hook, always_call=spec["always_call"])
    if kind == "pre":
        return target.register_forward_pre_hook(hook, prepend=spec["prepend"])
    return target.register_forward_hook(hook, prepend=spec["prepend"],
                                        always_call=spec["always_call"])


def run(sc, how="module"):
    """Runs scenario `sc` on a fresh Parent. `how`: "module" (the target's forward raises) or
    "inner_hook" (a forward hook on target.inner raises instead, as on an AOTInductor point)."""
    net = Parent().eval()
    target = net.target
    events = []
    registry = Registry(target, events)
    if sc["inner_edits"]:
        def edit(module, args, output):
            registry.edit(sc["inner_edits"])
        registry.extra.append(target.inner.register_forward_hook(edit))
    if sc["forward_raises"]:
        if how == "module":
            target.fail = True
        else:
            def refuse(module, args, output):
                raise RuntimeError(MESSAGE)
            registry.extra.append(target.inner.register_forward_hook(refuse))
    for spec in sc["hooks"]:
        registry.add(spec)
    output, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.no_grad():
                output = net(example_input()).tolist()
        except RuntimeError as e:
            error = str(e)
        finally:
            registry.remove_all()
    said = [str(w.message) for w in caught if "always_call=True" in str(w.message)]
    return {"events": events, "output": output, "error": error, "warnings": said}


def oracle() -> dict:
    cases = []
    for sc in SCENARIOS:
        result = run(sc)
        if sc["forward_raises"]:
            assert result["error"] == MESSAGE, (sc["name"], result)
            # What an AOTInductor point can do instead: the same log, error and warnings.
            assert run(sc, "inner_hook") == result, (sc["name"], run(sc, "inner_hook"), result)
        assert (result["output"] is None) != (result["error"] is None), (sc["name"], result)
        cases.append({**sc, **result})
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), names
    return {"x": X, "message": MESSAGE, "scenarios": cases}


def main(out_dir):
    warnings.filterwarnings("ignore", category=FutureWarning)  # TorchScript is deprecated
    scripted = torch.jit.script(Parent())
    # The scripted model computes what eager does, and its target's flag makes it raise.
    assert scripted(example_input()).tolist() == Parent()(example_input()).tolist()
    scripted.target.fail = True
    try:
        scripted(example_input())
        raise AssertionError("the scripted target did not raise")
    except torch.jit.Error as e:
        assert MESSAGE in str(e), str(e)
    scripted.target.fail = False
    scripted.save(str(out_dir / "call_sequence_scripted.pt"))
    (out_dir / "call_sequence.json").write_text(json.dumps(oracle(), indent=1))


if __name__ == "__main__":
    import pathlib
    import sys

    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "."))
