"""``ckpt inspect``: what a checkpoint is, from its config and headers."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.engines.config_rules import context_length
from ckpttools.formats.config import essentials
from ckpttools.engines.flavor import detect_flavor
from ckpttools.io.checkpoint import Checkpoint, open_checkpoint

__all__ = ["InspectReport", "inspect", "INSPECT_SCHEMA_VERSION"]

INSPECT_SCHEMA_VERSION = 1


@dataclass
class InspectReport:
    """Plain data for ``ckpt inspect``; :meth:`to_dict` gives the documented JSON keys."""

    source: str
    root: str
    kind: str
    kind_description: str
    evidence: list[str]
    config: dict[str, Any] | None
    context_length: int | None
    files: list[dict[str, Any]]
    num_tensors: int
    total_params: int
    total_bytes: int
    by_dtype: dict[str, dict[str, int]]
    metadata: dict[str, str]
    vocab_mapping: dict[str, Any] | None
    tensors: list[dict[str, Any]] | None = None
    notes: list[str] = field(default_factory=list)
    #: for a Hub repo: the repo, the revision asked for, the commit read, and what was transferred
    hub: dict[str, Any] | None = None
    #: the source was a config file alone (config.json, X.config.json): described, no weights read
    config_file: bool = False
    #: the quantization scheme, its scales and sizes (formats.quant.QuantScheme.to_dict), when quantized
    quantization: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema_version": INSPECT_SCHEMA_VERSION,
            "source": self.source,
            "root": self.root,
            "kind": self.kind,
            "kind_description": self.kind_description,
            "evidence": self.evidence,
            "config": self.config,
            "context_length": self.context_length,
            "files": self.files,
            "num_tensors": self.num_tensors,
            "total_params": self.total_params,
            "total_bytes": self.total_bytes,
            "by_dtype": self.by_dtype,
            "metadata": self.metadata,
            "vocab_mapping": self.vocab_mapping,
            "notes": self.notes,
        }
        if self.tensors is not None:
            d["tensors"] = self.tensors
        if self.hub is not None:
            d["hub"] = self.hub
        if self.config_file:
            d["config_file"] = True
        if self.quantization is not None:
            d["quantization"] = self.quantization
        return d


def _by_dtype(ck: Checkpoint) -> dict[str, dict[str, int]]:
    """Tensors, parameters and bytes per dtype; sums in C per shard and dtype (from the
    checked headers: no per-tensor object is made)."""
    out: dict[str, dict[str, int]] = {}
    for h in ck.headers.values():
        for dt, (n, params, nbytes) in h.dtype_totals().items():
            d = out.setdefault(dt, {"tensors": 0, "params": 0, "bytes": 0})
            d["tensors"] += n
            d["params"] += params
            d["bytes"] += nbytes
    return out


def inspect(
    source: str | Path | Checkpoint,
    *,
    tensors: bool = True,
    filter: str | None = None,
    revision: str | None = None,
) -> InspectReport:
    """Describe a checkpoint from its config.json and safetensors headers.

    Tensor data is read only for the vocabulary mapping (d2t/t2d, a few hundred KB).

    Args:
        source: a path, Hub repo id, or an open :class:`Checkpoint`.
        tensors: include the per-tensor table.
        filter: a glob on tensor names for the table (e.g. ``'layers.0.*'``).

    Returns:
        an :class:`InspectReport`.

    Example:
        >>> inspect("./drafter").kind  # doctest: +SKIP
        'sglang'
    """
    if isinstance(source, Checkpoint):
        return _inspect(source, tensors, filter)
    if _is_config_file(source):
        return _inspect_config_file(Path(str(source)).expanduser(), tensors)
    with open_checkpoint(source, revision) as ck:
        return _inspect(ck, tensors, filter)


#: keys one of which every model config has (a JSON file with none of them is some other file)
_CONFIG_KEYS = ("architectures", "model_type", "hidden_size", "text_config", "transformer_layer_config")


def _is_config_file(source: str | Path) -> bool:
    """A JSON file that is not a safetensors index: a model config (config.json, X.config.json), or
    some other JSON file, which inspect refuses by name."""
    text = str(source)
    if not text or "\0" in text:
        return False
    p = Path(text).expanduser()
    return p.suffix == ".json" and not p.name.endswith(".index.json") and p.is_file()


def _inspect_config_file(p: Path, tensors: bool) -> InspectReport:
    """A config file on its own: what it describes, its essentials and context; no weights."""
    from ckpttools.errors import ConfigError
    from ckpttools.io.inputs import read_json

    cfg = read_json(p, "config")
    if not isinstance(cfg, dict) or not any(k in cfg for k in _CONFIG_KEYS):
        raise ConfigError(
            f"{p}: a JSON file, but not a model config (no {', '.join(_CONFIG_KEYS[:3])})",
            path=p,
            hint="inspect reads a checkpoint directory, a .safetensors file, an index, or a config.json",
        )
    flavor = detect_flavor(cfg, [])
    ess = essentials(cfg)
    notes = [f"config {where} {why}: ignored" for where, why in ess.invalid.items()]
    notes.append(f"a config file alone: no weights read (inspect {p.parent} for the checkpoint around it)")
    ctx, how = context_length(cfg)
    return InspectReport(
        source=str(p),
        root=str(p.parent),
        kind=flavor.kind,
        kind_description=flavor.description,
        evidence=[e for e in flavor.evidence if "in the weights" not in e] + ["no weights read: a config file"],
        config=ess.to_dict(),
        context_length=ctx,
        files=[],
        num_tensors=0,
        total_params=0,
        total_bytes=0,
        by_dtype={},
        metadata={},
        vocab_mapping=None,
        tensors=[] if tensors else None,
        notes=notes + ([f"context length {ctx}: {how}"] if ctx and "default" in how else []),
        config_file=True,
    )


def _inspect(ck: Checkpoint, tensors: bool, filter: str | None) -> InspectReport:
    flavor = detect_flavor(ck.config, ck.tensor_names)
    ess = essentials(ck.config) if ck.config is not None else None
    by_dtype = _by_dtype(ck)
    files = [
        {"file": name, "bytes": h.file_size, "header_bytes": h.header_len, "tensors": len(h.names)}
        for name, h in ck.headers.items()
    ]
    metadata: dict[str, str] = {}
    for h in ck.headers.values():
        metadata.update(h.metadata)
    notes: list[str] = [f"config {where} {why}: ignored" for where, why in (ess.invalid.items() if ess else ())]
    mapping = _mapping_summary(ck, flavor, ess, notes)
    rows = None
    if tensors:
        rows = [
            {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes, "shard": t.shard}
            for t in ck.tensors.values()
            if filter is None or fnmatch.fnmatchcase(t.name, filter)
        ]
    return InspectReport(
        source=str(ck.source),
        root=str(ck.root),
        kind=flavor.kind,
        kind_description=flavor.description,
        evidence=flavor.evidence,
        config=ess.to_dict() if ess is not None else None,
        context_length=context_length(ck.config)[0],
        files=files,
        num_tensors=ck.num_tensors,
        total_params=sum(d["params"] for d in by_dtype.values()),
        total_bytes=sum(d["bytes"] for d in by_dtype.values()),
        by_dtype=by_dtype,
        metadata=metadata,
        vocab_mapping=mapping,
        tensors=rows,
        notes=notes,
        hub=ck.hub.describe() if ck.hub is not None else None,
        quantization=_quantization(ck),
    )


def _quantization(ck: Checkpoint) -> dict[str, Any] | None:
    """The quantization scheme from the config and headers (None: nothing quantized, no quantization_config)."""
    cfg = ck.config if isinstance(ck.config, dict) else {}
    if (
        "quantization_config" not in cfg
        and not any("F8" in d for h in ck.headers.values() for d in h.dtype_totals())
        and "scale" not in "\n".join(ck.tensor_names)
    ):
        return None  # the common case, read from the headers' columns: no TensorInfo made, no per-tensor pass
    from ckpttools.formats.quant import read_scheme

    s = read_scheme(ck.config, {n: (list(t.shape), t.dtype) for n, t in ck.tensors.items()})
    if s.format is None and not s.quantized and not s.scales and s.config is None:
        return None
    return s.to_dict()


def _mapping_summary(ck: Checkpoint, flavor: Any, ess: Any, notes: list[str]) -> dict[str, Any] | None:
    """The d2t/t2d summary (read from the tensors), or a note when a reduced head has none."""
    if flavor.has_d2t or flavor.has_t2d:
        from ckpttools.errors import MappingError
        from ckpttools.vocab.mapping import VocabMapping

        try:
            m = VocabMapping.from_checkpoint(ck, allow_missing=True)
            return m.summary() if m is not None else None
        except MappingError as e:
            return {"error": str(e)}
    if flavor.is_drafter and ess is not None:
        vd, v = ess.draft_vocab_size, ess.vocab_size
        if isinstance(vd, int) and isinstance(v, int) and vd < v:
            from ckpttools.vocab.mapping import missing_mapping_message

            notes.append(missing_mapping_message(vd, v))
    return None
