"""ckpttools: inspect, check, remap, export and measure EAGLE-3 drafters.

The library is the product; the ``ckpt`` command is a thin layer over it. Every
operation, its report type and every error type is importable from here, in any order:
no public name is also the name of a submodule of this package (the operations live in
``ckpttools.ops`` and ``ckpttools.measuring``), so importing one never replaces another. The operations are loaded
lazily, so ``ckpt --help`` and header-only commands stay fast and never import torch;
type checkers see the real objects through the ``TYPE_CHECKING`` block.

The package is in layers, lowest first; a module imports its own layer and those below
(tests/test_layers.py): ``errors`` (the error classes and exit codes), ``schemas`` (the JSON
Schemas), ``io`` (bytes, checkpoints, the write plan and its executor, the network client),
``formats`` (engine-neutral names and config fields), ``vocab`` (vocabulary mappings),
``engines`` (what each engine release does, as cited tables, and its servers), ``ops`` (the
conversion operations: inspect, validate, fix, remap, export, quantize), ``measuring`` (what a
drafter does on a server or the offline probe: the request, verify, compare, sweep, serve and
swap, logs, plot, the verdict), ``demo`` (tiny checkpoints and the story), ``cli`` (the ``ckpt``
command).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ckpttools.errors import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNMEASURED,
    EXIT_USAGE,
    CheckpointFormatError,
    CheckpointNotFoundError,
    CkptError,
    ConfigError,
    HubError,
    MappingError,
    NoWeightsError,
    OutputExistsError,
    PickleRefusedError,
    ServerError,
    TokenizerError,
    UnsafePathError,
)

if TYPE_CHECKING:
    from ckpttools.io.version import __version__
    from ckpttools.engines.flavor import detect_flavor
    from ckpttools.io.checkpoint import Checkpoint, open_checkpoint
    from ckpttools.io.plan import WritePlan, execute
    from ckpttools.engines.launch import LaunchSpec
    from ckpttools.measuring.compare import CompareReport, compare_drafters
    from ckpttools.measuring.serve import SwapReport, swap_drafter
    from ckpttools.measuring.measure import measure
    from ckpttools.measuring.request import MeasureRequest, Offline, RequestError, RunningHost, Sweep
    from ckpttools.ops.export import ExportRejected, ExportReport, export, plan_export
    from ckpttools.ops.fix import FixResult, fix, plan_fix
    from ckpttools.ops.inspect import InspectReport, inspect
    from ckpttools.measuring.probe import verify_torch
    from ckpttools.ops.quantize import QuantizeRejected, QuantizeReport, plan_quantize, quantize
    from ckpttools.ops.remap import RemapReport, plan_remap, remap
    from ckpttools.ops.validate import Finding, ValidationReport, validate
    from ckpttools.measuring.verify import SpecOffError, VerifyReport, verify
    from ckpttools.vocab.diff import BuildResult, VocabDiff, build_vocab, diff_vocab, plan_vocab
    from ckpttools.vocab.mapping import VocabMapping, load_mapping

#: public name -> the module that defines it (loaded on first use)
_LAZY = {
    # the version comes from importlib.metadata, which costs every start-up ~20 ms: read when asked for
    "__version__": "ckpttools.io.version",
    "open_checkpoint": "ckpttools.io.checkpoint",
    "Checkpoint": "ckpttools.io.checkpoint",
    "detect_flavor": "ckpttools.engines.flavor",
    "inspect": "ckpttools.ops.inspect",
    "InspectReport": "ckpttools.ops.inspect",
    "validate": "ckpttools.ops.validate",
    "ValidationReport": "ckpttools.ops.validate",
    "Finding": "ckpttools.ops.validate",
    "fix": "ckpttools.ops.fix",
    "FixResult": "ckpttools.ops.fix",
    "remap": "ckpttools.ops.remap",
    "RemapReport": "ckpttools.ops.remap",
    "export": "ckpttools.ops.export",
    "ExportReport": "ckpttools.ops.export",
    "ExportRejected": "ckpttools.ops.export",
    "verify": "ckpttools.measuring.verify",
    "VerifyReport": "ckpttools.measuring.verify",
    "SpecOffError": "ckpttools.measuring.verify",
    "verify_torch": "ckpttools.measuring.probe",
    "VocabMapping": "ckpttools.vocab.mapping",
    "load_mapping": "ckpttools.vocab.mapping",
    "diff_vocab": "ckpttools.vocab.diff",
    "VocabDiff": "ckpttools.vocab.diff",
    "build_vocab": "ckpttools.vocab.diff",
    "BuildResult": "ckpttools.vocab.diff",
    "plan_vocab": "ckpttools.vocab.diff",
    "plan_remap": "ckpttools.ops.remap",
    "plan_export": "ckpttools.ops.export",
    "plan_fix": "ckpttools.ops.fix",
    "WritePlan": "ckpttools.io.plan",
    "execute": "ckpttools.io.plan",
    "compare_drafters": "ckpttools.measuring.compare",
    "CompareReport": "ckpttools.measuring.compare",
    "swap_drafter": "ckpttools.measuring.serve",
    "SwapReport": "ckpttools.measuring.serve",
    "measure": "ckpttools.measuring.measure",
    "MeasureRequest": "ckpttools.measuring.request",
    "RunningHost": "ckpttools.measuring.request",
    "Offline": "ckpttools.measuring.request",
    "Sweep": "ckpttools.measuring.request",
    "RequestError": "ckpttools.measuring.request",
    "LaunchSpec": "ckpttools.engines.launch",
    "quantize": "ckpttools.ops.quantize",
    "plan_quantize": "ckpttools.ops.quantize",
    "QuantizeReport": "ckpttools.ops.quantize",
    "QuantizeRejected": "ckpttools.ops.quantize",
}

__all__ = [
    "__version__",
    "EXIT_OK",
    "EXIT_FINDINGS",
    "EXIT_USAGE",
    "EXIT_UNMEASURED",
    "CkptError",
    "CheckpointNotFoundError",
    "NoWeightsError",
    "CheckpointFormatError",
    "ConfigError",
    "PickleRefusedError",
    "UnsafePathError",
    "MappingError",
    "TokenizerError",
    "HubError",
    "OutputExistsError",
    "ServerError",
    "open_checkpoint",
    "Checkpoint",
    "detect_flavor",
    "inspect",
    "InspectReport",
    "validate",
    "ValidationReport",
    "Finding",
    "fix",
    "FixResult",
    "remap",
    "RemapReport",
    "export",
    "ExportReport",
    "ExportRejected",
    "verify",
    "VerifyReport",
    "SpecOffError",
    "verify_torch",
    "VocabMapping",
    "load_mapping",
    "diff_vocab",
    "VocabDiff",
    "build_vocab",
    "plan_vocab",
    "plan_remap",
    "plan_export",
    "plan_fix",
    "WritePlan",
    "execute",
    "compare_drafters",
    "CompareReport",
    "swap_drafter",
    "SwapReport",
    "measure",
    "MeasureRequest",
    "RunningHost",
    "Offline",
    "Sweep",
    "RequestError",
    "LaunchSpec",
    "BuildResult",
    "quantize",
    "plan_quantize",
    "QuantizeReport",
    "QuantizeRejected",
]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'ckpttools' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
