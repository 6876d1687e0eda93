# SPDX-License-Identifier: BSD-3-Clause
"""modhooks' Python side: hook points placed at module boundaries while a model is exported
(``modhooks.export``), which the C++ runtime (component ``aoti``) calls hooks at."""

__version__ = "0.1.0"

# The hook-point protocol's version: the modhooks ABI (major.minor while the major version is 0),
# written into every package's metadata and checked by the C++ runtime when it loads one.
ABI = "0.1"
