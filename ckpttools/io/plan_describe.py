"""A :class:`~ckpttools.io.plan.WritePlan` as JSON-ready data (``--dry-run --json``;
``schemas/write-plan.schema.json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ckpttools.io.plan import PlannedTensor, Source, WritePlan

__all__ = ["describe", "describe_source"]


def describe_source(src: Source, t: PlannedTensor) -> dict[str, Any]:
    """Where one output tensor's bytes come from, in words a user can check against the source."""
    from ckpttools.io.plan import Cast, Copy, Gather

    out: dict[str, Any] = {"kind": src.kind}
    if isinstance(src, (Copy, Cast)):
        out |= {"tensor": src.ref.tensor, "file": src.ref.path, "offset": src.ref.offset}
        if isinstance(src, Cast):
            out["from_dtype"] = src.ref.dtype
    elif isinstance(src, Gather):
        counts: list[int] = np.bincount(src.part[src.part >= 0], minlength=len(src.refs)).tolist()
        out["rows_from"] = [
            {"tensor": r.tensor, "file": r.path, "dtype": r.dtype, "rows": int(c)} for r, c in zip(src.refs, counts)
        ]
        out["rows_filled"] = int(np.count_nonzero(src.part < 0))
        out["cast"] = any(r.dtype != t.dtype for r in src.refs)
    return out


def describe(plan: WritePlan) -> dict[str, Any]:
    from ckpttools.io.plan import PLAN_SCHEMA_VERSION

    tensors = [
        {
            "name": t.name,
            "dtype": t.dtype,
            "shape": list(t.shape),
            "bytes": t.nbytes,
            "source": describe_source(t.source, t),
        }
        for t in plan.tensors
    ]
    m = plan.manifest
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "operation": plan.operation,
        "output": plan.output,
        "layout": plan.layout,
        "written": False,
        "tensors": tensors,
        "bytes": {"total": plan.bytes_total, **plan.bytes_by_kind()},
        "max_shard_size": plan.max_shard_size,
        "config_diff": plan.config_diff(),
        "side_files": [
            {"name": s.name, "kept": s.skipped is None, "why": s.made if s.data is not None else s.skipped}
            for s in plan.side_files
        ],
        "check": plan.check.what if plan.check is not None else None,
        "manifest": None
        if m is None
        else {"operation": m.operation, "sources": {k: [str(p) for p in v] for k, v in m.sources.items()}},
        "reads": list(plan.reads),
    }
