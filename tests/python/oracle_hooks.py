# SPDX-License-Identifier: BSD-3-Clause
"""Python side of tests/differential_test.cpp: hook order, hook arguments and gradients.

The scenario: A = Linear(4, 4) whose full backward hook halves grad_input; B, a module with two
inputs and two outputs whose backward pre-hook zeroes the first grad_output; C = Linear(4, 4)
fed an input that does not require grad. Global backward pre-hooks and full hooks record too.
Weights and inputs go into the JSON file so the C++ side runs the same numbers.
"""
import json
import warnings

import torch
from torch import nn


class TwoOut(nn.Module):
    def forward(self, a, b):
        return a * b, a + 2 * b


def tensor(t):
    return None if t is None else t.detach().double().tolist()


def main(out_dir):
    torch.manual_seed(0)
    a, b, c = nn.Linear(4, 4), TwoOut(), nn.Linear(4, 4)
    names = {a: "A", b: "B", c: "C"}
    x = torch.randn(2, 4, requires_grad=True)
    constant = torch.randn(2, 4)
    calls = []

    def record(kind, module, grad_input, grad_output):
        calls.append({"hook": f"{kind}:{names[module]}",
                      "grad_input": [tensor(g) for g in grad_input],
                      "grad_output": [tensor(g) for g in grad_output]})

    handles = [
        nn.modules.module.register_module_full_backward_pre_hook(
            lambda m, go: record("global_pre", m, (), go)),
        nn.modules.module.register_module_full_backward_hook(
            lambda m, gi, go: record("global_full", m, gi, go)),
        a.register_full_backward_hook(
            lambda m, gi, go: (record("full", m, gi, go), tuple(g * 0.5 for g in gi))[1]),
        b.register_full_backward_pre_hook(
            lambda m, go: (record("pre", m, (), go), (torch.zeros_like(go[0]), go[1]))[1]),
        c.register_full_backward_hook(lambda m, gi, go: record("full", m, gi, go)),
        a.register_forward_hook(lambda m, args, out: calls.append({"hook": "forward:A"})),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the no-input-requires-grad warning of C
        h = a(x)
        p, q = b(h, h * 2)
        r = c(constant)
        loss = p.sum() + (q * q).sum() + (r * q).sum()
        loss.backward()
    for handle in handles:
        handle.remove()

    result = {
        "weights": {"A.weight": tensor(a.weight), "A.bias": tensor(a.bias),
                    "C.weight": tensor(c.weight), "C.bias": tensor(c.bias)},
        "x": tensor(x), "constant": tensor(constant),
        "calls": calls,
        "grads": {"x": tensor(x.grad), "A.weight": tensor(a.weight.grad),
                  "A.bias": tensor(a.bias.grad), "C.weight": tensor(c.weight.grad),
                  "C.bias": tensor(c.bias.grad)},
    }
    (out_dir / "hooks_oracle.json").write_text(json.dumps(result))
