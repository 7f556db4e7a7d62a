"""A write plan, the value: what one writing operation will write (its tensors in order, each
with its dtype, shape and source; the config; the side files kept and skipped; the manifest; the
check), and the plan as JSON-ready data (:func:`describe`, ``--dry-run --json``).

Plain data: nothing here opens an output or writes a byte. :mod:`ckpttools.io.preflight` checks
a plan against the file system and :func:`ckpttools.io.plan.execute` writes it;
:mod:`ckpttools.io.plan` re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpttools.io.safetensors_header import DTYPE_SIZES

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "TensorRef",
    "Copy",
    "Cast",
    "Gather",
    "Data",
    "Hole",
    "Source",
    "PlannedTensor",
    "SideFile",
    "ManifestPlan",
    "Check",
    "WritePlan",
    "side_files",
    "describe",
    "describe_source",
    "PLAN_SCHEMA_VERSION",
]

PLAN_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class TensorRef:
    """Where a tensor's bytes lie, as its checkpoint's header says: a local file, or (``hub`` set)
    a shard of a Hub commit read by range request (``path`` then reads ``hub:REPO@COMMIT/SHARD``)."""

    tensor: str
    path: str
    offset: int
    dtype: str
    shape: tuple[int, ...]
    hub: Any = field(default=None, compare=False, repr=False)  # a HubRepo (its commit's file list)
    shard: str = ""

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * DTYPE_SIZES[self.dtype]

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1

    @property
    def row_bytes(self) -> int:
        return self.nbytes // self.rows if self.rows else 0

    @classmethod
    def of(cls, ck: Any, name: str) -> TensorRef:
        """The reference to tensor ``name`` of an open :class:`~ckpttools.io.checkpoint.Checkpoint`."""
        from ckpttools.io.checkpoint import RemoteCheckpoint

        t = ck.tensors[name]
        if isinstance(ck, RemoteCheckpoint):
            where = f"hub:{ck.hub.repo_id}@{ck.hub.commit}/{t.shard}"
            return cls(name, where, t.start, t.dtype, tuple(t.shape), ck.hub, t.shard)
        return cls(name, str(ck.shard_paths[t.shard]), t.start, t.dtype, tuple(t.shape))


@dataclass(frozen=True)
class Copy:
    """The bytes of one source tensor, unchanged (a kernel copy where the OS allows)."""

    ref: TensorRef
    kind = "copy"


@dataclass(frozen=True)
class Cast:
    """One source tensor, converted to the output dtype (floats through float32), in chunks of rows."""

    ref: TensorRef
    kind = "cast"


@dataclass(frozen=True, eq=False)
class Gather:
    """Rows gathered from source tensors, in output order: row i is row ``rows[i]`` of
    ``refs[part[i]]``, or ``fill`` (one output row's bytes) where ``part[i]`` is -1.
    Runs of consecutive rows move as kernel copies when their dtype is the output's;
    other rows are cast."""

    refs: tuple[TensorRef, ...]
    part: np.ndarray
    rows: np.ndarray
    fill: bytes
    kind = "gather"


@dataclass(frozen=True, eq=False)
class Data:
    """An array computed while planning (d2t, t2d, a small tensor), written as it is."""

    array: np.ndarray
    kind = "memory"


@dataclass(frozen=True)
class Hole:
    """Bytes left as a hole of a sparse file (they read as zeros): the demo's huge checkpoints."""

    kind = "hole"


Source = Copy | Cast | Gather | Data | Hole


@dataclass(frozen=True)
class PlannedTensor:
    """One output tensor: its name, dtype, shape, and where its bytes come from."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: Source

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * DTYPE_SIZES[self.dtype]


@dataclass(frozen=True)
class SideFile:
    """A file beside the source's weights: copied (``skipped`` None) or not, and why; or, with
    ``data``, a file the operation makes while planning (``made`` says what it is), written as it is."""

    name: str
    path: str
    skipped: str | None = None
    data: bytes | None = field(default=None, repr=False)
    made: str | None = None
    size: int | None = None  # known without a local file (a Hub repo's listing), for the free-space check


@dataclass
class ManifestPlan:
    """The manifest's content; the sources are hashed while the tensors are written."""

    operation: str
    params: dict[str, Any]
    sources: dict[str, list[Path]]
    extra: dict[str, Any] = field(default_factory=dict)
    unhashed: dict[str, str] = field(default_factory=dict)  # path -> why it is recorded unhashed


@dataclass(frozen=True)
class Check:
    """A check run on the written tree before it is renamed into place; raising aborts the write.

    ``warm`` names modules the check imports: they are imported on another thread while the
    tensors are copied (a kernel copy leaves the interpreter free), not after it."""

    what: str
    run: Callable[[Path], Any]
    warm: tuple[str, ...] = ()


@dataclass
class WritePlan:
    """Everything one operation will write (plain data; nothing is open, nothing written).

    ``layout`` is ``"directory"`` (a checkpoint: shards, index, config, side files,
    manifest) or ``"file"`` (one .safetensors file, a mapping)."""

    operation: str
    output: str
    tensors: list[PlannedTensor]
    layout: str = "directory"
    config: dict[str, Any] | None = None
    config_before: dict[str, Any] | None = None
    side_files: list[SideFile] = field(default_factory=list)
    manifest: ManifestPlan | None = None
    check: Check | None = None
    inputs: list[Any] = field(default_factory=list)
    max_shard_size: int | None = None
    shards: list[list[str]] | None = None  # an explicit grouping (fix keeps the source's)
    metadata: dict[str, str] | None = None  # a file layout's safetensors __metadata__
    reads: list[str] = field(default_factory=list)  # what planning read beyond headers and d2t/t2d
    report: dict[str, Any] = field(default_factory=dict)  # the operation's own figures, for its report
    # checks run on a thread while the tensors are written (the kernel copy leaves the interpreter
    # free): each reads only its inputs, and one that raises aborts the write before the seal
    during: list[Callable[[], None]] = field(default_factory=list, repr=False)

    @property
    def bytes_total(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def bytes_by_kind(self) -> dict[str, int]:
        out = {k: 0 for k in ("copy", "gather", "cast", "memory", "hole")}
        for t in self.tensors:
            out[t.source.kind] += t.nbytes
        return out

    def config_diff(self) -> list[dict[str, Any]]:
        """Each top-level config key that changes: before (None: absent) and after (None: removed)."""
        if self.config is None:
            return []
        before, after = self.config_before or {}, self.config
        keys = [*before, *(k for k in after if k not in before)]
        return [
            {"key": k, "before": before.get(k), "after": after.get(k)}
            for k in keys
            if before.get(k, _ABSENT) != after.get(k, _ABSENT)
        ]

    def describe(self) -> dict[str, Any]:
        """The plan as JSON-ready data (``schemas/write-plan.schema.json``)."""
        return describe(self)


_ABSENT = object()


SOURCE_WEIGHTS = "the source's weights (read as tensors)"


def side_files(ck: Any) -> list[SideFile]:
    """Every entry beside an open checkpoint's weights, kept or skipped by the one rule
    (:func:`ckpttools.io.writer.side_file_verdict`); its own shards are named as such. A Hub
    repo read remotely (``--dry-run``) is judged from its file list: nothing is downloaded."""
    from ckpttools.io.checkpoint import RemoteCheckpoint
    from ckpttools.io.writer import side_file_verdict

    if isinstance(ck, RemoteCheckpoint):
        return _remote_side_files(ck)
    root = Path(ck.root)
    shards = {Path(p).name for p in ck.shard_paths.values()}
    return [
        SideFile(p.name, str(p), SOURCE_WEIGHTS if p.name in shards else side_file_verdict(p, root))
        for p in sorted(root.iterdir())
    ]


def _remote_side_files(ck: Any) -> list[SideFile]:
    """What the real run's snapshot of a Hub commit will hold beside its weights (the files
    :data:`ckpttools.io.hub.SNAPSHOT_PATTERNS` fetch), judged from the commit's file list by the
    same rule as a local directory (the Hub holds regular files, no links); a folder is not a
    regular file there either."""
    from ckpttools.io.hub import in_snapshot
    from ckpttools.io.writer import side_file_name_verdict

    shards = {Path(s).name for s in ck.shard_paths}
    tops: dict[str, Any] = {}
    for path, f in ck.hub.files.items():
        if not in_snapshot(path):
            continue
        top, _, rest = path.partition("/")
        tops[top] = None if rest else f
    out = []
    for name in sorted(tops):
        f = tops[name]
        where = f"hub:{ck.hub.repo_id}@{ck.hub.commit}/{name}"
        if name in shards:
            why: str | None = SOURCE_WEIGHTS
        else:
            why = side_file_name_verdict(name) or (None if f is not None else "not a regular file")
        out.append(SideFile(name, where, why, size=f.size if f is not None else None))
    return out


def describe_source(src: Source, t: PlannedTensor) -> dict[str, Any]:
    """Where one output tensor's bytes come from, in words a user can check against the source."""
    import numpy as np

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
    """``plan`` as JSON-ready data (``--dry-run --json``; ``schemas/write-plan.schema.json``)."""
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
