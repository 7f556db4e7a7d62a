"""Kill tests: a SIGKILL at every named step of every command that writes.

``CKPT_TEST_KILL_AT=STEP`` makes the process kill itself at STEP (ckpttools.io.fsutil.kill_point).
Each run is ``python -m ckpttools`` in a process of its own, forked from a zygote that imported it
(tests/zygote.py): killed, it is a process killed; the next run is another process.
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
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ckpttools.demo.tiny import build_drafter, build_target
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

from .case_runner import as_text
from .helpers import tree_digest
from .zygote import Zygote

STEPS = ["mid-write", "sealing", "before-rename", "after-exchange", "after-rename"]


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    """``python -m ckpttools`` forked from a process that has imported it (each run a process of its
    own, killed as one): the module's ~80 runs without an interpreter's start and imports each."""
    env = {k: v for k, v in os.environ.items() if k != "CKPT_TEST_KILL_AT"}
    z = Zygote(
        env, tmp_path_factory.mktemp("kill-zygote"), run_vars=frozenset({"CKPT_TEST_KILL_AT", "PYTEST_CURRENT_TEST"})
    )
    yield z
    z.close()


def _ckpt(z: Zygote, args: list[str], cwd: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    """``python -m ckpttools ARGS`` from ``cwd`` in a child of ``z``; ``kill_at``: CKPT_TEST_KILL_AT."""
    env = {k: v for k, v in os.environ.items() if k != "CKPT_TEST_KILL_AT"}
    if kill_at:
        env["CKPT_TEST_KILL_AT"] = kill_at
    rc, so, se = z.run(args, cwd, 120, env)
    if rc is None:
        raise subprocess.TimeoutExpired(["ckpt", *args], 120)
    return subprocess.CompletedProcess(["ckpt", *args], rc, as_text(so), as_text(se))


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
def test_kill_at_every_step(inputs: Path, tmp_path: Path, zygote: Zygote, cmd: str, force: bool) -> None:
    argv, outname = COMMANDS[cmd]
    ref_dir = tmp_path / "ref"
    shutil.copytree(inputs, ref_dir)
    assert _ckpt(zygote, argv, ref_dir).returncode in (0, 1)
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
            assert _ckpt(zygote, other, w).returncode in (0, 1)
            old_sig = signature(w / outname)
        before = tree_digest(w / "d") if (w / "d").exists() else None
        r = _ckpt(zygote, argv + (["--force"] if force else []), w, kill_at=step)
        assert r.returncode == -signal.SIGKILL, (step, r.stderr)
        out = w / outname
        if os.path.lexists(out):
            assert signature(out) in (old_sig, new_sig), f"{cmd} killed at {step}: OUT is neither old nor new"
        else:
            assert old_sig is None and step in ("mid-write", "sealing", "before-rename"), (cmd, step)
        if before is not None:
            assert tree_digest(w / "d") == before
        # the next run cleans up after the killed one, says so, and succeeds
        r2 = _ckpt(zygote, argv + ["--force"], w)
        assert r2.returncode in (0, 1), r2.stderr
        assert signature(out) == new_sig
        assert not [p for p in w.iterdir() if ".ckpt-tmp-" in p.name], (cmd, step, list(w.iterdir()))
        leftover_step = step in ("mid-write", "sealing", "before-rename") or (force and step == "after-exchange")
        if leftover_step:
            assert "ckpt: note: removed" in r2.stderr, (cmd, step, r2.stderr)


@pytest.mark.parametrize("step", STEPS)
def test_kill_fix_in_place(inputs: Path, tmp_path: Path, zygote: Zygote, step: str) -> None:
    """--fix --in-place: DRAFTER is always a complete drafter, old or fixed; the original is
    never lost (kept as the backup, or recovered by the next run)."""
    w = tmp_path / "w"
    shutil.copytree(inputs, w)
    orig = signature(w / "d")
    r = _ckpt(zygote, ["validate", "d", "--target", "t", "--fix", "--in-place"], w, kill_at=step)
    assert r.returncode == -signal.SIGKILL
    assert (w / "d").is_dir(), f"killed at {step}: DRAFTER is missing"
    now = signature(w / "d")
    originals = [p for p in w.iterdir() if p.name.startswith("d.bak-") or ".ckpt-tmp-" in p.name]
    if now != orig:  # fixed already: the original must be somewhere
        assert any(signature(p) == orig for p in originals if p.is_dir()), f"killed at {step}: original lost"
    r2 = _ckpt(zygote, ["validate", "d", "--target", "t", "--fix", "--in-place"], w)
    assert r2.returncode in (0, 1), r2.stderr  # 1: the eagle drafter keeps one unfixable finding (aux ids)
    assert not [p for p in w.iterdir() if ".ckpt-tmp-" in p.name]
    backups = [p for p in w.iterdir() if p.name.startswith("d.bak-")]
    assert any(signature(p) == orig for p in backups), f"killed at {step}: the original is not kept"
    if step == "after-exchange":
        assert "recovered" in r2.stderr and any("bak-recovered" in p.name for p in backups)


def test_fix_in_place_on_dot(inputs: Path, tmp_path: Path, zygote: Zygote) -> None:
    """`ckpt validate . --fix --in-place` from inside the drafter replaces the drafter itself."""
    w = tmp_path / "w"
    shutil.copytree(inputs, w)
    orig = signature(w / "d")
    r = _ckpt(zygote, ["validate", ".", "--target", "../t", "--fix", "--in-place"], w / "d")
    assert r.returncode in (0, 1) and "config: architectures" in r.stdout, r.stderr
    assert not list((w / "d").glob(".*")), "nothing may be left inside the drafter"
    backups = [p for p in w.iterdir() if p.name.startswith("d.bak-")]
    assert len(backups) == 1 and signature(backups[0]) == orig
    assert signature(w / "d") != orig and (w / "d" / "config.json").is_file()
