"""Kill tests: a SIGKILL at every named step of every command that writes.

``CKPT_TEST_KILL_AT=STEP`` makes the process kill itself at STEP (ckpttools.io.fsutil.kill_point).
After each kill, OUT (or DRAFTER, in place) holds a complete old or new tree under its
own name, the inputs are unchanged, and the next run removes (or, for a displaced
original, recovers) what the killed one left, says so, and succeeds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckpttools.demo.tiny import build_drafter, build_target
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

from .helpers import tree_digest

STEPS = ["mid-write", "sealing", "before-rename", "after-exchange", "after-rename"]


def _ckpt(args: list[str], cwd: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ}
    env.pop("CKPT_TEST_KILL_AT", None)
    if kill_at:
        env["CKPT_TEST_KILL_AT"] = kill_at
    return subprocess.run(
        [sys.executable, "-m", "ckpttools", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def signature(p: Path) -> object:
    """What a command's output means: its tensors' bytes and config (not the manifest's times)."""
    if p.is_file():
        return hashlib.sha256(p.read_bytes()).hexdigest()
    with open_checkpoint(p) as ck:
        tensors = {n: hashlib.sha256(bytes(ck.read_bytes(n))).hexdigest() for n in ck.tensors}
        return tensors, ck.config


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("kill-inputs")
    build_drafter(base / "d", "eagle")  # needs fixing: architectures, max_position_embeddings
    build_target(base / "t")
    save_mapping(VocabMapping.from_ids(np.arange(100, 356), 1024), base / "m.safetensors")
    np.save(base / "freq.npy", np.arange(1024, dtype=np.float64))
    return base


COMMANDS = {
    "remap": (["remap", "d", "--to", "m.safetensors", "-o", "OUT"], "OUT"),
    "export": (["export", "d", "-o", "OUT", "--target", "t", "--max-shard-size", "60KB"], "OUT"),
    "vocab-build": (["vocab", "build", "--frequencies", "freq.npy", "--draft-vocab-size", "16", "-o", "OUT"], "OUT"),
    "fix-out": (["validate", "d", "--target", "t", "--fix", "-o", "OUT"], "OUT"),
}


def _kill_steps(cmd: str, force: bool) -> list[str]:
    # a fresh OUT is renamed once (no exchange); vocab build writes one file and replaces it in one rename
    return [
        s
        for s in STEPS
        if not (s == "after-exchange" and not force)
        and not (cmd == "vocab-build" and s in ("sealing", "after-exchange"))
    ]


@pytest.mark.parametrize("force", [False, True], ids=["new-out", "force-over-old"])
@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_kill_at_every_step(inputs: Path, tmp_path: Path, cmd: str, force: bool) -> None:
    argv, outname = COMMANDS[cmd]
    ref_dir = tmp_path / "ref"
    shutil.copytree(inputs, ref_dir)
    assert _ckpt(argv, ref_dir).returncode in (0, 1)
    new_sig = signature(ref_dir / outname)
    steps = _kill_steps(cmd, force)
    for step in steps:
        w = tmp_path / step
        shutil.copytree(inputs, w)
        old_sig = None
        if force:  # an old OUT to be replaced: a different, complete output
            other = [a if a != "16" else "32" for a in argv] if cmd == "vocab-build" else argv
            if cmd == "remap":
                other = ["remap", "d", "--to", "d", "-o", "OUT"]
            assert _ckpt(other, w).returncode in (0, 1)
            old_sig = signature(w / outname)
        before = tree_digest(w / "d") if (w / "d").exists() else None
        r = _ckpt(argv + (["--force"] if force else []), w, kill_at=step)
        assert r.returncode == -signal.SIGKILL, (step, r.stderr)
        out = w / outname
        if os.path.lexists(out):
            assert signature(out) in (old_sig, new_sig), f"{cmd} killed at {step}: OUT is neither old nor new"
        else:
            assert old_sig is None and step in ("mid-write", "sealing", "before-rename"), (cmd, step)
        if before is not None:
            assert tree_digest(w / "d") == before
        # the next run cleans up after the killed one, says so, and succeeds
        r2 = _ckpt(argv + ["--force"], w)
        assert r2.returncode in (0, 1), r2.stderr
        assert signature(out) == new_sig
        assert not [p for p in w.iterdir() if ".ckpt-tmp-" in p.name], (cmd, step, list(w.iterdir()))
        leftover_step = step in ("mid-write", "sealing", "before-rename") or (force and step == "after-exchange")
        if leftover_step:
            assert "ckpt: note: removed" in r2.stderr, (cmd, step, r2.stderr)


@pytest.mark.parametrize("step", STEPS)
def test_kill_fix_in_place(inputs: Path, tmp_path: Path, step: str) -> None:
    """--fix --in-place: DRAFTER is always a complete drafter, old or fixed; the original is
    never lost (kept as the backup, or recovered by the next run)."""
    w = tmp_path / "w"
    shutil.copytree(inputs, w)
    orig = signature(w / "d")
    r = _ckpt(["validate", "d", "--target", "t", "--fix", "--in-place"], w, kill_at=step)
    assert r.returncode == -signal.SIGKILL
    assert (w / "d").is_dir(), f"killed at {step}: DRAFTER is missing"
    now = signature(w / "d")
    originals = [p for p in w.iterdir() if p.name.startswith("d.bak-") or ".ckpt-tmp-" in p.name]
    if now != orig:  # fixed already: the original must be somewhere
        assert any(signature(p) == orig for p in originals if p.is_dir()), f"killed at {step}: original lost"
    r2 = _ckpt(["validate", "d", "--target", "t", "--fix", "--in-place"], w)
    assert r2.returncode in (0, 1), r2.stderr  # 1: the eagle drafter keeps one unfixable finding (aux ids)
    assert not [p for p in w.iterdir() if ".ckpt-tmp-" in p.name]
    backups = [p for p in w.iterdir() if p.name.startswith("d.bak-")]
    assert any(signature(p) == orig for p in backups), f"killed at {step}: the original is not kept"
    if step == "after-exchange":
        assert "recovered" in r2.stderr and any("bak-recovered" in p.name for p in backups)


def test_fix_in_place_on_dot(inputs: Path, tmp_path: Path) -> None:
    """`ckpt validate . --fix --in-place` from inside the drafter replaces the drafter itself."""
    w = tmp_path / "w"
    shutil.copytree(inputs, w)
    orig = signature(w / "d")
    r = _ckpt(["validate", ".", "--target", "../t", "--fix", "--in-place"], w / "d")
    assert r.returncode in (0, 1) and "config: architectures" in r.stdout, r.stderr
    assert not list((w / "d").glob(".*")), "nothing may be left inside the drafter"
    backups = [p for p in w.iterdir() if p.name.startswith("d.bak-")]
    assert len(backups) == 1 and signature(backups[0]) == orig
    assert signature(w / "d") != orig and (w / "d" / "config.json").is_file()
