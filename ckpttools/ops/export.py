"""``ckpt export``: turn any drafter layout into one SGLang (or vLLM) loads as intended.

Names are made canonical by the rules in :mod:`ckpttools.formats.names`; training-only and
unknown tensors are dropped and listed; d2t becomes int64 offsets and t2d is built when
missing; the config gets the fields the engine reads. The output is validated before it
is moved into place: if validate finds an error, nothing appears at OUT.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpttools.errors import CkptError, ConfigError, opt
from ckpttools.engines.config_rules import canonical_shapes, weight_problems
from ckpttools.formats.config import aux_layer_ids, essentials, require_valid_config
from ckpttools.engines.aux_rules import (
    LATER_LAYER_NORM,
    capture_rule,
    fc_options,
    later_layer_norm_names,
    layout_engine,
)
from ckpttools.formats.conventions import ST_DTYPE, load_target_config
from ckpttools.engines.repairs import repair_config
from ckpttools.engines.flavor import detect_flavor
from ckpttools.engines.claims import arch as engine_arch
from ckpttools.engines.claims import claim
from ckpttools.engines.load_plan import holds_d2t
from ckpttools.engines.names import QK_NORM
from ckpttools.engines.releases import resolve
from ckpttools.io.checkpoint import Checkpoint, open_checkpoint
from ckpttools.io.guard import check_output
from ckpttools.io.plan import (
    Check,
    Data,
    PlannedTensor,
    WritePlan,
    execute,
    side_files,
)
from ckpttools.ops.export_common import (
    DROPPED_KEYS,
    ExportRejected,
    ExportReport,
    copy_or_cast,
    export_write_plan,
    flatten_speculators,
    float_dtype,
    output_float_dtypes,
    plan_names,
    set_config,
    source_boundaries,
    target_arch,
    without_d2t,
)
from ckpttools.ops import quant_export

if TYPE_CHECKING:
    from ckpttools.vocab.mapping import VocabMapping

__all__ = ["ExportReport", "ExportRejected", "plan_export", "export", "FORMATS", "DTYPES"]

FORMATS = ("sglang", "vllm", "trtllm")
DTYPES = {"bf16": "BF16", "fp16": "F16", "keep": None, "auto": None}

#: how each source layout counts eagle_aux_hidden_state_layer_ids: "output" = the output of


def _plan_config(
    ck: Checkpoint,
    flavor: str,
    fmt: str,
    out_dtype: str | None,
    names: dict[str, str],
    target_cfg: dict[str, Any] | None,
    notes: list[str],
) -> tuple[dict, list[str]]:
    """The output's config.json, and each change to the source's, in words."""
    src = copy.deepcopy(ck.config or {})
    changes: list[str] = []
    if "speculators_config" in src or "transformer_layer_config" in src:
        src, changes = flatten_speculators(src)
    cfg = {k: v for k, v in src.items() if k not in DROPPED_KEYS}
    arch = engine_arch("sglang", "sglang_mla") if flavor == "mla" else engine_arch(fmt, f"{fmt}_llama")
    if any(QK_NORM.match(n) for n in names.values()):
        arch = engine_arch("vllm", "vllm_qwen3")  # vLLM's class for drafters with q/k norms
    set_config(cfg, "architectures", [arch], changes)
    kept = {new: ck.tensors[n] for n, new in names.items()}
    changes += repair_config(cfg, kept, target_cfg=target_cfg, dtypes=output_float_dtypes(ck, names, out_dtype))
    _write_aux_ids(cfg, ck.config, flavor, fmt, target_cfg, notes, changes)
    _carry_fc_options(cfg, fmt, changes)
    if fmt == "vllm":
        for k in ("norm_before_residual", "norm_before_fc"):
            if k not in cfg:
                set_config(cfg, k, bool(src.get(k, False)), changes)
    if target_cfg is not None:
        tv = essentials(target_cfg).vocab_size
        if "vocab_size" not in cfg and isinstance(tv, int):
            set_config(cfg, "vocab_size", tv, changes)
    return cfg, changes


def _carry_fc_options(cfg: dict[str, Any], fmt: str, changes: list[str]) -> None:
    """EAGLE-3.1 options in the form the output engine reads (engines/aux_rules.fc_options):
    vLLM reads fc_norm, not the legacy use_aux_norm; fc's width follows num_aux_hidden_states
    or eagle_config's ids, never top-level ids, so it is written when the ids say otherwise."""
    if fmt == "vllm" and cfg.get("use_aux_norm") and not cfg.get("fc_norm"):
        set_config(cfg, "fc_norm", True, changes)
    ids, _ = aux_layer_ids(cfg)
    if ids and fc_options(cfg, fmt).num_aux != len(set(ids)):
        set_config(cfg, "num_aux_hidden_states", len(set(ids)), changes)


def _write_aux_ids(
    cfg: dict[str, Any],
    source_cfg: Any,
    flavor: str,
    fmt: str,
    target_cfg: dict[str, Any] | None,
    notes: list[str],
    changes: list[str],
) -> None:
    """Aux layer ids where the output engine reads them, written so it captures the same boundaries."""
    ids, bounds = source_boundaries(source_cfg, flavor, target_cfg, notes)
    eagle_cfg = dict(cfg.pop("eagle_config", None) or {})
    out_ids = None
    if bounds is not None and fmt == "sglang":
        L = essentials(target_cfg).num_hidden_layers if target_cfg is not None else max(bounds) + 1
        rule, _ = capture_rule("sglang", target_arch(target_cfg))
        out_ids = rule.ids_for(bounds, L)  # type: ignore[arg-type]
        if out_ids is None and max(bounds) > rule.top(L):  # type: ignore[arg-type]
            out_ids = ids if ids is not None else [b - 1 for b in bounds]  # unreachable: validate says so below
        if out_ids is None:
            raise ConfigError(
                f"SGLang cannot capture the inputs of layers {bounds} of a {target_arch(target_cfg)} target: it "
                f"{rule.describe()} (read from {rule.source})",
                hint="serve this drafter with vLLM, which reads the ids as they are",
            )
        eagle_cfg["eagle_aux_hidden_state_layer_ids"] = out_ids
    elif bounds is not None:
        out_ids = bounds
        eagle_cfg.pop("eagle_aux_hidden_state_layer_ids", None)
        cfg["eagle_aux_hidden_state_layer_ids"] = out_ids
        notes.append(f"vLLM config: eagle_aux_hidden_state_layer_ids {out_ids} (vLLM captures the input of layer id)")
    if eagle_cfg:
        cfg["eagle_config"] = eagle_cfg
    if out_ids is not None and out_ids != ids:
        engine = "SGLang" if fmt == "sglang" else "vLLM"
        changes.append(
            f"config: aux layer ids {ids} -> {out_ids} ({engine} reads them so for this target; same layers)"
        )


def plan_export(
    src: str | Path,
    out: str | Path,
    *,
    format: str = "sglang",
    target: str | Path | None = None,
    dtype: str = "auto",
    max_shard_size: int | str | None = None,
    download: bool = True,
) -> WritePlan:
    """What :func:`export` would write, as a :class:`~ckpttools.io.plan.WritePlan`: headers and
    d2t/t2d are read, nothing is written. Its check validates the written tree before the rename.
    ``download=False`` (``--dry-run``) reads a Hub drafter's headers without downloading it."""
    target_cfg, out_dtype = _settings(format, target, dtype)
    with open_checkpoint(src, download=download) as ck:
        return _plan(ck, src, out, format, target, target_cfg, dtype, out_dtype, max_shard_size)


def _settings(format: str, target: str | Path | None, dtype: str) -> tuple[dict[str, Any] | None, str | None]:
    """The format and dtype checked, and the target's config with the output dtype it implies."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {tuple(DTYPES)}")
    target_cfg = load_target_config(target)[0] if target is not None else None
    require_valid_config(target_cfg, f"target {target}")
    out_dtype = DTYPES[dtype]
    if dtype == "auto" and target_cfg is not None:
        out_dtype = ST_DTYPE.get(essentials(target_cfg).torch_dtype or "")
    return target_cfg, out_dtype


def _plan(
    ck: Checkpoint,
    src: str | Path,
    out: str | Path,
    format: str,
    target: str | Path | None,
    target_cfg: dict[str, Any] | None,
    dtype: str,
    out_dtype: str | None,
    max_shard_size: int | str | None,
    during_write: bool = False,
) -> WritePlan:
    """plan_export's work on the open drafter ``ck``. ``during_write``: where the plan needs no
    vocabulary mapping (its d2t and t2d are copied as they are), d2t/t2d are checked on a thread
    while the tensors are written (:attr:`WritePlan.during`), not before: the check, numpy's
    import with it, then costs no wall time beside the kernel copy, and its error still leaves
    nothing at the output. ``ck`` must stay open until the plan is executed."""
    require_valid_config(ck.config, str(src), weight_problems(ck.config, canonical_shapes(ck.config, ck.tensors)))
    check_output(out, [ck.root, *([target] if target is not None else [])])
    if format == "trtllm":
        quant_export.refuse_quantized(ck, "export to TensorRT-LLM")
        from ckpttools.ops.export_trtllm import plan_trtllm

        return plan_trtllm(ck, str(src), out, target, target_cfg, dtype, out_dtype, max_shard_size)
    flavor = _eagle3_flavor(ck, str(src), format)
    shown_dtype = dtype if dtype != "auto" else f"auto ({out_dtype or 'keep'})"
    report = ExportReport(None, str(src), flavor, format, shown_dtype)
    names = _later_norms(plan_names(ck, report), flavor, format, report)
    cfg, report.config_changes = _plan_config(ck, flavor, format, out_dtype, names, target_cfg, report.notes)
    keeps_d2t = holds_d2t(cfg, resolve(format)) is not False  # vLLM: only for a reduced draft vocab
    # the mapping decides the plan only where t2d is built from it or d2t is dropped
    later = during_write and keeps_d2t and {"d2t", "t2d"} <= set(names.values())
    at = len(report.notes)
    mapping = None if later else _checked_mapping(ck, names, report, keeps_d2t)
    v = essentials(ck.config).vocab_size or (essentials(target_cfg).vocab_size if target_cfg else None)
    tensors = _plan_tensors(ck, names, out_dtype, mapping, v, report)
    tensors = quant_export.adjust(ck, names, tensors, cfg, dtype, resolve(format), report)  # FP8 weights
    if not keeps_d2t:
        tensors = without_d2t(ck, names, tensors, resolve(format).spec, report)
    plan = export_write_plan(
        ck,
        out,
        tensors,
        cfg,
        report,
        {"format": format, "target": target, "dtype": dtype, "max_shard_size": max_shard_size},
        side_files(ck),
        lambda fields: _validation(Path(out), target, format, fields),
    )
    if later:
        plan.during.append(lambda: _mapping_during_write(ck, names, plan.report["notes"], at))
    return plan


def _mapping_during_write(ck: Checkpoint, names: dict[str, str], notes: list[str], at: int) -> None:
    """_checked_mapping on the execute's thread: its note goes where planning would have put it."""
    report = ExportReport(None, str(ck.source), "", "", "")
    _checked_mapping(ck, names, report)
    notes[at:at] = report.notes


def export(
    src: str | Path,
    out: str | Path,
    *,
    format: str = "sglang",
    target: str | Path | None = None,
    dtype: str = "auto",
    max_shard_size: int | str | None = None,
    force: bool = False,
    fsync: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> ExportReport:
    """Export a drafter of any detected layout to SGLang's (or vLLM's, or TensorRT-LLM's) layout.

    Args:
        src: the drafter (any flavor ``ckpt inspect`` detects; sharded, fp32, ``model.``
            prefixes all fine).
        out: the output directory; nothing appears there unless validate passes.
        format: ``sglang``, ``vllm`` or ``trtllm`` (TensorRT-LLM's PyTorch backend: the weights and
            config its EAGLE-3 loader reads, plus a serving-config fragment with the captured layers;
            :mod:`ckpttools.ops.export_trtllm`, read from its source, not run).
        target: the target model; gives aux layer ids when the source has none and the
            context length max_position_embeddings must cover.
        dtype: ``bf16``, ``fp16``, ``keep``, or ``auto`` (the default): the target's dtype
            when ``target`` states one (SGLang crashes on a drafter whose dtype differs
            from its target's), else keep.

    Returns:
        an :class:`ExportReport` (its ``validation`` holds validate's findings).

    Raises:
        ExportRejected (exit 1): validate found errors; OUT was not written.
        CkptError subclasses (exit 2) for unreadable input or an existing OUT.

    Example:
        >>> export("./eagle-official", "./for-sglang", target="./llama-3.1-8b")  # doctest: +SKIP
    """
    t0 = time.perf_counter()
    target_cfg, out_dtype = _settings(format, target, dtype)
    with open_checkpoint(src, download=True) as ck:  # open while it is written: d2t/t2d are checked then
        plan = _plan(ck, src, out, format, target, target_cfg, dtype, out_dtype, max_shard_size, during_write=True)
        written = execute(plan, force=force, fsync=fsync, progress=progress)
    report = ExportReport(**plan.report)
    report.output = str(out)
    report.validation = written.check_result
    report.seconds = time.perf_counter() - t0
    return report


def _validation(dest: Path, target: str | Path | None, fmt: str, fields: dict[str, Any]) -> Check:
    """validate what was written, before it is moved into place; errors leave nothing at ``dest``."""

    def run(tree: Path) -> dict[str, Any]:
        from ckpttools.ops.validate import validate

        with open_checkpoint(tree) as written:
            written.source = str(dest)
            val = validate(written, target, engine=fmt)
        if not val.ok:
            raise ExportRejected(
                f"validate found {len(val.errors)} error(s) in the export ({', '.join(f.id for f in val.errors)}); "
                f"nothing was written to {dest}",
                ExportReport(**{**fields, "validation": val.to_dict()}),
            )
        return val.to_dict()

    against = f" against the target {target}" if target is not None else ""
    return Check(f"validate for {fmt}{against}: any error leaves nothing at the output", run, _VALIDATE_IMPORTS)


#: what validate imports when it runs: brought in while the tensors are copied (io.plan.Check.warm)
_VALIDATE_IMPORTS = ("ckpttools.ops.validate", "jsonschema", "ckpttools.engines.load_plan")


def _eagle3_flavor(ck: Checkpoint, src: str, fmt: str) -> str:
    detected = detect_flavor(ck.config, ck.tensors.keys())
    detected.refuse(src, "export")
    qk = next((n for n in ck.tensors if QK_NORM.match(n)), None)
    if qk is not None and fmt == "sglang":
        raise CkptError(
            f"{src}: a Qwen3-architecture drafter ({qk}): " + claim("sglang:export.qk_norm"),
            path=src,
            hint=claim("sglang:export.qk_norm_hint") + f" ({opt('format')} vllm)",
        )
    return detected.kind


def _later_norms(names: dict[str, str], flavor: str, fmt: str, report: ExportReport) -> dict[str, str]:
    """A multi-layer drafter between engines: layers 1 and up trade hidden_norm and input_layernorm
    (each engine reads the other one there; LATER_LAYER_NORM has the sources)."""
    src = layout_engine(flavor)
    out = later_layer_norm_names(names, src, fmt)
    moved = [(n, new) for n, new in out.items() if new != names[n]]
    if moved:
        report.notes.append(
            f"layers 1 and up: {LATER_LAYER_NORM[src][0]} becomes {LATER_LAYER_NORM[fmt][0]} (and the other way), "
            f"the norm {fmt} applies there ({LATER_LAYER_NORM[fmt][1]}; {src}: {LATER_LAYER_NORM[src][1]})"
        )
        report.renamed = [[n, new] for n, new in out.items() if new != n]
    return out


def _checked_mapping(
    ck: Checkpoint, names: dict[str, str], report: ExportReport, kept: bool = True
) -> VocabMapping | None:
    if "d2t" not in names.values():
        return None
    from ckpttools.vocab.mapping import VocabMapping

    mapping = VocabMapping.from_checkpoint(ck)
    if mapping is not None and mapping.order != "ascending" and kept:
        report.notes.append(
            "d2t is in frequency order (not ascending target ids): valid for SGLang and "
            "vLLM, which read it as is, so it was kept as it is, not reordered"
        )
    return mapping


def _plan_tensors(
    ck: Checkpoint,
    names: dict[str, str],
    out_dtype: str | None,
    mapping: VocabMapping | None,
    vocab_size: Any,
    report: ExportReport,
) -> list[PlannedTensor]:
    """The output's tensors: int64 d2t, bool t2d (built when missing), floats in the output dtype."""
    tensors: list[PlannedTensor] = []
    for n, new in names.items():
        dt = {"d2t": "I64", "t2d": "BOOL"}.get(new) or float_dtype(ck.tensors[n].dtype, out_dtype)
        tensors.append(copy_or_cast(ck, n, new, dt, report))
    if mapping is not None and "t2d" not in names.values():
        import numpy as np

        vt = int(vocab_size) if isinstance(vocab_size, int) else int(mapping.ids.max()) + 1
        tensors.append(PlannedTensor("t2d", "BOOL", (vt,), Data(np.asarray(mapping.t2d(vt), bool))))
        report.built.append(f"t2d: built from d2t over a vocabulary of {vt}")
    return tensors
