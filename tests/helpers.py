"""Test helpers: rewrite a real checkpoint with changes, hash a tree."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ckpttools.demo.tiny import write_tensors
from ckpttools.io.checkpoint import open_checkpoint


def rewrite(
    src: Path,
    dst: Path,
    *,
    drop: tuple[str, ...] = (),
    rename: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
    remove_keys: tuple[str, ...] = (),
    replace: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None,
) -> Path:
    """A copy of a checkpoint with tensors dropped/renamed/replaced and config keys changed."""
    rename, replace = rename or {}, replace or {}
    with open_checkpoint(src) as ck:
        tensors = {}
        for n in ck.tensors:
            if n in drop:
                continue
            a = ck.read(n).copy()
            tensors[rename.get(n, n)] = replace[n](a) if n in replace else a
        cfg = {k: v for k, v in (ck.config or {}).items() if k not in remove_keys}
    cfg.update(config or {})
    return write_tensors(dst, tensors, cfg)


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
