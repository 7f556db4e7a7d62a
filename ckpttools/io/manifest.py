"""The manifest written next to every output: tool version, sources and their hashes,
and the operation with its parameters."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST_NAME", "file_digest", "make_manifest", "BackgroundDigests"]

MANIFEST_NAME = "ckpttools-manifest.json"


#: the step in which a digest follows a kernel copy of its file (ckpttools.io.writer copies in
#: steps of this size when followed): small enough that what the copy just read is still in the
#: CPU's cache when the digest reads it
FOLLOW_CHUNK = 8 << 20
#: how long a digest waits for a followed copy to pass a chunk before reading it anyway (seconds)
_FOLLOW_WAIT = 2.0
#: the step of a digest that is not paced: the most its thread hashes between two looks at
#: whether to stop and hand the rest over (BackgroundDigests.result), and the most of the file it
#: holds mapped at once (the export of benchmarks/bench_export.py peaked at 55 MiB RSS, against
#: 103 MiB with the 64 MiB step before)
DIGEST_CHUNK = 16 << 20
#: the digest thread's nice value: it yields the core to the writing thread (and to the kernel's
#: writeback) whenever they want it. In the Kimi-K2-shaped export (benchmarks/bench_export.py) the
#: writing thread waited 40-70 ms on the run queue with the digest at the default, 15-20 ms with it
#: at 19 (/proc's schedstat, 3 runs each, 2 cores, 2026-12-07); the export's wall time did not
#: change measurably. A digest starved by other work does not hold up the end: once the copy is
#: done, BackgroundDigests.result hashes what is left on the caller's thread, at its priority.
DIGEST_NICE = 19


def file_digest(
    path: str | Path, chunk: int = 64 << 20, *, ready: Callable[[int], None] | None = None
) -> dict[str, str]:
    """Digests of a file: xxh3-128 of its bytes (fast enough to hide behind a copy), plus
    the sha256 the Hugging Face cache names the blob by, when the file is such a blob.

    The file is hashed through a memory map, chunk by chunk, each chunk's pages released
    from this process after use: no copy into user space, and bounded resident memory.
    ``ready(end)``, when given, is called before the bytes up to ``end`` are read and returns
    when they may be (:class:`BackgroundDigests` lets a digest trail the kernel copy of the same
    bytes); it only paces the reads: the digest is of the file's bytes as they are read.
    """
    d = _FileDigest(path)
    d.read(chunk, ready=ready)
    return d.result()


class _FileDigest:
    """One file's digest, read chunk by chunk from :attr:`pos`: :meth:`read` may stop between two
    chunks (``stop``), and a later :meth:`read`, on any thread, goes on from there."""

    def __init__(self, path: str | Path) -> None:
        import xxhash

        self.path = str(path)
        self.pos = 0
        self._h = xxhash.xxh3_128()

    def read(
        self, chunk: int, *, ready: Callable[[int], None] | None = None, stop: Callable[[], bool] | None = None
    ) -> bool:
        """Hash on to the end (True), or until ``stop()`` says so before a chunk (False)."""
        import mmap

        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if self.pos >= size:
                return True
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)
                try:
                    for i in range(self.pos, size, chunk):
                        if stop is not None and stop():
                            return False
                        if ready is not None:
                            ready(min(i + chunk, size))
                        self._h.update(view[i : i + chunk])
                        if hasattr(m, "madvise"):
                            m.madvise(mmap.MADV_DONTNEED, i, min(chunk, size - i))
                        self.pos = min(i + chunk, size)
                finally:
                    view.release()
        return True

    def result(self) -> dict[str, str]:
        out = {"xxh3_128": self._h.hexdigest()}
        real = Path(self.path).resolve()
        if real.parent.name == "blobs" and len(real.name) == 64 and all(c in "0123456789abcdef" for c in real.name):
            out["sha256"] = real.name  # the Hub's LFS object id
        return out


def _lower_this_threads_priority() -> None:
    """This thread's nice value to :data:`DIGEST_NICE` (Linux, where the value is a thread's own;
    raising it needs no privilege). Elsewhere, or where it fails, nothing changes."""
    import sys
    import threading

    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), DIGEST_NICE)
        except OSError:
            pass


def make_manifest(
    operation: str,
    params: dict[str, Any],
    sources: dict[str, list[Path]],
    *,
    hashes: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the manifest dict.

    Args:
        operation: the library function, e.g. ``remap``, ``export``, ``fix``.
        params: the operation's parameters, JSON-ready.
        sources: role -> files read (e.g. {"drafter": [...], "target": [...]}).
        hashes: precomputed digests by path string (see :func:`file_digest`; computed
            here for the rest).
    """
    from ckpttools.io.version import __version__

    hashes = dict(hashes or {})
    files = {}
    for role, paths in sources.items():
        files[role] = [
            {"path": str(p), "bytes": Path(p).stat().st_size, "digest": hashes.get(str(p)) or file_digest(p)}
            for p in paths
        ]
    return {
        "tool": "ckpttools",
        "version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "operation": operation,
        "parameters": params,
        "sources": files,
        **(extra or {}),
    }


class BackgroundDigests:
    """Digest files in a worker thread while the caller copies them: :meth:`start` starts it (as the
    copy starts: :func:`ckpttools.io.plan.execute`), :meth:`result` takes the digests.

    The copy runs in the kernel and hashing through a memory map on the other core, so
    the manifest costs almost no wall time. The thread runs at :data:`DIGEST_NICE`: it takes a core
    only where the writing thread does not want it. :meth:`result`, called once the copy is done,
    has the thread stop after its chunk and finishes what is left on the caller's thread, at the
    caller's priority: a digest starved beside a busy machine's work then costs no more than
    one hashed after the copy.

    ``follow`` (path -> the byte range ``[start, end)`` of it that one kernel copy will read, in
    order) makes the digest of such a file trail that copy, a :data:`FOLLOW_CHUNK` behind, as the
    copy reports through :meth:`copied`: the source is then read from memory once, its bytes still
    in the CPU's cache when hashed, rather than twice at once by two readers (a 3.66 GB data
    section hashed beside its copy made the copy ~1.5x as long). :meth:`release` (and
    :meth:`close`) let every digest read on unpaced.
    """

    def __init__(self, paths: list[Path], follow: dict[str, tuple[int, int]] | None = None) -> None:
        import threading

        self._cond = threading.Condition()
        self._copied: dict[str, int] = {}
        self._follow = {k: v for k, v in (follow or {}).items() if k in {str(p) for p in paths}}
        self._released = False
        self._closed = False
        self._handoff = False
        self._paths = [str(p) for p in paths]
        self._done: dict[str, dict[str, str]] = {}
        self._partial: _FileDigest | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        #: bytes that :meth:`result` hashed on the caller's thread (what the thread had not reached)
        self.finished_by_caller = 0

    def start(self) -> None:
        """Start digesting, one file after another on a thread of its own (once)."""
        import threading

        if self._thread is None and not self._handoff:
            self._thread = threading.Thread(target=self._run, name="ckpt-digests", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        _lower_this_threads_priority()
        stop = lambda: self._handoff or self._closed  # noqa: E731 - read before every chunk
        try:
            for p in self._paths:
                if stop():
                    return
                paced = p in self._follow
                d = self._partial = _FileDigest(p)
                if not d.read(
                    FOLLOW_CHUNK if paced else DIGEST_CHUNK, ready=self._pacer(p) if paced else None, stop=stop
                ):
                    return
                self._done[p] = d.result()
                self._partial = None
        except BaseException as e:  # noqa: BLE001 - raised again by result()
            self._error = e

    def copied(self, path: str, pos: int) -> None:
        """The copy of ``path`` has read its bytes up to offset ``pos``."""
        if path in self._follow:
            with self._cond:
                self._copied[path] = pos
                self._cond.notify_all()

    def release(self) -> None:
        """No copy will report any more: every digest reads on at its own pace."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def _pacer(self, path: str) -> Callable[[int], None]:
        start, end = self._follow[path]

        def ready(upto: int) -> None:
            need = min(upto, end)
            if need > start:
                with self._cond:
                    self._cond.wait_for(lambda: self._released or self._copied.get(path, start) >= need, _FOLLOW_WAIT)

        return ready

    def result(self) -> dict[str, dict[str, str]]:
        """Every file's digest: what the thread did, and the rest hashed here (the thread stops
        after the chunk it is in; a thread never started leaves it all to this one)."""
        self._handoff = True
        self.release()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        for p in self._paths:
            if p not in self._done:
                d = self._partial if self._partial is not None and self._partial.path == p else _FileDigest(p)
                before = d.pos
                d.read(DIGEST_CHUNK)
                self.finished_by_caller += d.pos - before
                self._done[p] = d.result()
                self._partial = None
        return dict(self._done)

    def close(self) -> None:
        """Stop after the chunk being digested (if any) and wait for the thread."""
        self._closed = True
        self.release()
        if self._thread is not None:
            self._thread.join()
