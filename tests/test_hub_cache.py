"""A real Hugging Face cache, written by huggingface_hub itself (snapshot_download against
tests/local_hub.py), read by the CLI from another working directory: by repo id offline,
and by relative paths into the snapshot (whose files are links into blobs/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckpttools.demo.tiny import build_drafter, build_target

from .local_hub import LocalHub, Repo


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ckpttools", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("repos")
    build_drafter(src / "single", "sglang")
    build_drafter(src / "sharded", "sglang", max_shard_size=40_000, embed_tokens=True)
    build_target(src / "tgt")
    home = tmp_path_factory.mktemp("hf-home")
    repos = {name: Repo.from_dir(src / name.split("/")[1]) for name in ("org/single", "org/sharded", "org/tgt")}
    with LocalHub(repos) as hub:
        code = "from huggingface_hub import snapshot_download as s; s('org/single'); s('org/sharded'); s('org/tgt')"
        env = {
            **os.environ,
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(home),
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        env.pop("HF_HUB_OFFLINE", None)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    return home


def _snapshot(home: Path, repo: str) -> Path:
    snaps = list((home / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots").iterdir())
    assert len(snaps) == 1
    return snaps[0]


@pytest.mark.parametrize("repo", ["org/single", "org/sharded"])
def test_cache_layout_is_the_hubs(hf_home: Path, repo: str) -> None:
    snap = _snapshot(hf_home, repo)
    shards = sorted(snap.glob("*.safetensors"))
    assert shards and all(p.is_symlink() and "blobs" in os.readlink(p) for p in shards)


@pytest.mark.parametrize("repo", ["org/single", "org/sharded"])
def test_repo_id_offline_from_another_cwd(hf_home: Path, repo: str, tmp_path: Path) -> None:
    env = {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    r = _run(["inspect", repo, "--json", "--no-tensors"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    r = _run(["validate", repo], tmp_path, env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run(["export", repo, "-o", "out", "--max-shard-size", "100KB"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "config.json").is_file()


@pytest.mark.parametrize("target", ["org/tgt", "org/tgt@main"])
def test_the_offline_engine_loads_a_target_from_the_cache_by_repo_id(
    hf_home: Path, target: str, tmp_path: Path
) -> None:
    """`verify --engine torch --target org/name[@rev]` offline: transformers is handed the snapshot
    the check opened (``org/tgt@main`` is no repo id to transformers: it had failed there, after
    the check had passed)."""
    (tmp_path / "p.jsonl").write_text('{"input_ids": [5, 6, 7, 8]}\n')
    argv = ["verify", "--engine", "torch", "--target", target, "org/single", "--prompts", "p.jsonl"]
    r = _run(
        [*argv, "--num-prompts", "1", "--max-new-tokens", "4", "--json"],
        tmp_path,
        {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode in (0, 1), r.stderr
    assert '"engine": "torch"' in r.stdout and "accept_length" in r.stdout


@pytest.mark.parametrize("repo", ["org/single", "org/sharded"])
def test_relative_path_into_snapshot(hf_home: Path, repo: str, tmp_path: Path) -> None:
    snap = _snapshot(hf_home, repo)
    rel = os.path.relpath(snap, tmp_path)
    r = _run(["inspect", rel, "--no-tensors"], tmp_path, {"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0 and "kind: sglang" in r.stdout, r.stderr
    link = tmp_path / "drafter"
    link.symlink_to(snap)
    r = _run(["remap", "drafter", "--to", "drafter", "-o", "same"], tmp_path, {"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr


def test_a_real_escape_from_a_cache_like_layout_is_refused(hf_home: Path, tmp_path: Path) -> None:
    """A link that leaves the snapshot for anything but the cache's own blobs/ is refused."""
    snap = _snapshot(hf_home, "org/sharded")
    fake = tmp_path / "hub" / "models--evil--repo"
    shutil.copytree(snap.parent.parent, fake, symlinks=True)
    fsnap = next((fake / "snapshots").iterdir())
    victim = tmp_path / "elsewhere.safetensors"
    first = sorted(fsnap.glob("*.safetensors"))[0]
    shutil.copyfile(first, victim)
    first.unlink()
    first.symlink_to(victim)
    r = _run(["inspect", str(fsnap)], tmp_path, {})
    assert r.returncode == 2 and "outside" in r.stderr and "Traceback" not in r.stderr
