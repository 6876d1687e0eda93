# SPDX-License-Identifier: BSD-3-Clause
"""The scenarios of the nn utilities' differential tests, shared by oracle_nn_utils.py (which runs
them in Python and writes what it saw) and check_nn_utils.py (which loads what C++ saved).
tests/nn_utils_scenarios.h builds the same modules and applies the same utilities in C++.

Each scenario: a module, its input, and the utilities applied to it after torch.manual_seed(1).
"""
import warnings

import torch
from torch import nn
from torch.nn.utils import parametrizations, parametrize, prune

warnings.filterwarnings("ignore", category=FutureWarning)


class Symmetric(nn.Module):
    """A parametrization with a right inverse (PyTorch's documentation example)."""

    def forward(self, x):
        return x.triu() + x.triu(1).transpose(0, 1)

    def right_inverse(self, a):
        return a.triu()


def linear(i, o):
    return nn.Linear(i, o), torch.randn(2, i)


def conv1d():
    return nn.Conv1d(3, 4, 3), torch.randn(2, 3, 8)


def conv2d():
    return nn.Conv2d(2, 4, 3), torch.randn(1, 2, 6, 6)


def conv_transpose2d():
    return nn.ConvTranspose2d(3, 2, 3), torch.randn(1, 3, 4, 4)


def embedding():
    return nn.Embedding(6, 4), torch.tensor([[0, 2, 5], [1, 1, 4]])


def two_linears():
    return nn.Sequential(nn.Linear(5, 4), nn.Linear(4, 3)), torch.randn(2, 5)


def custom_mask():
    return (torch.arange(20) % 3 != 0).reshape(4, 5).float()


# name -> (builder, utilities)
SCENARIOS = {
    "wn_linear": (lambda: linear(5, 4), lambda m: torch.nn.utils.weight_norm(m, "weight", 0)),
    "wn_conv1d_none": (conv1d, lambda m: torch.nn.utils.weight_norm(m, "weight", None)),
    "sn_linear": (lambda: linear(5, 4), lambda m: torch.nn.utils.spectral_norm(m)),
    "sn_tall": (lambda: linear(4, 6), lambda m: torch.nn.utils.spectral_norm(m)),
    "sn_conv2d": (conv2d, lambda m: torch.nn.utils.spectral_norm(m, n_power_iterations=2)),
    "sn_convt2d": (conv_transpose2d, lambda m: torch.nn.utils.spectral_norm(m)),
    "sn_embedding": (embedding, lambda m: torch.nn.utils.spectral_norm(m)),
    "pwn_conv1d": (conv1d, lambda m: parametrizations.weight_norm(m)),
    "psn_linear": (lambda: linear(5, 4), lambda m: parametrizations.spectral_norm(m)),
    "psn_conv2d": (conv2d, lambda m: parametrizations.spectral_norm(m, n_power_iterations=2)),
    "psym_linear": (lambda: linear(4, 4),
                    lambda m: parametrize.register_parametrization(m, "weight", Symmetric())),
    "prune_l1": (lambda: linear(5, 4),
                 lambda m: (prune.l1_unstructured(m, "weight", 0.3),
                            prune.random_unstructured(m, "bias", 2))),
    "prune_repeat": (conv2d, lambda m: (prune.ln_structured(m, "weight", 0.5, n=2, dim=0),
                                        prune.l1_unstructured(m, "weight", 5))),
    "prune_random_structured": (conv1d, lambda m: prune.random_structured(m, "weight", 0.5, 1)),
    "prune_custom": (lambda: linear(5, 4),
                     lambda m: prune.custom_from_mask(m, "weight", custom_mask())),
    "prune_global": (two_linears,
                     lambda m: prune.global_unstructured([(m[0], "weight"), (m[1], "weight")],
                                                         prune.L1Unstructured, amount=0.4)),
}

STEPS = 3
LR = 0.1


def build(name):
    """The scenario's module with the seeded initial weights, and its input."""
    torch.manual_seed(0)
    return SCENARIOS[name][0]()


def apply(name, module):
    torch.manual_seed(1)
    SCENARIOS[name][1](module)
