"""Issue 31, root causes 6 and 7, with plans as data: the one preflight that the executor and
``--dry-run`` both run (ckpttools/io/preflight.py), renames that map two sources to one name,
target tensors of the wrong rank, and exports to an engine without d2t."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ckpttools.demo.tiny import build_drafter, build_target
from ckpttools.errors import CheckpointFormatError, MappingError, OutputExistsError, UnsafePathError
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.io.plan import Copy, Data, Gather, Hole, PlannedTensor, TensorRef, WritePlan, execute
from ckpttools.io.preflight import bytes_needed, preflight, refuse_shared_names
from ckpttools.ops.export import plan_export
from ckpttools.ops.fix import plan_fix
from ckpttools.ops.remap import plan_remap
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

from .helpers import rewrite

REPO = Path(__file__).resolve().parents[1]


def _plan(out: Path, layout: str = "directory", tensors: list[PlannedTensor] | None = None) -> WritePlan:
    ts = tensors if tensors is not None else [PlannedTensor("w", "F32", (4,), Data(np.arange(4, dtype=np.float32)))]
    return WritePlan("test", str(out), ts, layout=layout, config={"x": 1} if layout == "directory" else None)


def _entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused(plan: WritePlan, **kw: Any) -> tuple[type, str]:
    """What preflight and execute say of ``plan``: the same error, and nothing written."""
    with pytest.raises(Exception) as dry:
        preflight(plan, **kw)
    with pytest.raises(Exception) as run:
        execute(plan, **kw)
    assert type(dry.value) is type(run.value) and str(dry.value) == str(run.value)
    return type(dry.value), str(dry.value)


# ------------------------------------------------------------------ the file system
def test_a_parent_that_is_a_file_is_refused_by_both(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    before = _entries(tmp_path)
    for out in ("afile/out", "afile/sub/out"):
        kind, msg = _refused(_plan(tmp_path / out))
        assert kind is UnsafePathError and "its parent" in msg and "afile is a file" in msg
        kind, msg = _refused(_plan(tmp_path / out, "file", [PlannedTensor("d2t", "I64", (1,), Data(np.zeros(1)))]))
        assert kind is UnsafePathError
    assert _entries(tmp_path) == before


def test_a_mapping_file_never_replaces_a_directory(tmp_path: Path) -> None:
    (tmp_path / "odir").mkdir()
    (tmp_path / "odir" / "keep").write_text("mine")
    plan = _plan(tmp_path / "odir", "file", [PlannedTensor("d2t", "I64", (2,), Data(np.zeros(2, np.int64)))])
    kind, msg = _refused(plan, force=True)
    assert kind is UnsafePathError and "is a directory: a mapping file cannot replace it" in msg
    kind, msg = _refused(plan)
    assert kind is OutputExistsError and msg == f"{tmp_path / 'odir'} already exists"
    assert _entries(tmp_path) == ["odir", "odir/keep"]


def test_a_checkpoint_may_replace_a_file_with_force(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("old")
    assert preflight(_plan(tmp_path / "out"), force=True) == tmp_path / "out"
    execute(_plan(tmp_path / "out"), force=True)
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_missing_parents_pass_and_the_executor_makes_them(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out"
    preflight(_plan(out))
    assert not (tmp_path / "a").exists()  # preflight makes nothing
    execute(_plan(out))
    assert (out / "config.json").is_file()


def test_too_little_space_is_refused_before_a_byte(tmp_path: Path) -> None:
    """A plan of 4 PB from a file that does not exist: preflight refuses it for space, and so does
    execute, before it opens the source (an executor without the check fails at once, not full)."""
    huge = (1 << 50,)
    ref = TensorRef("w", str(tmp_path / "missing.safetensors"), 0, "F32", huge)
    plan = _plan(tmp_path / "out", tensors=[PlannedTensor("w", "F32", huge, Copy(ref))])
    assert bytes_needed(plan) > 4 * 10**15
    kind, msg = _refused(plan)
    assert kind is UnsafePathError and "writing it needs about" in msg and "free" in msg
    assert _entries(tmp_path) == []


def test_holes_take_no_space(tmp_path: Path) -> None:
    plan = _plan(tmp_path / "out", tensors=[PlannedTensor("w", "F32", (1 << 50,), Hole())])
    assert bytes_needed(plan) < 2 << 20
    assert preflight(plan) == tmp_path / "out"


def test_an_output_tensor_named_twice_is_refused(tmp_path: Path) -> None:
    a = PlannedTensor("norm.weight", "F32", (2,), Data(np.ones(2, np.float32)))
    kind, msg = _refused(_plan(tmp_path / "out", tensors=[a, a]))
    assert kind is CheckpointFormatError and "would both be written as 'norm.weight'" in msg
    assert _entries(tmp_path) == []  # no temporary either


def test_sources_kept_under_their_own_names_are_not_a_rename() -> None:
    canon = {"model.norm.weight": "norm.weight"}.get
    refuse_shared_names([("model.norm.weight", "model.norm.weight"), ("norm.weight", "norm.weight")], "d")
    refuse_shared_names(
        [("model.norm.weight", "model.norm.weight"), ("norm.weight", "norm.weight")],
        "d",
        key=lambda n: canon(n, n),
    )
    with pytest.raises(CheckpointFormatError, match="one name to the engine"):
        refuse_shared_names(
            [("model.norm.weight", "model.norm.weight"), ("module.norm.weight", "norm.weight")],
            "d",
            key=lambda n: canon(n, n),
        )


# ------------------------------------------------------------------ the same refusal through the CLI
def _unprivileged() -> list[str] | None:
    """The command prefix that runs the CLI as a user whom mode bits stop (root is not): [] for this
    user when it is not root; None when there is no such user here."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = [*prefix, sys.executable, "-c", "import ckpttools.cli.commands"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        ok = subprocess.run(probe, cwd="/", env=env, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return prefix if ok else None


RO = [
    ("export", ["export", "d", "-o", "ro/out"]),
    ("remap", ["remap", "d", "--to", "m.safetensors", "-o", "ro/sub/out"]),
    ("vocab-build", ["vocab", "build", "--frequencies", "freq.npy", "--draft-vocab-size", "16", "-o", "ro/m.st"]),
    ("fix-in-place", ["validate", "ro/d", "--fix", "--in-place"]),
]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Inputs every user may read (a directory outside pytest's private temporary tree)."""
    w = Path(tempfile.mkdtemp(prefix="ckpt-ro-"))
    w.chmod(0o755)  # mkdtemp's 0700 would stop the other user before the read-only directory does
    build_drafter(w / "d")
    save_mapping(VocabMapping.from_ids(np.arange(100, 356), 1024), w / "m.safetensors")
    np.save(w / "freq.npy", np.arange(1024, dtype=np.float64))
    yield w
    for p in w.rglob("*"):
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(w)


@pytest.mark.parametrize("cmd", [c for c, _ in RO])
def test_dry_and_real_runs_refuse_a_read_only_directory_alike(world: Path, cmd: str) -> None:
    how = _unprivileged()
    if how is None:
        pytest.skip("no user here that a directory's mode bits stop")
    w = world / cmd
    w.mkdir()
    for n in ("d", "m.safetensors", "freq.npy"):
        (shutil.copytree if (world / n).is_dir() else shutil.copyfile)(world / n, w / n)
    (w / "ro").mkdir()
    if cmd == "fix-in-place":
        shutil.copytree(w / "d", w / "ro" / "d")
    (w / "hf").mkdir()
    for p in [w, *w.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o644)
    (w / "ro").chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    argv = dict(RO)[cmd]
    env = {**os.environ, "HF_HOME": str(w / "hf"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    env.pop("CKPT_DEBUG", None)
    got = []
    for extra in (["--dry-run"], []):
        r = subprocess.run(
            [*how, sys.executable, "-m", "ckpttools", *argv, *extra], cwd=w, env=env, capture_output=True, text=True
        )
        got.append((r.returncode, r.stderr))
    (dry_rc, dry_err), (run_rc, run_err) = got
    assert dry_rc == run_rc == 2, got
    assert dry_err == run_err, got
    lines = dry_err.splitlines()
    assert lines[0].startswith("ckpt: error: ") and "is not writable by this user (Permission denied)" in lines[0]
    assert len(lines) == 2 and lines[1].startswith("ckpt: hint: ")
    assert sorted(p.name for p in (w / "ro").iterdir()) == (["d"] if cmd == "fix-in-place" else [])


# ------------------------------------------------------------------ renames and target tensors
@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    b = tmp_path_factory.mktemp("conv")
    build_drafter(b / "d")
    build_target(b / "t")
    save_mapping(VocabMapping.from_ids(np.arange(100, 356), 1024), b / "m.safetensors")
    return b


def _with(src: Path, dst: Path, **more: np.ndarray) -> Path:
    from ckpttools.demo.tiny import write_tensors

    with open_checkpoint(src) as ck:
        ts = {n: ck.read(n).copy() for n in ck.tensors}
        cfg = dict(ck.config or {})
    return write_tensors(dst, ts | more, cfg)


def test_fix_refuses_two_sources_renamed_to_one_name(base: Path, tmp_path: Path) -> None:
    one = rewrite(base / "d", tmp_path / "one", rename={"norm.weight": "module.norm.weight"})
    names = [t.name for t in plan_fix(one, tmp_path / "out").tensors]
    assert "norm.weight" in names and "module.norm.weight" not in names  # one alone is renamed
    with open_checkpoint(one) as ck:
        norm = ck.read("module.norm.weight").copy()
    two = _with(one, tmp_path / "two", **{"eagle.norm.weight": norm})
    with pytest.raises(CheckpointFormatError) as e:
        plan_fix(two, tmp_path / "out")
    assert "'module.norm.weight' and 'eagle.norm.weight' would both be written as 'norm.weight'" in str(e.value)
    kept = _with(one, tmp_path / "kept", **{"model.norm.weight": norm})  # renamed onto a name SGLang reads alike
    with pytest.raises(CheckpointFormatError, match="one name to the engine"):
        plan_fix(kept, tmp_path / "out")


def test_remap_refuses_a_target_head_of_the_wrong_rank(base: Path, tmp_path: Path) -> None:
    t1 = rewrite(base / "t", tmp_path / "t1", replace={"lm_head.weight": lambda a: a[:, 0].copy()})
    with pytest.raises(MappingError, match=r"has shape \[1024\]; filling rows from the target needs a 2-D"):
        plan_remap(base / "d", tmp_path / "out", to=base / "m.safetensors", fill="target", target=t1)


def test_remap_refuses_two_vocabulary_maps(base: Path, tmp_path: Path) -> None:
    with open_checkpoint(base / "d") as ck:
        d2t = ck.read("d2t").copy()
    two = _with(base / "d", tmp_path / "two", hot_token_id=d2t)
    with pytest.raises(CheckpointFormatError, match="'d2t' and 'hot_token_id' would both be written as 'd2t'"):
        plan_remap(two, tmp_path / "out", to=base / "m.safetensors")


# ------------------------------------------------------------------ exports that leave d2t out
PERM = np.random.default_rng(7).permutation(1024)


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict[str, Path]:
    b = tmp_path_factory.mktemp("full")
    build_target(b / "t")
    return {
        "perm": build_drafter(b / "perm", draft_vocab_size=1024, mapping=PERM),
        "identity": build_drafter(b / "identity", draft_vocab_size=1024, mapping=np.arange(1024)),
        "t": b / "t",
    }


@pytest.mark.parametrize(("fmt", "dtype"), [("vllm", "keep"), ("vllm", "fp16"), ("trtllm", "keep")])
def test_a_permuting_full_vocab_d2t_puts_lm_head_in_target_order(full: dict, tmp_path: Path, fmt: str, dtype: str):
    plan = plan_export(full["perm"], tmp_path / "out", format=fmt, target=full["t"], dtype=dtype)
    t = {x.name: x for x in plan.tensors}
    assert "d2t" not in t
    head = t["lm_head.weight"].source
    assert isinstance(head, Gather) and head.refs[0].tensor == "lm_head.weight"
    assert (head.part == 0).all() and np.array_equal(PERM[head.rows], np.arange(1024))  # row r <- slot of token r
    assert any(n == "d2t" and "lm_head's rows" in why for n, why in plan.report["dropped"])
    execute(plan)
    with open_checkpoint(full["perm"]) as src, open_checkpoint(tmp_path / "out") as out:
        before = np.asarray(src.read("lm_head.weight"), np.float32)
        after = np.asarray(out.read("lm_head.weight"), np.float32)
        assert "d2t" not in out.tensors
    want = before.astype(np.float16).astype(np.float32) if dtype == "fp16" else before
    assert np.array_equal(after[PERM], want)  # the token of slot j keeps slot j's row


@pytest.mark.parametrize("fmt", ["vllm", "trtllm"])
def test_an_identity_full_vocab_d2t_is_dropped_and_lm_head_copied(full: dict, tmp_path: Path, fmt: str) -> None:
    plan = plan_export(full["identity"], tmp_path / "out", format=fmt, target=full["t"])
    t = {x.name: x for x in plan.tensors}
    assert "d2t" not in t and isinstance(t["lm_head.weight"].source, Copy)
    assert any(n == "d2t" and "the identity (every offset 0)" in why for n, why in plan.report["dropped"])


def test_sglang_keeps_a_permuting_d2t_as_it_is(full: dict, tmp_path: Path) -> None:
    plan = plan_export(full["perm"], tmp_path / "out", target=full["t"])
    t = {x.name: x for x in plan.tensors}
    assert isinstance(t["d2t"].source, Copy) and isinstance(t["lm_head.weight"].source, Copy)


def test_a_full_vocab_d2t_that_is_no_permutation_is_refused(full: dict, tmp_path: Path) -> None:
    ids = PERM.copy()
    ids[1] = ids[0]
    bad = rewrite(full["perm"], tmp_path / "bad", drop=("t2d",), replace={"d2t": lambda a: ids - np.arange(1024)})
    with pytest.raises(Exception, match="once each") as e:
        plan_export(bad, tmp_path / "out", format="trtllm", target=full["t"])
    assert "no order of lm_head's rows means the same" in str(e.value)


def test_a_dry_run_describes_the_reordered_head(full: dict, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "ckpttools", "export", str(full["perm"]), "-o", str(tmp_path / "o"), "--format", "vllm"]
        + ["--dry-run", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    head = next(t for t in d["tensors"] if t["name"] == "lm_head.weight")
    assert head["source"]["kind"] == "gather" and head["source"]["rows_from"][0]["rows"] == 1024
    assert "d2t" not in [t["name"] for t in d["tensors"]] and not (tmp_path / "o").exists()


def test_remap_checks_the_target_embed_tokens_it_reads_rows_of(base: Path, tmp_path: Path) -> None:
    """A destination of 2048 tokens rebuilds embed_tokens: the rows no token matched come from the
    target's embed_tokens, which must be a matrix holding them."""
    d = build_drafter(tmp_path / "d", embed_tokens=True)
    save_mapping(VocabMapping.from_ids(np.arange(100, 356), 2048), tmp_path / "m2048.safetensors")
    t1 = rewrite(base / "t", tmp_path / "t1", replace={"model.embed_tokens.weight": lambda a: a[:, 0].copy()})
    with pytest.raises(MappingError, match=r"embed_tokens.weight has shape \[1024\]; taking embed_tokens rows"):
        plan_remap(d, tmp_path / "out", to=tmp_path / "m2048.safetensors", target=t1)
    with pytest.raises(MappingError, match="has 1,024 rows, but token 2,047 of the new vocabulary"):
        plan_remap(d, tmp_path / "out", to=tmp_path / "m2048.safetensors", target=base / "t")
