# SPDX-License-Identifier: BSD-3-Clause
"""Python side of the model tests of tests/nn_modules_test.cpp: eager hooks on every module.

Two models as users write them: a ResNet-style residual block and a two-layer Transformer
encoder. A forward hook and a full backward hook on every module record what they see; weights,
input and the records go into the JSON file, so the C++ twins (built from modhooks::nn holders)
run the same numbers and must see the same.
"""
import json

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + x)


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads)
        self.linear1 = nn.Linear(d, ff)
        self.linear2 = nn.Linear(ff, d)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x):
        x = self.norm1(x + self.self_attn(x, x, x)[0])
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


class Encoder(nn.Module):
    def __init__(self, d, heads, ff, n):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ff) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def tensor(t):
    return None if t is None else t.detach().double().tolist()


def first(value):
    return value[0] if isinstance(value, tuple) else value


def run(model, x):
    """Hooks every module; returns what they saw, by module name, in the order they fired."""
    weights = {k: tensor(v) for k, v in model.state_dict().items()}
    events = {}
    handles = []
    for name, module in model.named_modules():
        seen = events.setdefault(name, [])
        handles.append(module.register_forward_hook(
            lambda m, args, out, seen=seen: seen.append({"output": tensor(first(out))})))
        handles.append(module.register_full_backward_hook(
            lambda m, gi, go, seen=seen: seen.append(
                {"grad_input": [tensor(g) for g in gi], "grad_output": [tensor(go[0])]})))
    model(x).pow(3).sum().backward()
    for handle in handles:
        handle.remove()
    return {
        "weights": weights,
        "x": tensor(x),
        "events": events,
        "x_grad": tensor(x.grad),
    }


def main(out_dir):
    torch.manual_seed(0)
    block = Block(3)
    block_x = torch.randn(2, 3, 5, 5, requires_grad=True)
    encoder = Encoder(8, 2, 16, 2)
    encoder_x = torch.randn(4, 2, 8, requires_grad=True)  # (sequence, batch, features)
    result = {"block": run(block, block_x), "encoder": run(encoder, encoder_x)}
    (out_dir / "nn_holders_oracle.json").write_text(json.dumps(result))
