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
  registration order, with prepend / always_call / action), whether forward raises, and
  Python's events, output (the parent's, as a list) or error text, and warnings;
- call_sequence_scripted.pt: `Parent` scripted, for the TorchScript inner-module replay (hooks on
  its `target` fire where `Parent.forward` calls it; the C++ test sets `target.fail`).

tests/python/aoti_packages.py exports the same `Parent` (points on `target`, with its inputs, and
`target.inner`) as call_sequence.pt2 and writes `oracle()` beside it. An AOTInductor point has no
forward of its own that can raise: there the target's forward raising is a forward hook on the
inner point `target.inner` raising while `target`'s point is open. `oracle()` runs every
failing scenario both ways in Python and checks that they agree.
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
        if self.fail:
            raise RuntimeError("target refused its input")
        return self.inner(x) + 0.5


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


def scenario(name, actions=None, forward_raises=False, only=None, prepend=()):
    """A scenario: the roster (or the hooks named in `only`), `actions` by hook id, the hooks
    named in `prepend` registered with prepend=True."""
    actions = actions or {}
    hooks = []
    for hook_id, kind, pre, always in ROSTER:
        if only is not None and hook_id not in only:
            continue
        hooks.append({"id": hook_id, "kind": kind, "prepend": pre or hook_id in prepend,
                      "always_call": always, "action": actions.get(hook_id)})
    return {"name": name, "hooks": hooks, "forward_raises": forward_raises}


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
]


def total(value):
    return None if value is None else float(value.sum())


def make_hook(spec, events, target):
    hook_id, kind, action = spec["id"], spec["kind"], spec["action"]
    is_global = kind.startswith("global_")

    if kind in ("pre", "global_pre"):
        def hook(module, args):
            if is_global and module is not target:
                return None
            events.append({"hook": hook_id, "args": total(args[0])})
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
    handles = []
    if sc["forward_raises"]:
        if how == "module":
            target.fail = True
        else:
            def refuse(module, args, output):
                raise RuntimeError(MESSAGE)
            handles.append(target.inner.register_forward_hook(refuse))
    for spec in sc["hooks"]:
        handles.append(register(spec, make_hook(spec, events, target), target))
    output, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.no_grad():
                output = net(example_input()).tolist()
        except RuntimeError as e:
            error = str(e)
        finally:
            for h in handles:
                h.remove()
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
