"""The manifest written next to every output: tool version, sources and their hashes,
and the operation with its parameters."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST_NAME", "file_digest", "make_manifest", "BackgroundDigests"]

MANIFEST_NAME = "ckpttools-manifest.json"


def file_digest(path: str | Path, chunk: int = 64 << 20) -> dict[str, str]:
    """Digests of a file: xxh3-128 of its bytes (fast enough to hide behind a copy), plus
    the sha256 the Hugging Face cache names the blob by, when the file is such a blob.

    The file is hashed through a memory map, chunk by chunk, each chunk's pages released
    from this process after use: no copy into user space, and bounded resident memory.
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
    """Digest files in a worker thread while the caller copies them; :meth:`result` waits.

    The copy runs in the kernel and hashing through a memory map on the other core, so
    the manifest costs almost no wall time.
    """

    def __init__(self, paths: list[Path]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1)
        self._futures = {str(p): self._pool.submit(file_digest, p) for p in paths}

    def result(self) -> dict[str, dict[str, str]]:
        return {k: f.result() for k, f in self._futures.items()}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
