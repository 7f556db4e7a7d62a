"""What every export format shares: the report, the refusal, the config edits, the tensor names
kept, the aux ids read as boundaries, the d2t an engine does not hold, and the WritePlan an
export becomes. :mod:`ckpttools.ops.export` (SGLang, vLLM) and
:mod:`ckpttools.ops.export_trtllm` (TensorRT-LLM) build on these; neither imports the other's
private names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.engines.aux_rules import capture_rule, default_boundaries
from ckpttools.engines.names import QK_NORM, sglang_loads, suggest_rename
from ckpttools.errors import EXIT_FINDINGS, CkptError, ConfigError, opt
from ckpttools.formats.config import aux_layer_ids, essentials
from ckpttools.formats.names import canonical_name, is_training_only
from ckpttools.io.checkpoint import Checkpoint
from ckpttools.io.plan import Cast, Check, Copy, Gather, ManifestPlan, PlannedTensor, TensorRef, WritePlan
from ckpttools.io.preflight import refuse_shared_names
from ckpttools.io.writer import parse_size

__all__ = [
    "ExportReport",
    "ExportRejected",
    "FLOATS",
    "DROPPED_KEYS",
    "flatten_speculators",
    "set_config",
    "target_arch",
    "source_boundaries",
    "plan_names",
    "without_d2t",
    "export_write_plan",
    "float_dtype",
    "output_float_dtypes",
    "copy_or_cast",
]

FLOATS = ("F32", "F16", "BF16", "F64")


class ExportRejected(CkptError):
    """validate found errors in what export wrote; nothing was put at OUT (exit 1)."""

    exit_code = EXIT_FINDINGS
    default_hint = f"fix the findings listed (often: give {opt('target')}, or repair the source), then export again"

    def __init__(self, message: str, report: ExportReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class ExportReport:
    """What :func:`export` did."""

    output: str | None
    source: str
    source_flavor: str
    format: str
    dtype: str
    renamed: list[list[str]] = field(default_factory=list)
    dropped: list[list[str]] = field(default_factory=list)
    cast: list[str] = field(default_factory=list)
    built: list[str] = field(default_factory=list)
    config_changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tensors: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    validation: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def flatten_speculators(cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    inner = dict(cfg.get("transformer_layer_config") or {})
    changes = ["config: flattened speculators' transformer_layer_config to the top level"]
    for k in ("draft_vocab_size", "target_hidden_size", "norm_before_residual", "eagle_aux_hidden_state_layer_ids"):
        if cfg.get(k) is not None:
            inner[k] = cfg[k]
    return inner, changes


def set_config(cfg: dict[str, Any], key: str, value: Any, changes: list[str]) -> None:
    if cfg.get(key, object()) != value:
        changes.append(f"config: {key} {cfg.get(key)!r} -> {value!r}")
        cfg[key] = value


DROPPED_KEYS = (
    "speculators_config",
    "speculators_model_type",
    "speculators_version",
    "eagle_aux_hidden_state_layer_ids",
)


def source_boundaries(
    source_cfg: Any, flavor: str, target_cfg: dict[str, Any] | None, notes: list[str]
) -> tuple[list[int] | None, list[int] | None]:
    """The source's aux ids, and the boundaries they mean (the inputs of which target layers).

    A vLLM-layout drafter's ids are the boundaries (vLLM reads them as they are); any other
    layout's ids are read as SGLang reads them for the target's class (engines/aux_rules.py).
    With no ids, the engines' default boundaries for the target.
    """
    ids, _ = aux_layer_ids(source_cfg)
    L = essentials(target_cfg).num_hidden_layers if target_cfg is not None else None
    if target_cfg is not None and not isinstance(L, int):
        raise ConfigError(f"the target's num_hidden_layers is {L!r}: the aux layer ids need it")
    if ids is not None:
        if flavor == "vllm":
            return ids, sorted(set(ids))
        rule, exact = capture_rule("sglang", target_arch(target_cfg))
        if not exact:
            notes.append(
                "aux layer ids read with SGLang's Llama rule (output of layer id): "
                + ("give the target for its class's own rule" if target_cfg is None else "no rule read for its class")
            )
        return ids, rule.boundaries(ids, L if isinstance(L, int) else max(ids) + 2)
    if target_cfg is None or not isinstance(L, int):
        return None, None
    b = default_boundaries(L)
    notes.append(
        f"no aux layer ids in the source: wrote the engines' default for a {L}-layer target, the inputs of layers {b}"
    )
    return None, b


def target_arch(cfg: dict[str, Any] | None) -> str | None:
    archs = essentials(cfg).architectures if cfg is not None else None
    return archs[0] if archs else None


def export_write_plan(
    ck: Checkpoint,
    out: str | Path,
    tensors: list[PlannedTensor],
    cfg: dict[str, Any],
    report: ExportReport,
    params: dict[str, Any],
    sides: list[Any],
    check: Callable[[dict[str, Any]], Check],
) -> WritePlan:
    """The WritePlan of an export in any format: the report's totals, the manifest (``params``:
    format, target, dtype, max_shard_size), and the ``check`` made from the report's fields."""
    report.tensors = len(tensors)
    report.bytes_written = sum(t.nbytes for t in tensors)
    target = params["target"]
    params = {**params, "target": str(target) if target else None}
    extra: dict[str, Any] = {"renamed": report.renamed, "dropped": report.dropped}
    if ck.hub is not None:
        extra["hub"] = {"drafter": ck.hub_record()}
    fields = report.to_dict()
    return WritePlan(
        "export",
        str(out),
        tensors,
        config=cfg,
        config_before=ck.config,
        side_files=sides,
        manifest=ManifestPlan("export", params, {"drafter": ck.files()}, extra),
        check=check(fields),
        inputs=[ck.root, *([target] if target is not None else [])],
        max_shard_size=parse_size(params["max_shard_size"]),
        report=fields,
    )


def plan_names(ck: Checkpoint, report: ExportReport) -> dict[str, str]:
    """Each kept tensor's output name (canonical, or renamed); drops and renames go in the report."""
    names: dict[str, str] = {}
    for n in ck.tensors:
        canon, _ = canonical_name(n)
        if is_training_only(n):
            report.dropped.append([n, "training-only"])
        elif sglang_loads(n) or QK_NORM.match(n):  # q/k norms: kept for vLLM (SGLang output is refused before)
            names[n] = canon
        elif (new := suggest_rename(n)) is not None:
            names[n] = new
        else:
            report.dropped.append([n, "no engine loads this name"])
            continue
        if names.get(n, n) != n:
            report.renamed.append([n, names[n]])
    refuse_shared_names(names.items(), str(ck.source))
    return names


def without_d2t(
    ck: Checkpoint, names: dict[str, str], tensors: list[PlannedTensor], engine: str, report: ExportReport
) -> list[PlannedTensor]:
    """The tensors of an export to an engine whose class holds no d2t (the draft vocab is the full
    vocab; ``load_plan.holds_d2t``): it reads draft slot i as target token i. The source's d2t is
    left out only once it is proven the identity (every offset 0); a d2t that permutes the
    vocabulary puts lm_head's rows in target order instead (output row t is the row of the slot
    that held token t), so every draft still names the token it was trained to. A d2t that is no
    permutation of the vocabulary, or one with no lm_head to reorder, is refused."""
    import numpy as np

    d2t = next((n for n, canon in names.items() if canon == "d2t"), None)
    if d2t is None:
        return tensors
    out = [t for t in tensors if t.name != names[d2t]]
    from ckpttools.vocab.mapping import VocabMapping

    ids = VocabMapping.from_checkpoint(ck).ids  # type: ignore[union-attr]  # a d2t is there
    v = len(ids)
    if np.array_equal(ids, np.arange(v)):
        report.dropped.append(
            [
                d2t,
                f"the draft vocab is the full vocab and {engine}'s class holds no d2t; it was the identity (every offset 0)",
            ]
        )
        return out
    head = next((i for i, t in enumerate(out) if canonical_name(t.name)[0] == "lm_head.weight"), None)
    if not np.array_equal(np.sort(ids), np.arange(v)):
        raise ConfigError(
            f"{ck.source}: d2t maps the {v} draft slots onto target ids {int(ids.min())}..{int(ids.max())}, not onto "
            f"the vocabulary's {v} tokens once each: {engine} holds no d2t for a full draft vocab, and no order of "
            "lm_head's rows means the same",
            path=str(ck.source),
            hint="check draft_vocab_size and vocab_size in config.json against d2t",
        )
    src = out[head].source if head is not None else None
    if head is None or not isinstance(src, (Copy, Cast)) or out[head].shape[:1] != (v,):
        raise ConfigError(
            f"{ck.source}: d2t permutes the full vocabulary, but there is no lm_head of {v} rows to put in target "
            f"order: {engine} holds no d2t for a full draft vocab, so every draft would name another token",
            path=str(ck.source),
            hint="give the drafter's lm_head, or a d2t that is the identity",
        )
    t = out[head]
    order = np.argsort(ids, kind="stable").astype(np.int64)  # ids[order[r]] == r
    fill = bytes(t.nbytes // max(1, v))
    out[head] = PlannedTensor(t.name, t.dtype, t.shape, Gather((src.ref,), np.zeros(v, np.int64), order, fill))
    moved = int(np.count_nonzero(order != np.arange(v)))
    report.dropped.append(
        [
            d2t,
            f"the draft vocab is the full vocab and {engine}'s class holds no d2t; its order is in lm_head's rows now",
        ]
    )
    report.notes.append(
        f"lm_head: rows put in target order ({moved:,} of {v:,} moved), as d2t permuted the full vocabulary and "
        f"{engine} reads draft slot i as target token i"
    )
    return out


def float_dtype(dtype: str, out_dtype: str | None) -> str:
    """A tensor's dtype in the output: a float one becomes ``out_dtype`` when one is asked for."""
    return out_dtype if out_dtype and dtype in FLOATS else dtype


def output_float_dtypes(ck: Checkpoint, names: dict[str, str], out_dtype: str | None) -> list[str]:
    """The output dtype of each kept float tensor (what the config's torch_dtype is repaired from)."""
    return [float_dtype(t.dtype, out_dtype) for n, t in ck.tensors.items() if n in names and t.dtype in FLOATS]


def copy_or_cast(ck: Checkpoint, name: str, new: str, dtype: str, report: ExportReport) -> PlannedTensor:
    """Tensor ``name`` of ``ck`` as the output's ``new`` in ``dtype``: its bytes copied, or cast (the
    report lists each cast)."""
    t = ck.tensors[name]
    ref = TensorRef.of(ck, name)
    if dtype == t.dtype:
        return PlannedTensor(new, dtype, t.shape, Copy(ref))
    report.cast.append(f"{name}: {t.dtype} -> {dtype}")
    return PlannedTensor(new, dtype, t.shape, Cast(ref))
