"""The manifest written next to every output: tool version, sources and their hashes,
and the operation with its parameters."""

from __future__ import annotations

import datetime as _dt
import hashlib
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST_NAME", "file_sha256", "make_manifest"]

MANIFEST_NAME = "ckpttools-manifest.json"


def file_sha256(path: str | Path, chunk: int = 8 << 20) -> str:
    """sha256 of a file, streamed (the hash the Hugging Face Hub shows for LFS files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def make_manifest(
    operation: str,
    params: dict[str, Any],
    sources: dict[str, list[Path]],
    *,
    hashes: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the manifest dict.

    Args:
        operation: e.g. ``remap``, ``export``, ``validate --fix``.
        params: the operation's parameters, JSON-ready.
        sources: role -> files read (e.g. {"drafter": [...], "target": [...]}).
        hashes: precomputed sha256 by path string (computed here for the rest).
    """
    from . import __version__

    hashes = dict(hashes or {})
    files = {}
    for role, paths in sources.items():
        files[role] = [
            {"path": str(p), "bytes": Path(p).stat().st_size, "sha256": hashes.get(str(p)) or file_sha256(p)}
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
