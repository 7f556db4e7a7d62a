"""``ckpt demo``: the built-in example, run end to end with no network and no GPU."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["run_demo"]


def run_demo(workdir: str | Path | None = None, echo: Callable[[str], None] = print) -> int:
    """Build a tiny target and drafter and run each ckpttools step on them.

    Returns the exit code (0 when every step behaved as expected).
    """
    from .inspection import inspect
    from .render import render_inspect
    from .tiny import build_drafter, build_target

    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="ckpt-demo-")
        workdir = tmp.name
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        target = build_target(work / "target", force=True)
        drafter = build_drafter(work / "drafter", "sglang", force=True)
        echo(f"[1] built a tiny Llama target at {target} and an EAGLE-3 drafter at {drafter}")
        echo("[2] ckpt inspect drafter")
        r = inspect(drafter, tensors=False)
        echo(render_inspect(r))
        ok = r.kind == "sglang" and r.vocab_mapping is not None and not r.vocab_mapping["problems"]
        echo(f"    reading: an SGLang-layout drafter whose mapping is {'clean' if ok else 'NOT clean'}")
        return 0 if ok else 1
    finally:
        if tmp is not None:
            tmp.cleanup()
