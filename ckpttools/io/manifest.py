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
    import mmap

    import xxhash

    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)
                try:
                    for i in range(0, size, chunk):
                        if ready is not None:
                            ready(min(i + chunk, size))
                        h.update(view[i : i + chunk])
                        if hasattr(m, "madvise"):
                            m.madvise(mmap.MADV_DONTNEED, i, min(chunk, size - i))
                finally:
                    view.release()
    out = {"xxh3_128": h.hexdigest()}
    real = Path(path).resolve()
    if real.parent.name == "blobs" and len(real.name) == 64 and all(c in "0123456789abcdef" for c in real.name):
        out["sha256"] = real.name  # the Hub's LFS object id
    return out


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
    copy starts: :func:`ckpttools.io.plan.execute`), :meth:`result` waits.

    The copy runs in the kernel and hashing through a memory map on the other core, so
    the manifest costs almost no wall time. ``follow`` (path -> the byte range ``[start, end)``
    of it that one kernel copy will read, in order) makes the digest of such a file trail that
    copy, a :data:`FOLLOW_CHUNK` behind, as the copy reports through :meth:`copied`: the source
    is then read from memory once, its bytes still in the CPU's cache when hashed, rather than
    twice at once by two readers (a 3.66 GB data section hashed beside its copy made the copy
    ~1.5x as long). :meth:`release` (and :meth:`close`) let every digest read on unpaced.
    """

    def __init__(self, paths: list[Path], follow: dict[str, tuple[int, int]] | None = None) -> None:
        import threading

        self._cond = threading.Condition()
        self._copied: dict[str, int] = {}
        self._follow = {k: v for k, v in (follow or {}).items() if k in {str(p) for p in paths}}
        self._released = False
        self._closed = False
        self._paths = [str(p) for p in paths]
        self._done: dict[str, dict[str, str]] = {}
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start digesting, one file after another on a thread of its own (once; :meth:`result`
        starts it where nothing did)."""
        import threading

        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ckpt-digests", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            for p in self._paths:
                if self._closed:
                    return
                paced = p in self._follow
                chunk = FOLLOW_CHUNK if paced else 64 << 20
                self._done[p] = file_digest(p, chunk, ready=self._pacer(p) if paced else None)
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
        self.release()
        self.start()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        return dict(self._done)

    def close(self) -> None:
        """Stop after the file being digested (if any) and wait for it."""
        self._closed = True
        self.release()
        if self._thread is not None:
            self._thread.join()
