"""ckpttools: inspect, check, remap, export and measure EAGLE-3 drafters.

The library is the product; the ``ckpt`` command is a thin layer over it. Public
functions are imported lazily so that ``ckpt --help`` and header-only commands stay
fast and never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "open_checkpoint": "ckpttools.checkpoint",
    "Checkpoint": "ckpttools.checkpoint",
    "inspect": "ckpttools.inspection",
    "InspectReport": "ckpttools.inspection",
    "detect_flavor": "ckpttools.flavor",
    "VocabMapping": "ckpttools.vocab",
    "load_mapping": "ckpttools.vocab",
    "diff_vocab": "ckpttools.vocabdiff",
    "build_vocab": "ckpttools.vocabdiff",
    "validate": "ckpttools.validate",
    "remap": "ckpttools.remap",
    "export": "ckpttools.export",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'ckpttools' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
