"""``ckpt validate --fix``: a corrected copy (config edits, tensor renames), never the input."""

from __future__ import annotations

import copy
import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.errors import ConfigError, NoWeightsError, UnsafePathError, opt
from ckpttools.formats.conventions import load_target_config
from ckpttools.engines.names import suggest_rename
from ckpttools.engines.repairs import repair_config
from ckpttools.io.checkpoint import Checkpoint, hub_blobs, open_checkpoint
from ckpttools.io.guard import check_output
from ckpttools.io.preflight import refuse_shared_names
from ckpttools.formats.names import canonical_name
from ckpttools.io.plan import Copy, ManifestPlan, PlannedTensor, TensorRef, WritePlan, execute, side_files
from ckpttools.engines.claims import arch as engine_arch
from ckpttools.engines.flavor import FIXABLE_ARCHS
from ckpttools.ops.validate import ValidationReport, fix_repairs, validate

__all__ = ["FixResult", "plan_fix", "fix"]


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


def _fix_config(ck: Checkpoint, report: ValidationReport, tcfg: dict[str, Any] | None) -> tuple[dict, list[str]]:
    """The architecture validate can repair, then what export repairs too, where missing (engines/repairs.py)."""
    cfg = copy.deepcopy(ck.config or {})
    changes: list[str] = []
    if any(f.id == "config.bom" for f in report.findings):
        changes.append("config: the byte-order mark left out (written as plain UTF-8)")
    archs = cfg.get("architectures") or []
    arch_fixable = any(f.id == "config.architectures" and fix_repairs(f) for f in report.findings)
    if archs and archs[0] in FIXABLE_ARCHS and arch_fixable:
        want = engine_arch("sglang", "sglang_llama")
        cfg["architectures"] = [want]
        changes.append(f"config: architectures {archs} -> [{want!r}]")
    changes += repair_config(cfg, ck.tensors, target_cfg=tcfg, only_missing=True)
    return cfg, changes


def _fix_renames(ck: Checkpoint, report: ValidationReport) -> tuple[dict[str, str], list[str]]:
    """Tensors SGLang would drop that have a known loadable name; two sources that would take one
    name (SGLang reads ``model.X`` and ``X`` as one) are refused."""
    renames: dict[str, str] = {}
    changes = []
    for f in report.findings:
        if f.id == "tensors.dropped":
            new = suggest_rename(f.location)
            if new and new not in ck.tensors:
                renames[f.location] = new
                changes.append(f"tensor: {f.location} -> {new}")
    pairs = ((n, renames.get(n, n)) for n in ck.tensors)
    refuse_shared_names(pairs, str(ck.source), key=lambda n: canonical_name(n)[0])
    return renames, changes


def _sglang_only(engine: str) -> str:
    """fix repairs towards SGLang's classes and names: any SGLang release, nothing else."""
    from ckpttools.engines.engine import ENGINE_OBJECTS
    from ckpttools.engines.releases import resolve

    kind = ENGINE_OBJECTS.get(resolve(engine).name)
    if kind is None or not kind.repaired_by_fix:
        raise ConfigError(
            f"{engine}: fix repairs a drafter for SGLang only",
            hint=f"for vLLM, ckpt export {opt('format')} vllm writes what it loads",
        )
    return engine


def plan_fix(
    drafter: str | Path,
    out: str | Path | None = None,
    *,
    target: str | Path | None = None,
    in_place: bool = False,
    download: bool = True,
    engine: str = "sglang",
) -> WritePlan:
    """What :func:`fix` would write, as a :class:`~ckpttools.io.plan.WritePlan` (validate runs, for
    ``engine``: an SGLang release, ``sglang==VERSION``; nothing is written). Its ``report`` holds the
    changes, what stays unfixed, validate's verdict before, and (in place) the backup's path."""
    if in_place == (out is not None):
        raise ValueError("give exactly one of an output path or in_place=True")
    with open_checkpoint(drafter, download=download) as ck:
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
        before = validate(ck, target, engine=_sglang_only(engine))
        tcfg = load_target_config(target)[0] if target is not None else None
        cfg, changes = _fix_config(ck, before, tcfg)
        renames, renamed = _fix_renames(ck, before)
        changes += renamed
        unfixed = [f"{f.id} at {f.location}: {f.message}" for f in before.errors if not fix_repairs(f)]
        backup = None
        if in_place:
            # the real directory (not "." or a link to it) is what gets replaced
            dest = Path(os.path.realpath(ck.root))
            backup = dest.parent / f"{dest.name}.bak-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            inputs = [target] if target is not None else []
        else:
            dest = Path(out)  # type: ignore[arg-type]
            inputs = [ck.root, *([target] if target is not None else [])]
        check_output(dest, inputs, replacing=dest if in_place else None)
        tensors = [
            PlannedTensor(
                renames.get(n, n), t.dtype, t.shape, Copy(TensorRef(n, str(h.path), t.start, t.dtype, t.shape))
            )
            for h in ck.headers.values()
            for n, t in h.tensors.items()
        ]
        params = {"target": str(target) if target else None, "changes": changes}
        return WritePlan(
            "fix",
            str(dest),
            tensors,
            config=cfg,
            config_before=ck.config,
            side_files=side_files(ck),
            manifest=ManifestPlan("fix", params, {"drafter": ck.files()}),
            inputs=inputs,
            shards=[[renames.get(n, n) for n in h.tensors] for h in ck.headers.values()],
            report={"changes": changes, "unfixed": unfixed, "before": before, "backup": backup},
        )


def fix(
    drafter: str | Path,
    out: str | Path | None = None,
    *,
    target: str | Path | None = None,
    in_place: bool = False,
    force: bool = False,
    engine: str = "sglang",
) -> FixResult:
    """Write a corrected copy of a drafter and validate it.

    Config edits: architectures (the names in engines.flavor.FIXABLE_ARCHS -> SGLang's Llama
    drafter class), and the repairs export makes too, where the field is missing
    or short (engines/repairs.py): max_position_embeddings raised to the target's context,
    num_hidden_layers / draft_vocab_size / torch_dtype from the weights.
    Tensor renames: names SGLang would drop that have a known loadable name. Tensor bytes
    are copied unchanged. The input is never modified; with ``in_place`` the original
    directory is kept as a backup beside it and the fixed copy takes its place.

    Raises:
        NoWeightsError: a config.json alone cannot be fixed into a checkpoint.
        OutputExistsError: ``out`` exists and ``force`` is not set.
    """
    plan = plan_fix(drafter, out, target=target, in_place=in_place, engine=engine)
    r = plan.report
    written = execute(plan, force=force, in_place=in_place, backup=r["backup"])
    after = validate(written.output, target, engine=engine)
    backup = str(r["backup"]) if r["backup"] else None
    return FixResult(str(written.output), backup, r["changes"], r["before"], after, r["unfixed"])
