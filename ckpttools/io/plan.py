"""What a writing operation will write, as a value, and the one executor that writes it.

Every command that writes a checkpoint or a mapping file (remap, export, ``validate --fix``,
``vocab build``, and the demo's tiny models) first builds a :class:`WritePlan`: the output's
tensors in order, each with its dtype, shape and source; the config; the side files kept
and skipped, with why; the manifest; and an optional check to run on the written tree
before it is renamed into place. Building a plan reads headers and the small tensors it
must decide on, and says in :attr:`WritePlan.reads` when it had to read more.

:func:`execute` is the only code that writes one. It streams with bounded memory
(kernel copies where the OS allows), writes into a temporary named for its owner, and
renames it into place atomically (:mod:`ckpttools.io.writer`, :mod:`ckpttools.io.fsutil`).
``--dry-run`` prints :meth:`WritePlan.describe` instead.

The value itself lives in :mod:`ckpttools.io.write_plan` (re-exported here, the names every
caller imports from this module); the check before a byte is written, in
:mod:`ckpttools.io.preflight`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckpttools.errors import CheckpointFormatError, OutputExistsError
from ckpttools.io.fsutil import clean_stale_temporaries, kill_point, open_regular, rename_noreplace, temp_name
from ckpttools.io.guard import check_output, run_inputs
from ckpttools.io.manifest import MANIFEST_NAME, BackgroundDigests, file_digest, make_manifest
from ckpttools.io.preflight import preflight
from ckpttools.io.write_plan import (
    PLAN_SCHEMA_VERSION,
    Cast,
    Check,
    Copy,
    Data,
    Gather,
    Hole,
    ManifestPlan,
    PlannedTensor,
    SideFile,
    Source,
    TensorRef,
    WritePlan,
    side_files,
)

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
    "Written",
    "execute",
    "side_files",
    "PLAN_SCHEMA_VERSION",
]

_CHUNK_BYTES = 64 << 20
Progress = Callable[[int, int, str], None]


@dataclass
class Written:
    """What :func:`execute` wrote: the output, its tensor bytes, and the check's result."""

    output: Path
    bytes_written: int
    check_result: Any = None


def execute(
    plan: WritePlan,
    out: str | Path | None = None,
    *,
    force: bool = False,
    fsync: bool = False,
    progress: Progress | None = None,
    in_place: bool = False,
    backup: Path | None = None,
) -> Written:
    """Write ``plan`` to ``out`` (default: the plan's output), atomically.

    Args:
        force: replace an existing output (in one rename-exchange where the OS has it).
        fsync: flush every file before the rename (survives power loss).
        progress: called as ``progress(bytes_done, bytes_total, tensor_name)``.
        in_place: replace ``out``, a checkpoint that is also the input, keeping the
            original at ``backup`` (``validate --fix --in-place``).

    Raises:
        what :func:`ckpttools.io.preflight.preflight` raises (it runs first: an existing OUT,
        an output aimed at an input, a parent that cannot be written, too little space), and
        the check's error.
    """
    dest = preflight(plan, out, force=force, in_place=in_place)
    if plan.layout == "file":
        for c in plan.during:  # a small file: nothing to check beside
            c()
        return _execute_file(plan, dest, force)
    return _execute_directory(plan, dest, force, fsync, progress, in_place, backup)


def _execute_directory(
    plan: WritePlan,
    dest: Path,
    force: bool,
    fsync: bool,
    progress: Progress | None,
    in_place: bool,
    backup: Path | None,
) -> Written:
    from ckpttools.io.writer import CheckpointWriter, TensorSpec

    specs = [TensorSpec(t.name, t.dtype, t.shape) for t in plan.tensors]
    by_name = {s.name: s for s in specs}
    shards = [[by_name[n] for n in group] for group in plan.shards] if plan.shards is not None else None
    hashed = [p for ps in (plan.manifest.sources.values() if plan.manifest else ()) for p in ps]
    # the digests read at their own pace beside the kernel copy, through their own memory maps: paced
    # to trail the copy (BackgroundDigests' follow), the Kimi-K2-shaped export (3.66 GB) took 4.57 s
    # against 3.79 s unpaced, median of 8 runs each after `sync`, 2026-12-02 (benchmarks/bench_export.py)
    hashes = BackgroundDigests([p for p in hashed if str(p) not in plan.manifest.unhashed]) if plan.manifest else None
    # beside the copy, on one thread: the plan's checks, then what the manifest (the tool's version:
    # importlib.metadata) and the check import after the copy
    warm = ("ckpttools.io.version",) * (plan.manifest is not None) + (plan.check.warm if plan.check else ())
    during = _Beside([*plan.during, *_imports(warm)], "ckpt-beside-copy", hashes)
    result = None
    try:
        with CheckpointWriter(
            dest,
            specs,
            max_shard_size=plan.max_shard_size,
            plan=shards,
            force=force,
            fsync=fsync,
            inputs=plan.inputs,
            in_place=in_place,
            backup=backup,
        ) as w:
            runs = _copy_runs(plan.tensors)
            w.page_offsets.update(_page_offsets(plan.tensors, w.plan, runs))
            if 0 in runs:  # the threads start as the first kernel copy does
                w.before_copy = during.start
            else:  # the interpreter writes: they start now (it leaves the interpreter free at times)
                during.start()
            _write_tensors(w, plan, runs, progress)
            if hashes is not None:
                hashes.release()
            during.result()
            _add_files(w, plan)
            if plan.manifest is not None:
                assert hashes is not None
                w.add_json(MANIFEST_NAME, _manifest(plan.manifest, hashes))
            if plan.check is not None:
                result = plan.check.run(w.seal())
    finally:
        during.join()
        if hashes is not None:
            hashes.close()
    return Written(dest, plan.bytes_total, result)


def _add_files(w: Any, plan: WritePlan) -> None:
    """The config and the side files, after the tensors."""
    if plan.config is not None:
        w.add_json("config.json", plan.config)
    for s in plan.side_files:
        if s.data is not None:
            w.add_bytes(s.name, s.data)
        elif s.skipped is None:
            w.add_file(s.name, s.path)


class _Beside:
    """Work on a thread of its own beside the tensor copy: the kernel copy and the hashing release
    the interpreter, so the work costs no wall time there. :meth:`start` starts it once, and the
    ``digests`` with it (the writer's ``before_copy`` does, as the first kernel copy begins: started
    earlier, the threads take the interpreter from the work before the copy); :meth:`result`
    starts it if nothing did, waits, and raises the first task's error."""

    def __init__(self, tasks: list[Callable[[], None]], name: str, digests: BackgroundDigests | None = None) -> None:
        self._tasks, self._name, self._digests = tasks, name, digests
        self._thread: Any = None
        self._error: BaseException | None = None

    def start(self) -> None:
        if self._digests is not None:
            self._digests.start()
        if self._thread is not None or not self._tasks:
            return
        import contextvars
        import threading

        def run() -> None:
            try:
                for t in self._tasks:
                    t()
            except BaseException as e:  # noqa: BLE001 - raised again on the writing thread
                self._error = e

        ctx = contextvars.copy_context()  # the caller's context (the CLI's note handler)
        self._thread = threading.Thread(target=ctx.run, args=(run,), name=self._name, daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self) -> None:
        self.start()
        self.join()
        if self._error is not None:
            raise self._error


def _imports(modules: tuple[str, ...]) -> list[Callable[[], None]]:
    """Tasks that import ``modules``, for what runs after the copy: imported beside the copy, they
    cost no import time there. A module that fails here is left for the import that needs it to
    raise."""

    def load(m: str) -> None:
        import importlib

        try:
            importlib.import_module(m)
        except Exception:  # noqa: BLE001 - the import that needs it raises it again, where it belongs
            pass

    return [partial(load, m) for m in modules]


def _manifest(m: ManifestPlan, hashes: BackgroundDigests) -> dict[str, Any]:
    done: dict[str, Any] = hashes.result()
    for p, why in m.unhashed.items():
        done[p] = {"note": why}
    for paths in m.sources.values():
        for q in paths:
            if str(q) not in done:
                done[str(q)] = file_digest(q)
    return make_manifest(m.operation, m.params, m.sources, hashes=done, extra=m.extra or None)


def _copy_runs(tensors: list[PlannedTensor]) -> dict[int, int]:
    """Where runs of local copies start (index -> tensors in the run): tensors copied unchanged
    from one file whose bytes lie there one after another, in the output's order. A shard whose
    tensors keep their dtype, bytes and order is then one kernel copy of the source's data."""
    runs: dict[int, int] = {}
    i = 0
    while i < len(tensors):
        src = tensors[i].source
        if not (isinstance(src, Copy) and src.ref.hub is None):
            i += 1
            continue
        j, end = i + 1, src.ref.offset + tensors[i].nbytes  # a copy moves the output's byte count
        while j < len(tensors):
            nxt = tensors[j].source
            if not (isinstance(nxt, Copy) and nxt.ref.hub is None and nxt.ref.path == src.ref.path):
                break
            if nxt.ref.offset != end:
                break
            end += tensors[j].nbytes
            j += 1
        runs[i] = j - i
        i = j
    return runs


#: a copy this large has its output placed at its source's offset within a page
_PAGE_ALIGN_MIN = 64 << 20


def _page_offsets(tensors: list[PlannedTensor], shards: list[list[Any]], runs: dict[int, int]) -> dict[int, int]:
    """For each output shard whose largest run of copied bytes is at least 64 MiB: where its data
    section must start within a page for that run to land at its source's offset within a page
    (a page-congruent kernel copy). Shards of small or computed tensors keep the 8-byte padding."""
    from ckpttools.io.writer import PAGE

    shard_of = {s.name: i for i, shard in enumerate(shards) for s in shard}
    at: dict[str, int] = {}  # each tensor's offset in its shard's data section
    for shard in shards:
        pos = 0
        for s in shard:
            at[s.name] = pos
            pos += s.nbytes
    best: dict[int, tuple[int, int]] = {}  # shard -> (bytes of its largest run, wanted page offset)
    for i, n in runs.items():
        run = tensors[i : i + n]
        first = run[0].source
        assert isinstance(first, Copy)
        k = shard_of[run[0].name]
        size = sum(t.nbytes for t in run if shard_of[t.name] == k)
        want = (first.ref.offset - at[run[0].name]) % PAGE
        if size >= _PAGE_ALIGN_MIN and want % 8 == 0 and size > best.get(k, (0, 0))[0]:
            best[k] = (size, want)
    return {k: want for k, (_, want) in best.items()}


def _write_tensors(w: Any, plan: WritePlan, runs: dict[int, int], progress: Progress | None) -> None:
    """The plan's tensors, in order; ``runs``: :func:`_copy_runs` of them (each run one kernel copy)."""
    total, done = plan.bytes_total, 0
    skip = 0
    for i, t in enumerate(plan.tensors):
        src = t.source
        if skip:  # copied with the run it belongs to
            skip -= 1
        elif i in runs:
            run = plan.tensors[i : i + runs[i]]
            assert isinstance(src, Copy)
            w.copy_run([r.name for r in run], src.ref.path, src.ref.offset)
            skip = len(run) - 1
        elif isinstance(src, (Copy, Cast)):
            w.write_chunks(t.name, _cast_chunks(src.ref, t.dtype))
        elif isinstance(src, Gather):
            if all(r.dtype == t.dtype and r.hub is None for r in src.refs):
                w.write_segments(t.name, _segments(src, t))
            else:
                w.write_chunks(t.name, _gathered(src, t))
        elif isinstance(src, Data):
            w.write(t.name, src.array)
        else:
            w.skip(t.name)
        done += t.nbytes
        if progress:
            progress(done, total, t.name)


def _execute_file(plan: WritePlan, out: Path, force: bool) -> Written:
    """One .safetensors file (a mapping): a temporary beside ``out``, then one rename."""
    from ckpttools.io.writer import SafetensorsFileWriter, TensorSpec

    check_output(out, list(plan.inputs))
    out.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(out, [*plan.inputs, *run_inputs()])
    if os.path.lexists(out) and not force:
        raise OutputExistsError(f"{out} already exists", path=out)
    tmp = Path(temp_name(out, "write"))
    try:
        with SafetensorsFileWriter(
            tmp, [TensorSpec(t.name, t.dtype, t.shape) for t in plan.tensors], plan.metadata
        ) as f:
            for i, t in enumerate(plan.tensors):
                assert isinstance(t.source, Data), "a file layout holds arrays computed while planning"
                f.write(t.name, t.source.array)
                if i == 0:
                    kill_point("mid-write")
        kill_point("before-rename")
        if force:
            os.replace(tmp, out)
        else:
            rename_noreplace(tmp, out)
        kill_point("after-rename")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Written(out, plan.bytes_total)


# ----------------------------------------------------------------------------- reading sources
def _np_dtype(st: str) -> np.dtype:
    from ckpttools.io.checkpoint import numpy_dtype

    return numpy_dtype(st)


def _convert(a: np.ndarray, out_dtype: str) -> np.ndarray:
    import numpy as np

    to = _np_dtype(out_dtype)
    if a.dtype == to:
        return a
    if out_dtype in ("I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64", "BOOL"):
        return a.astype(to)
    return a.astype(np.float32).astype(to)


class _Reader:
    """Positioned reads of the files a plan names: local files by ``os.pread``, Hub shards by
    range request (several ranges in flight)."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def read_many(self, ref: TensorRef, reads: list[tuple[int, int]]) -> list[bytes]:
        """``(n, offset)`` byte ranges of ``ref``'s file, each checked for its length."""
        if ref.hub is not None:
            got = ref.hub.fetch_many(ref.shard, [(off, off + n) for n, off in reads])
        else:
            fd = self._fds.get(ref.path)
            if fd is None:
                fd = self._fds[ref.path] = open_regular(ref.path)  # a FIFO or device is refused, never read
            got = [os.pread(fd, n, off) for n, off in reads]
        for (n, _), buf in zip(reads, got):
            if len(buf) != n:
                raise CheckpointFormatError(
                    f"{ref.path}: short read in {ref.tensor!r} (the file shrank?)", tensor=ref.tensor
                )
        return got

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _cast_chunks(ref: TensorRef, out_dtype: str) -> Iterator[np.ndarray]:
    """``ref`` in chunks of whole rows, converted."""
    import numpy as np

    src = _np_dtype(ref.dtype)
    reader = _Reader()
    try:
        if not ref.row_bytes:
            yield _convert(np.zeros(ref.shape, src), out_dtype)
            return
        step = max(1, (32 << 20) // ref.row_bytes)
        for r0 in range(0, ref.rows, step):
            r1 = min(ref.rows, r0 + step)
            (buf,) = reader.read_many(ref, [((r1 - r0) * ref.row_bytes, ref.offset + r0 * ref.row_bytes)])
            yield _convert(np.frombuffer(buf, dtype=src), out_dtype)
    finally:
        reader.close()


def _runs(g: Gather) -> Iterator[tuple[int, int]]:
    """Runs [a, b) of output rows from one part with consecutive source rows (or all fill)."""
    import numpy as np

    n = len(g.part)
    if not n:
        return
    p, r = g.part, g.rows
    brk = np.flatnonzero((p[1:] != p[:-1]) | ((p[1:] >= 0) & (r[1:] != r[:-1] + 1))) + 1
    starts = np.concatenate([[0], brk]).tolist()
    ends = np.concatenate([brk, [n]]).tolist()
    yield from zip(starts, ends)


def _segments(g: Gather, t: PlannedTensor) -> Iterator[Any]:
    """Same dtype in and out: each run of consecutive source rows is one kernel copy, fills come from memory."""
    import numpy as np

    row_bytes = t.nbytes // t.shape[0] if t.shape and t.shape[0] else 0
    fill = np.frombuffer(g.fill, dtype=np.uint8)
    max_fill_rows = max(1, _CHUNK_BYTES // max(1, row_bytes))
    for a, b in _runs(g):
        k = int(g.part[a])
        if k >= 0:
            ref = g.refs[k]
            yield ("copy", ref.path, ref.offset + int(g.rows[a]) * ref.row_bytes, (b - a) * row_bytes)
        else:
            for c in range(a, b, max_fill_rows):
                yield np.broadcast_to(fill, (min(b, c + max_fill_rows) - c, row_bytes))


def _gathered(g: Gather, t: PlannedTensor) -> Iterator[np.ndarray]:
    """Rows in chunks of about 64 MiB, each part's rows read with coalesced positioned reads and cast."""
    import numpy as np

    row_bytes = t.nbytes // t.shape[0] if t.shape and t.shape[0] else 0
    fill = np.frombuffer(g.fill, dtype=np.uint8)
    reader = _Reader()
    try:
        step = max(1, _CHUNK_BYTES // max(1, row_bytes))
        for j0 in range(0, len(g.part), step):
            part, rows = g.part[j0 : j0 + step], g.rows[j0 : j0 + step]
            chunk = np.empty((len(part), row_bytes), dtype=np.uint8)
            chunk[part < 0] = fill
            for k, ref in enumerate(g.refs):
                sel = part == k
                if sel.any():
                    got = _read_rows(reader, ref, rows[sel])
                    chunk[sel] = _convert(got, t.dtype).reshape(int(sel.sum()), -1).view(np.uint8)
            yield chunk
    finally:
        reader.close()


def _read_rows(reader: _Reader, ref: TensorRef, rows: np.ndarray) -> np.ndarray:
    """Rows of ``ref`` in the given order (elements of its dtype), runs of rows read at once."""
    import numpy as np

    if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= ref.rows):
        bad = int(rows[(rows < 0) | (rows >= ref.rows)][0])
        raise CheckpointFormatError(
            f"{ref.path}: row {bad} of {ref.tensor!r} does not exist (it has {ref.rows} rows)", tensor=ref.tensor
        )
    order = np.argsort(rows, kind="stable")
    srt = rows[order]
    flat = np.empty((len(rows), ref.row_bytes), dtype=np.uint8)
    brk = np.flatnonzero(srt[1:] != srt[:-1] + 1) + 1
    runs = list(zip(np.concatenate([[0], brk]).tolist(), np.concatenate([brk, [len(srt)]]).tolist()))
    reads = [((j - i) * ref.row_bytes, ref.offset + int(srt[i]) * ref.row_bytes) for i, j in runs]
    for (i, j), buf in zip(runs, reader.read_many(ref, reads)):
        flat[order[i:j]] = np.frombuffer(buf, dtype=np.uint8).reshape(j - i, ref.row_bytes)
    return flat.view(_np_dtype(ref.dtype))
