"""``ckpt validate --fix``: a corrected copy (config edits, tensor renames), never the input."""

from __future__ import annotations

import copy
import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.errors import NoWeightsError, UnsafePathError
from ckpttools.formats.config import context_length
from ckpttools.formats.conventions import CONFIG_DTYPE, load_target_config
from ckpttools.formats.names import canonical_name, layer_index, suggest_rename
from ckpttools.io.checkpoint import Checkpoint, hub_blobs, open_checkpoint
from ckpttools.io.manifest import MANIFEST_NAME, make_manifest
from ckpttools.io.writer import CheckpointWriter, TensorSpec, copy_side_files
from ckpttools.ops.validate import FIXABLE_ARCHS, ValidationReport, fix_repairs, validate

__all__ = ["FixResult", "fix"]


@dataclass
class FixResult:
    """What ``--fix`` wrote, every change, and validate's verdict before and after."""

    output: str
    backup: str | None
    changes: list[str]
    before: ValidationReport
    after: ValidationReport
    unfixed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "backup": self.backup,
            "changes": self.changes,
            "unfixed": self.unfixed,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
        }


def _plan_fix(ck: Checkpoint, report: ValidationReport, tcfg: dict[str, Any] | None) -> tuple[dict, dict, list, list]:
    cfg = copy.deepcopy(ck.config or {})
    changes: list[str] = []
    unfixed: list[str] = []
    archs = cfg.get("architectures") or []
    arch_fixable = any(f.id == "config.architectures" and fix_repairs(f) for f in report.findings)
    if archs and archs[0] in FIXABLE_ARCHS and arch_fixable:
        cfg["architectures"] = ["LlamaForCausalLMEagle3"]
        changes.append(f"config: architectures {archs} -> ['LlamaForCausalLMEagle3']")
    if tcfg is not None:
        dctx, _ = context_length(cfg)
        tctx, _ = context_length(tcfg)
        if dctx is not None and tctx is not None and dctx < tctx:
            old = cfg.get("max_position_embeddings")
            cfg["max_position_embeddings"] = tctx
            changes.append(f"config: max_position_embeddings {old} -> {tctx} (the target's context)")
    if "num_hidden_layers" not in cfg:
        n = len({i for i in map(layer_index, ck.tensors) if i is not None})
        cfg["num_hidden_layers"] = max(n, 1)
        changes.append(f"config: num_hidden_layers added = {cfg['num_hidden_layers']} (layers in the weights)")
    if "draft_vocab_size" not in cfg and "speculators_config" not in cfg:
        head = next((t for n, t in ck.tensors.items() if canonical_name(n)[0] == "lm_head.weight"), None)
        if head is not None:
            cfg["draft_vocab_size"] = head.shape[0]
            changes.append(f"config: draft_vocab_size added = {head.shape[0]} (lm_head's rows)")
    if "torch_dtype" not in cfg and "dtype" not in cfg:
        floats = [t.dtype for t in ck.tensors.values() if t.dtype in CONFIG_DTYPE]
        if floats:
            dt = max(set(floats), key=floats.count)
            cfg["torch_dtype"] = CONFIG_DTYPE[dt]
            changes.append(f"config: torch_dtype added = {cfg['torch_dtype']} (the weights' dtype)")
    renames: dict[str, str] = {}
    for f in report.findings:
        if f.id == "tensors.dropped":
            new = suggest_rename(f.location)
            if new and new not in ck.tensors:
                renames[f.location] = new
                changes.append(f"tensor: {f.location} -> {new}")
    for f in report.errors:
        if not fix_repairs(f):
            unfixed.append(f"{f.id} at {f.location}: {f.message}")
    return cfg, renames, changes, unfixed


def fix(
    drafter: str | Path,
    out: str | Path | None = None,
    *,
    target: str | Path | None = None,
    in_place: bool = False,
    force: bool = False,
) -> FixResult:
    """Write a corrected copy of a drafter and validate it.

    Config edits: architectures (LlamaForCausalLM / Eagle3LlamaForCausalLM ->
    LlamaForCausalLMEagle3), max_position_embeddings raised to the target's context,
    missing num_hidden_layers / draft_vocab_size / torch_dtype filled from the weights.
    Tensor renames: names SGLang would drop that have a known loadable name. Tensor bytes
    are copied unchanged. The input is never modified; with ``in_place`` the original
    directory is kept as a backup beside it and the fixed copy takes its place.

    Raises:
        NoWeightsError: a config.json alone cannot be fixed into a checkpoint.
        OutputExistsError: ``out`` exists and ``force`` is not set.
    """
    if in_place == (out is not None):
        raise ValueError("give exactly one of an output path or in_place=True")
    ck = open_checkpoint(drafter, download=True)
    try:
        if ck.config is None:
            raise NoWeightsError(
                f"{drafter}: fixing needs a drafter directory with config.json and weights", path=str(drafter)
            )
        if in_place and ck.revision is not None or in_place and hub_blobs(ck.root) is not None:
            raise UnsafePathError(
                f"{drafter}: a Hub cache snapshot is never changed in place",
                path=str(drafter),
                hint="write a fixed copy with an output path instead",
            )
        before = validate(ck, target)
        tcfg = load_target_config(target)[0] if target is not None else None
        cfg, renames, changes, unfixed = _plan_fix(ck, before, tcfg)
        backup = None
        if in_place:
            # the real directory (not "." or a link to it) is what gets replaced
            dest = Path(os.path.realpath(ck.root))
            backup = dest.parent / f"{dest.name}.bak-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            inputs = [target] if target is not None else []
        else:
            dest = Path(out)  # type: ignore[arg-type]
            inputs = [ck.root, *([target] if target is not None else [])]
        plan = [
            [TensorSpec(renames.get(n, n), t.dtype, t.shape) for n, t in h.tensors.items()] for h in ck.headers.values()
        ]
        specs = [s for shard in plan for s in shard]
        manifest = make_manifest(
            "fix", {"target": str(target) if target else None, "changes": changes}, {"drafter": ck.files()}
        )
        with CheckpointWriter(
            dest, specs, plan=plan, force=force, inputs=inputs, in_place=in_place, backup=backup
        ) as w:
            for h in ck.headers.values():
                for n, t in h.tensors.items():
                    w.copy_range(renames.get(n, n), h.path, t.start)
            w.add_json("config.json", cfg)
            copy_side_files(ck, w)
            w.add_json(MANIFEST_NAME, manifest)
    finally:
        ck.close()
    after = validate(dest, target)
    return FixResult(str(dest), str(backup) if backup else None, changes, before, after, unfixed)
