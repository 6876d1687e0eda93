# SPDX-License-Identifier: BSD-3-Clause
"""TorchScript fixtures and Python's answers for tests/jit_test.cpp.

Writes two script modules with the same weights: `subclass.pt`, a torch.jit.ScriptModule
subclass with a @torch.jit.script_method forward, and `scripted.pt`, made by torch.jit.script
from an eager module. Runs, on the Python ScriptModule subclass, the hook scenarios of the five hook
APIs that work there (a torch.jit.script-made module refuses them all), and records what Python
saw. The full backward hook, which raises on a Python
ScriptModule (pytorch #181473), is recorded on the equivalent eager module instead.
"""
import json
import warnings

import torch
from torch import nn


class Eager(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(torch.relu(self.fc(x)))


class Subclass(torch.jit.ScriptModule):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2)

    @torch.jit.script_method
    def forward(self, x):
        return self.head(torch.relu(self.fc(x)))


def values(t):
    return t.detach().double().tolist() if t is not None else None


def hook_events(module):
    """state_dict and load_state_dict hook events on the root (its children are
    RecursiveScriptModules, which refuse these hooks)."""
    events = []
    handles = [
        module.register_state_dict_pre_hook(
            lambda mod, prefix, keep_vars: events.append(["sd_pre", prefix])),
        module.register_state_dict_post_hook(
            lambda mod, sd, prefix, meta: events.append(["sd_post", prefix, len(sd)])),
    ]
    sd = module.state_dict()
    saved = {k: values(v) for k, v in sd.items()}  # the load below writes into sd's storage
    # The post-hook is registered before the pre-hook; pre still runs first. The pre-hook zeroes
    # the tensors it receives, the post-hook checks that the module now holds zeros.
    handles.append(module.register_load_state_dict_post_hook(
        lambda mod, keys: events.append(["load_post", bool((mod.fc.weight == 0).all())])))

    def zero_incoming(mod, state_dict, prefix, meta, strict, missing, unexpected, errors):
        events.append(["load_pre", prefix])
        for key in list(state_dict):
            if key.startswith(prefix):
                state_dict[key] = torch.zeros_like(state_dict[key])
    handles.append(module.register_load_state_dict_pre_hook(zero_incoming))
    module.load_state_dict(sd)
    for h in handles:
        h.remove()
    return events, saved


def backward_pre(module, x, factor):
    """x.grad with a backward pre-hook that scales grad_output by `factor`."""
    x = x.clone().requires_grad_()
    seen = []
    h = module.register_full_backward_pre_hook(
        lambda m, go: (seen.append(list(go[0].shape)), (go[0] * factor,))[1])
    module(x).sum().backward()
    h.remove()
    return {"grad_output_shape": seen[0], "x_grad": values(x.grad)}


def main(out_dir):
    warnings.filterwarnings("ignore", category=FutureWarning)  # TorchScript is deprecated
    torch.manual_seed(0)
    eager = Eager()
    subclass = Subclass()
    subclass.load_state_dict(eager.state_dict())
    scripted = torch.jit.script(Eager())
    scripted.load_state_dict(eager.state_dict())
    torch.jit.save(subclass, str(out_dir / "subclass.pt"))
    torch.jit.save(scripted, str(out_dir / "scripted.pt"))
    x = torch.randn(5, 4)

    result = {"x": values(x)}
    # The hook APIs work on a ScriptModule subclass object (not on a loaded or
    # torch.jit.script-made RecursiveScriptModule), so Python's answers come from `subclass`;
    # both saved modules have the subclass's weights.
    result["zero_pre"] = backward_pre(subclass, x, 0.0)
    result["double_pre"] = backward_pre(subclass, x, 2.0)
    # Last: its load pre-hook loads zeros.
    events, sd = hook_events(subclass)
    result["events"] = events
    result["state_dict"] = sd
    # The full backward hook, on the eager twin: what C++ must reproduce on the script module.
    xe = x.clone().requires_grad_()
    seen = {}

    def full(m, gi, go):
        seen["grad_input"] = [values(g) for g in gi]
        seen["grad_output"] = [values(g) for g in go]
        return (gi[0] * 3,)
    h = eager.register_full_backward_hook(full)
    eager(xe).sum().backward()
    h.remove()
    seen["x_grad"] = values(xe.grad)
    result["full_hook"] = seen
    (out_dir / "jit_oracle.json").write_text(json.dumps(result))
