"""``export`` to TensorRT-LLM: a drafter as its PyTorch backend's EAGLE-3 loader reads it, plus the
serving-config fragment naming the target layers the drafter captures.

Every TensorRT-LLM fact used here is in its engine table (``TRTLLM_1_2`` in
:mod:`ckpttools.engines.releases`: ``export_format``, ``aux_rules``, ``later_layer_norm``), read from
TensorRT-LLM's source, not seen in a run:

- tensor names are bare (its ``load_weights`` puts ``model.`` before all but lm_head): one layer as
  the class's own ``midlayer.``, several as ``layers.N.``, which ``load_weights`` renames to the
  class's ``midlayer.N.``; a layer after the first has no ``input_layernorm``; t2d has no parameter
  and is dropped; embed_tokens is kept only when the drafter's hidden size differs from the
  target's (otherwise the target's is shared);
- d2t is int32, and written only when the draft vocab is reduced (the class holds it only then);
  for a full draft vocab, a d2t that permutes it puts lm_head's rows in target order instead
  (:func:`ckpttools.ops.export_common.without_d2t`), and one that is no permutation is refused;
- config.json: ``architectures`` from the table, ``draft_vocab_size`` always an integer,
  ``norm_before_fc`` in ``eagle_config`` (the only place the class reads it), ``fc_norm`` at the top;
- :data:`FRAGMENT_NAME` (YAML): ``speculative_config`` with ``decoding_type``, ``max_draft_len``,
  ``speculative_model`` (OUT, absolute) and ``eagle3_layers_to_capture``. TensorRT-LLM takes the
  captured layers from there, not from the drafter: the drafter's aux ids are read as the boundaries
  they mean (as every export reads them), then written in TensorRT-LLM's convention, the output of
  layer id. Without ids and a target the field is left out (TensorRT-LLM's default applies).

Before the rename, what TensorRT-LLM builds from the written tree (the load plan of
:mod:`ckpttools.engines.load_plan`, as validate's load plan shows it) must hold no error, and fc must
take as many aux states as the fragment captures; otherwise nothing appears at OUT.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

from ckpttools.engines.releases import EngineRelease, resolve
from ckpttools.errors import CkptError, ConfigError, opt
from ckpttools.engines.aux_rules import LATER_LAYER_NORM, capture_rule, later_layer_norm_names, layout_engine
from ckpttools.formats.config import essentials
from ckpttools.engines.flavor import detect_flavor
from ckpttools.engines.names import QK_NORM
from ckpttools.engines.repairs import repair_config
from ckpttools.io.checkpoint import Checkpoint, numpy_dtype, open_checkpoint
from ckpttools.io.plan import Check, Data, PlannedTensor, SideFile, WritePlan
from ckpttools.io.plan import side_files as source_side_files
from ckpttools.io.preflight import refuse_shared_names
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
from ckpttools.vocab.mapping import VocabMapping

__all__ = ["FRAGMENT_NAME", "MAX_DRAFT_LEN", "plan_trtllm"]

#: the serving-config fragment export writes beside the weights (ckpttools' name for it)
FRAGMENT_NAME = "trtllm-speculative-config.yaml"
#: the fragment's max_draft_len: ckpttools' choice (TensorRT-LLM only needs it above 0); edit it there
MAX_DRAFT_LEN = 3

_LATER_INPUT_NORM = re.compile(r"layers\.([1-9]\d*)\.input_layernorm\.weight")
_LAYER = re.compile(r"layers\.(\d+)\.")


def plan_trtllm(
    ck: Checkpoint,
    src: str,
    out: str | Path,
    target: str | Path | None,
    target_cfg: dict[str, Any] | None,
    dtype: str,
    out_dtype: str | None,
    max_shard_size: int | str | None,
) -> WritePlan:
    """:func:`ckpttools.ops.export.plan_export` for TensorRT-LLM, on an open checkpoint whose output
    was already checked against the inputs."""
    release = resolve("trtllm")
    layout = _layout(release)
    flavor = _flavor(ck, src, layout)
    shown_dtype = dtype if dtype != "auto" else f"auto ({out_dtype or 'keep'})"
    report = ExportReport(None, src, flavor, "trtllm", shown_dtype)
    report.notes.append(f"{release.spec}: {release.read_from}; every fact used is read from its source, not a run")
    names = _names(ck, flavor, release, layout, report)
    _, bounds = source_boundaries(ck.config, flavor, target_cfg, report.notes)
    captured = _captured(bounds, target_cfg, release)
    cfg, report.config_changes = _config(ck, names, out_dtype, target_cfg, layout, bounds, captured, report.notes)
    tensors = _tensors(ck, names, out_dtype, cfg, layout, report)
    fragment = _fragment(out, captured, bounds, layout)
    report.notes += _fragment_notes(captured, bounds, layout)
    return export_write_plan(
        ck,
        out,
        tensors,
        cfg,
        report,
        {"format": "trtllm", "target": target, "dtype": dtype, "max_shard_size": max_shard_size},
        _sides(ck, fragment, layout),
        lambda fields: _check(Path(out), release, layout, captured, fields, target),
    )


def _layout(release: EngineRelease) -> dict[str, Any]:
    got = release.export_format.value
    if got is None:
        raise ConfigError(f"{release.spec}: its table has no export format")
    return dict(got)


def _flavor(ck: Checkpoint, src: str, layout: dict[str, Any]) -> str:
    """The source's layout; refused where the table says TensorRT-LLM's class cannot hold it."""
    detected = detect_flavor(ck.config, ck.tensors.keys())
    detected.refuse(src, "export")
    refused = layout["refused"]
    if detected.kind == "mla":
        raise CkptError(
            f"{src}: an MLA drafter: {refused['mla']}", path=src, hint=f"export it for SGLang ({opt('format')} sglang)"
        )
    qk = next((n for n in ck.tensors if QK_NORM.match(n)), None)
    if qk is not None:
        raise CkptError(
            f"{src}: a Qwen3-architecture drafter ({qk}): {refused['qk_norm']}",
            path=src,
            hint=f"export it for vLLM ({opt('format')} vllm)",
        )
    return detected.kind


def _names(
    ck: Checkpoint, flavor: str, release: EngineRelease, layout: dict[str, Any], report: ExportReport
) -> dict[str, str]:
    """Each kept tensor's canonical name (``layers.N.``), later-layer norms in TensorRT-LLM's reading;
    the tensors its class has no parameter for are dropped and listed."""
    names = plan_names(ck, report)
    src = layout_engine(flavor)
    norm = release.later_layer_norm.value
    same = next(e for e, (n, _) in LATER_LAYER_NORM.items() if n == norm)  # the engine whose later norm it shares
    moved = later_layer_norm_names(names, src, same)
    if moved != names:
        report.notes.append(
            f"layers 1 and up: {LATER_LAYER_NORM[src][0]} becomes {norm} (and the other way), the norm "
            f"{release.spec} applies there ({release.later_layer_norm.source})"
        )
    hidden_differs = _hidden_differs(ck.config)
    out: dict[str, str] = {}
    for n, canon in moved.items():
        why = None if canon in ("d2t", "t2d") else _no_param(canon, layout, hidden_differs)  # the map: _d2t
        if why is None:
            out[n] = canon
        else:
            report.dropped.append([n, why])
    return out


def _hidden_differs(cfg: Any) -> bool:
    c = cfg or {}
    got = c.get("transformer_layer_config")
    inner: dict[str, Any] = got if isinstance(got, dict) else {}
    hidden = c.get("hidden_size", inner.get("hidden_size"))
    t = c.get("target_hidden_size")
    return t is not None and t != hidden


def _no_param(canon: str, layout: dict[str, Any], hidden_differs: bool) -> str | None:
    """Why TensorRT-LLM's class has no parameter for this tensor (None: it has one)."""
    if canon in layout["no_param"]:
        return "TensorRT-LLM's class has no parameter for it: never read"
    if canon == "embed_tokens.weight" and not hidden_differs and layout["embed_tokens"] == "only_when_hidden_differs":
        return "TensorRT-LLM builds no embed_tokens when the hidden sizes agree: the target's is shared"
    if _LATER_INPUT_NORM.fullmatch(canon) and not layout["later_layers_have_input_layernorm"]:
        return "a layer after the first has no input_layernorm in TensorRT-LLM's class (it reads hidden_norm)"
    return None


def _captured(bounds: list[int] | None, target_cfg: dict[str, Any] | None, release: EngineRelease) -> list[int] | None:
    """``eagle3_layers_to_capture`` for these boundaries, in TensorRT-LLM's convention (None: no ids)."""
    if bounds is None:
        return None
    rule = release.aux_rules.value
    n = essentials(target_cfg).num_hidden_layers if target_cfg is not None else None
    L = n if isinstance(n, int) else max(bounds)
    got = rule.ids_for(bounds, L)
    if got is not None:
        return list(got)
    of = f" of a {L}-layer target" if target_cfg is not None else ""
    hint = (
        f"only vLLM captures the embeddings' output: export it for vLLM ({opt('format')} vllm)"
        if 0 in bounds
        else "give the aux layer ids the drafter was trained with"
    )
    raise ConfigError(
        f"{release.spec} cannot capture the inputs of layers {bounds}{of}: it {rule.describe()}, ids 0 to {L - 1} "
        "(no id captures the embeddings' output; its table's aux_rules)",
        hint=hint,
    )


def _config(
    ck: Checkpoint,
    names: dict[str, str],
    out_dtype: str | None,
    target_cfg: dict[str, Any] | None,
    layout: dict[str, Any],
    bounds: list[int] | None,
    captured: list[int] | None,
    notes: list[str],
) -> tuple[dict[str, Any], list[str]]:
    """The output's config.json, and each change to the source's, in words."""
    src = copy.deepcopy(ck.config or {})
    changes: list[str] = []
    if "speculators_config" in src or "transformer_layer_config" in src:
        src, changes = flatten_speculators(src)
    cfg = {k: v for k, v in src.items() if k not in DROPPED_KEYS}
    set_config(cfg, "architectures", [layout["architecture"]], changes)
    kept = {new: ck.tensors[n] for n, new in names.items()}
    changes += repair_config(cfg, kept, target_cfg=target_cfg, dtypes=output_float_dtypes(ck, names, out_dtype))
    if target_cfg is not None and "vocab_size" not in cfg and isinstance(essentials(target_cfg).vocab_size, int):
        set_config(cfg, "vocab_size", essentials(target_cfg).vocab_size, changes)
    if cfg.get("draft_vocab_size") is None and isinstance(cfg.get("vocab_size"), int):
        set_config(cfg, "draft_vocab_size", cfg["vocab_size"], changes)  # the full vocab, said as a number
    if "target_hidden_size" in cfg and cfg["target_hidden_size"] is None and not layout["null_means_absent"]:
        changes.append("config: target_hidden_size None removed (TensorRT-LLM would take None as the aux width)")
        del cfg["target_hidden_size"]
    eagle = dict(cfg.pop("eagle_config", None) or {})
    eagle.pop("eagle_aux_hidden_state_layer_ids", None)
    if layout["norm_before_fc_in"] == "eagle_config":
        before = "input_norm.weight" in kept
        if eagle.get("norm_before_fc", False) != before:
            changes.append(
                f"config: eagle_config.norm_before_fc -> {before} (input_norm {'is' if before else 'is not'} "
                "in the weights; TensorRT-LLM reads the switch there only)"
            )
            eagle["norm_before_fc"] = before
    fc_norm = any(re.fullmatch(r"fc_norm\.\d+\.weight", n) for n in kept)
    if bool(cfg.get("fc_norm")) != fc_norm:
        set_config(cfg, "fc_norm", fc_norm, changes)
    if captured is not None and len(captured) != 3:
        set_config(cfg, "num_aux_hidden_states", len(captured), changes)
    _sglang_ids(eagle, bounds, target_cfg, notes)
    if eagle:
        cfg["eagle_config"] = eagle
    return cfg, changes


def _sglang_ids(
    eagle: dict[str, Any], bounds: list[int] | None, target_cfg: dict[str, Any] | None, notes: list[str]
) -> None:
    """The aux ids kept in config.json in SGLang's reading (this layout's), so a later export reads the
    same layers; TensorRT-LLM does not read them. Layers past SGLang's reach are said in its convention
    all the same (as export for SGLang does), so that reading them back gives the same layers."""
    if bounds is None:
        return
    rule, _ = capture_rule("sglang", target_arch(target_cfg))
    n = essentials(target_cfg).num_hidden_layers if target_cfg is not None else None
    L = n if isinstance(n, int) else max(bounds) + 1
    got = rule.ids_for(bounds, L)
    if got is None and min(bounds) >= 1 and rule.boundaries([b - 1 for b in bounds], L) == bounds:
        got = [b - 1 for b in bounds]
    if got is None:
        notes.append("config.json: no aux layer ids (SGLang's reading cannot say these layers); the fragment has them")
        return
    eagle["eagle_aux_hidden_state_layer_ids"] = got
    notes.append(
        f"config.json holds the aux layer ids {got}, written in SGLang's reading (TensorRT-LLM does not read "
        "them there)"
    )


def _out_name(canon: str, num_layers: int, layout: dict[str, Any]) -> str:
    """The output name of a canonical one: ``layers.0.`` becomes ``midlayer.`` for one layer; several
    take the table's prefix for layer N (``layers.N.``)."""
    m = _LAYER.match(canon)
    if not m:
        return canon
    one, many = layout["layer_prefix"]
    return (one if num_layers == 1 else many.format(i=m.group(1))) + canon[m.end() :]


def _tensors(
    ck: Checkpoint,
    names: dict[str, str],
    out_dtype: str | None,
    cfg: dict[str, Any],
    layout: dict[str, Any],
    report: ExportReport,
) -> list[PlannedTensor]:
    """The output's tensors in TensorRT-LLM's names: floats in the output dtype, d2t as the table says."""
    got = cfg.get("num_hidden_layers")
    n_layers = got if isinstance(got, int) else 1
    tensors: list[PlannedTensor] = []
    renamed: list[list[str]] = []
    for n, canon in names.items():
        if canon in ("d2t", "t2d"):
            continue
        new = _out_name(canon, n_layers, layout)
        tensors.append(copy_or_cast(ck, n, new, float_dtype(ck.tensors[n].dtype, out_dtype), report))
        if new != n:
            renamed.append([n, new])
    refuse_shared_names(((t.source.ref.tensor, t.name) for t in tensors), str(ck.source))  # type: ignore[union-attr]
    report.renamed = renamed
    d2t = _d2t(ck, names, cfg, layout, report)
    if d2t is None:  # a full draft vocab: TensorRT-LLM's class holds no d2t (the table's d2t_when)
        return without_d2t(ck, names, tensors, resolve("trtllm").spec, report)
    return [*tensors, d2t]


def _d2t(
    ck: Checkpoint, names: dict[str, str], cfg: dict[str, Any], layout: dict[str, Any], report: ExportReport
) -> PlannedTensor | None:
    """d2t as TensorRT-LLM holds it: offsets (target id = d2t[draft] + draft) in the table's dtype, only
    for a reduced draft vocab; built from t2d when the source has no d2t."""
    import numpy as np

    v, vd = cfg.get("vocab_size"), cfg.get("draft_vocab_size")
    has = {canon: n for n, canon in names.items() if canon in ("d2t", "t2d")}
    if vd == v:
        if "t2d" in has:
            report.dropped.append([has["t2d"], "the draft vocab is the full vocab: TensorRT-LLM's class holds no map"])
        return None
    if not has:
        raise ConfigError(
            f"{ck.source}: a draft vocab of {vd} of {v} tokens but no d2t or t2d: TensorRT-LLM would map draft "
            "ids through an uninitialized d2t",
            hint="add the drafter's vocabulary mapping (d2t) to its weights",
        )
    mapping = VocabMapping.from_checkpoint(ck)
    assert mapping is not None
    dt = layout["d2t_dtype"]
    offsets = mapping.d2t
    if int(np.abs(offsets).max(initial=0)) > np.iinfo(numpy_dtype(dt)).max:
        raise ConfigError(f"{ck.source}: d2t offsets do not fit {dt}")
    if "d2t" in has:
        if ck.tensors[has["d2t"]].dtype != dt:
            report.cast.append(f"{has['d2t']}: {ck.tensors[has['d2t']].dtype} -> {dt}")
    else:
        report.built.append(f"d2t: built from t2d, as {dt}")
    if "t2d" in has and "t2d" in layout["no_param"]:
        report.dropped.append([has["t2d"], "TensorRT-LLM's class has no parameter for it: never read"])
    return PlannedTensor("d2t", dt, (len(offsets),), Data(offsets.astype(numpy_dtype(dt))))


def _fragment(out: str | Path, captured: list[int] | None, bounds: list[int] | None, layout: dict[str, Any]) -> bytes:
    """The serving-config fragment, YAML: ``speculative_config`` as TensorRT-LLM's LLM API options read it."""
    f = layout["fragment"]
    key, value = f["decoding_type"]
    lines = [
        "# TensorRT-LLM (PyTorch backend) serving-config fragment, written by ckpttools export from TensorRT-LLM's",
        f"# source (not a run). Merge {f['key']} into the LLM API options file the server reads.",
    ]
    if captured is not None:
        lines.append(f"# {f['layers']}: the outputs of target layers {captured}, the inputs of layers {bounds}")
    lines += [
        f"{f['key']}:",
        f"  {key}: {value}",
        f"  {f['max_draft_len']}: {MAX_DRAFT_LEN}",
        f"  {f['model']}: " + _yaml_str(os.path.abspath(out)),
    ]
    if captured is not None:
        lines.append(f"  {f['layers']}: [{', '.join(str(i) for i in captured)}]")
    return ("\n".join(lines) + "\n").encode()


def _yaml_str(s: str) -> str:
    """A YAML double-quoted scalar (JSON's string escapes are YAML's)."""
    return json.dumps(s)


def _fragment_notes(captured: list[int] | None, bounds: list[int] | None, layout: dict[str, Any]) -> list[str]:
    f = layout["fragment"]
    out = [f"{FRAGMENT_NAME}: {f['max_draft_len']} {MAX_DRAFT_LEN} is a serving choice; change it there"]
    if captured is None:
        out.append(
            f"{FRAGMENT_NAME}: no {f['layers']} (no aux layer ids and no target): TensorRT-LLM captures its default, "
            "the outputs of layers (1, L//2-1, L-4), the inputs of [2, L//2, L-3]"
        )
    else:
        out.append(
            f"{FRAGMENT_NAME}: {f['layers']} {captured} (TensorRT-LLM captures the output of layer id: the inputs "
            f"of layers {bounds})"
        )
    return out


def _sides(ck: Checkpoint, fragment: bytes, layout: dict[str, Any]) -> list[SideFile]:
    """The source's side files (one named like the fragment is written anew), then the fragment."""
    kept = [s if s.name != FRAGMENT_NAME else SideFile(s.name, s.path, "written anew") for s in source_side_files(ck)]
    made = f"TensorRT-LLM's serving-config fragment: {layout['fragment']['key']}"
    return [*kept, SideFile(FRAGMENT_NAME, "", data=fragment, made=made)]


#: validate's checks that hold whatever engine loads the drafter (config fields against each other and
#: the weights, shapes, the vocabulary map, the target's sizes); the others are SGLang's or vLLM's reading
NEUTRAL_CHECKS = (
    "config.schema",
    "config.type",
    "config.hidden_act",
    "config.layers_present",
    "config.num_aux_hidden_states",
    "tensors.shape",
    "mapping.",
    "target.hidden_size",
    "target.vocab_size",
    "target.schema",
    "target.type",
    "target.rope",
)


def _check(
    dest: Path,
    release: EngineRelease,
    layout: dict[str, Any],
    captured: list[int] | None,
    fields: dict[str, Any],
    target: Any = None,
) -> Check:
    """What the release builds from the written tree, before it is moved into place, and validate's
    engine-neutral checks (:data:`NEUTRAL_CHECKS`, against the target when given): an error (a tensor
    dropped, a parameter left at init, fc sized for other aux states, a shape or a map the config
    contradicts) leaves nothing at ``dest``."""
    from ckpttools.ops.validate import Finding, ValidationReport, add_load_plan, validate

    def run(tree: Path) -> dict[str, Any]:
        with open_checkpoint(tree) as written:
            written.source = str(dest)
            rep = ValidationReport(str(dest), None, [f"the load plan of {release.spec}"])
            rep.engine_release, rep.engine_release_from = release.spec, "the newest known release"
            add_load_plan(rep, written, release)
            bad = _fc_mismatch(written, captured, layout)
            neutral = validate(written, target).findings
        rep.findings[:0] = [f for f in neutral if f.severity == "error" and f.id.startswith(NEUTRAL_CHECKS)]
        if bad:
            rep.findings.insert(0, Finding("trtllm.capture_count", "error", "fc.weight", bad, None))
        if not rep.ok:
            raise ExportRejected(
                f"the checks found {len(rep.errors)} error(s) in the export "
                f"({', '.join(f.id for f in rep.errors)}); nothing was written to {dest}",
                ExportReport(**{**fields, "validation": rep.to_dict()}),
            )
        return rep.to_dict()

    against = f", against the target {target}" if target is not None else ""
    return Check(
        f"the load plan of {release.spec} (read from its source) and validate's engine-neutral checks{against}: "
        "any error leaves nothing at the output",
        run,
    )


def _fc_mismatch(ck: Checkpoint, captured: list[int] | None, layout: dict[str, Any]) -> str | None:
    """fc's input width against the aux states the fragment captures (TensorRT-LLM sizes fc from them)."""
    fc = ck.tensors.get("fc.weight")
    cfg = ck.config or {}
    hidden = cfg.get("target_hidden_size") or cfg.get("hidden_size")
    if fc is None or len(fc.shape) != 2 or not isinstance(hidden, int) or hidden <= 0:
        return None
    n = len(set(captured)) if captured is not None else 3
    if n == 1 and layout["fc_only_for_several_captured"]:
        return "the fragment captures one layer, for which TensorRT-LLM builds no fc: the drafter's fc would be skipped"
    if fc.shape[1] == n * hidden:
        return None
    return (
        f"fc takes {fc.shape[1] // hidden} aux states ({fc.shape[1]} inputs) but the fragment captures {n}: "
        "TensorRT-LLM sizes fc from the captured layers"
    )
