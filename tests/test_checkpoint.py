"""The checkpoint abstraction: resolution, headers, lazy reads, the writer it shares."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from ckpttools.demo.tiny import build_huge_sparse, write_tensors
from ckpttools.errors import CheckpointFormatError, CkptError, OutputExistsError
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.io.writer import CheckpointWriter, TensorSpec, parse_size, plan_shards

from .conftest import run_ckpt


def test_directory_single_file_and_index_resolve_to_same_tensors(ckpts):
    d = ckpts["sglang"]
    with open_checkpoint(d) as a, open_checkpoint(d / "model.safetensors") as b:
        assert set(a.tensors) == set(b.tensors)
        assert a.config is not None and a.config["architectures"] == ["LlamaForCausalLMEagle3"]
        assert b.config is None  # a bare file carries no config
    with open_checkpoint(ckpts["sharded"]) as s:
        assert len(s.headers) > 1
        assert s.index_path is not None and s.index_path.name == "model.safetensors.index.json"
        index = json.loads(s.index_path.read_text())
        assert {t.name: t.shard for t in s.tensors.values()} == index["weight_map"]


def test_reads_match_the_reference_safetensors_library(ckpts):
    d = ckpts["training"]  # fp32, readable by safetensors.numpy
    ref = load_file(str(d / "model.safetensors"))
    with open_checkpoint(d) as ck:
        for name, arr in ref.items():
            np.testing.assert_array_equal(ck.read(name), arr)
        w = ck.read("lm_head.weight")
        np.testing.assert_array_equal(ck.read_rows("lm_head.weight", 5, 9), w[5:9])
        np.testing.assert_array_equal(ck.read_rows("lm_head.weight", 250, 999), w[250:])


def test_bf16_rows_are_read_with_ml_dtypes(tmp_path):
    a = (np.arange(24, dtype=np.float32).reshape(6, 4) / 8).astype(ml_dtypes.bfloat16)
    write_tensors(tmp_path / "c", {"w": a})
    with open_checkpoint(tmp_path / "c") as ck:
        assert ck.tensors["w"].dtype == "BF16"
        got = ck.read_rows("w", 2, 4)
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(got.astype(np.float32), a[2:4].astype(np.float32))


def test_an_ml_dtypes_without_the_e8m0_type_is_one_clear_error(tmp_path, monkeypatch):
    """F8_E8M0 data is read as ml_dtypes.float8_e8m0fnu, which ml_dtypes 0.4 lacks (pyproject asks for
    0.5 or newer; an environment can still hold an older one): one clear error naming the version
    to install, not an AttributeError."""
    a = np.array([0.5, 1.0, 2.0, 4.0], dtype=np.float32).astype(ml_dtypes.float8_e8m0fnu)
    header = json.dumps({"s": {"dtype": "F8_E8M0", "shape": [4], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + a.tobytes())
    with open_checkpoint(tmp_path / "c") as ck:
        assert ck.tensors["s"].dtype == "F8_E8M0"
        np.testing.assert_array_equal(ck.read("s").astype(np.float32), [0.5, 1.0, 2.0, 4.0])
        monkeypatch.delattr(ml_dtypes, "float8_e8m0fnu")  # as in ml_dtypes 0.4.1
        with pytest.raises(CkptError) as e:
            ck.read("s")
    assert "ml_dtypes.float8_e8m0fnu" in str(e.value) and f"ml_dtypes {ml_dtypes.__version__}" in str(e.value)
    assert e.value.hint is not None and "ml_dtypes>=0.5" in e.value.hint


def test_each_shard_is_mapped_once(ckpts):
    with open_checkpoint(ckpts["sharded"]) as ck:
        for name in ck.tensors:
            ck.read(name)
        assert set(ck._maps) == set(ck.headers)
        first = {k: id(v) for k, v in ck._maps.items()}
        for name in ck.tensors:
            ck.read(name)
        assert {k: id(v) for k, v in ck._maps.items()} == first


def test_writer_output_is_readable_by_safetensors_and_byte_exact(tmp_path):
    tensors = {"a": np.arange(10, dtype=np.int64), "b": np.ones((3, 5), np.float32), "c": np.zeros(7, bool)}
    write_tensors(tmp_path / "x", tensors)
    ref = load_file(str(tmp_path / "x" / "model.safetensors"))
    for k, v in tensors.items():
        np.testing.assert_array_equal(ref[k], v)
    # golden: same header layout as the reference writer, data identical
    save_file(tensors, str(tmp_path / "ref.safetensors"))
    ours = (tmp_path / "x" / "model.safetensors").read_bytes()
    theirs = (tmp_path / "ref.safetensors").read_bytes()
    n_ours, n_theirs = struct.unpack("<Q", ours[:8])[0], struct.unpack("<Q", theirs[:8])[0]
    assert n_ours % 8 == 0
    assert json.loads(ours[8 : 8 + n_ours])["a"]["shape"] == [10]
    assert sorted(ours[8 + n_ours :]) == sorted(theirs[8 + n_theirs :])


def test_plan_shards_is_pure_and_respects_the_limit():
    specs = [TensorSpec(f"t{i}", "F32", (100,)) for i in range(10)]  # 400 B each
    plan = plan_shards(specs, 1000)
    assert [len(s) for s in plan] == [2, 2, 2, 2, 2]
    assert [s.name for shard in plan for s in shard] == [s.name for s in specs]
    assert plan_shards([TensorSpec("big", "F32", (1000,))], 100) == [[TensorSpec("big", "F32", (1000,))]]
    assert parse_size("5GB") == 5 * 10**9 and parse_size("2GiB") == 2 << 30 and parse_size("123") == 123
    with pytest.raises(ValueError):
        parse_size("lots")


def test_writer_refuses_to_overwrite_and_cleans_up_on_error(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    with pytest.raises(OutputExistsError):
        CheckpointWriter(out, [TensorSpec("a", "F32", (2,))])
    out2 = tmp_path / "o2"
    with pytest.raises(RuntimeError):
        with CheckpointWriter(out2, [TensorSpec("a", "F32", (2,)), TensorSpec("b", "F32", (2,))]) as w:
            w.write("a", np.zeros(2, np.float32))
            raise RuntimeError("interrupted")
    assert not out2.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temporary directory left behind
    with pytest.raises(ValueError, match="never written"):
        with CheckpointWriter(tmp_path / "o3", [TensorSpec("a", "F32", (2,)), TensorSpec("b", "F32", (2,))]) as w:
            w.write("a", np.zeros(2, np.float32))
    assert not (tmp_path / "o3").exists()


def test_huge_sparse_checkpoint_uses_little_disk(tmp_path):
    p = build_huge_sparse(tmp_path / "huge", num_shards=8, num_tensors=800)
    with open_checkpoint(p) as ck:
        assert len(ck.headers) == 8
        assert len(ck.tensors) == 800
        total = sum(t.nbytes for t in ck.tensors.values())
    used = sum(os.stat(f).st_blocks * 512 for f in p.iterdir())
    assert total > 20 * 10**9 and used < 10 * 10**6


def _fake_hub_cache(home: Path, repo: str, src: Path, sha: str = "a" * 40, ref: str = "main") -> None:
    base = home / "hub" / ("models--" + repo.replace("/", "--"))
    snap = base / "snapshots" / sha
    snap.mkdir(parents=True)
    for f in src.iterdir():
        (snap / f.name).write_bytes(f.read_bytes())
    (base / "refs").mkdir(exist_ok=True)
    (base / "refs" / ref).write_text(sha)


def test_hub_repo_id_resolves_through_the_offline_cache(ckpts, tmp_path):
    home = tmp_path / "hf"
    _fake_hub_cache(home, "acme/tiny-drafter", ckpts["sglang"])
    _fake_hub_cache(home, "acme/tiny-drafter", ckpts["eagle"], sha="b" * 40, ref="v2")
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    r = run_ckpt("inspect", "acme/tiny-drafter", "--json", "--no-tensors", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "sglang"
    r = run_ckpt("inspect", "acme/tiny-drafter@v2", "--json", "--no-tensors", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "eagle"
    r = run_ckpt("inspect", "acme/not-cached", env=env, cwd=tmp_path)
    assert r.returncode == 2
    assert "not in the local cache" in r.stderr


def test_duplicate_tensor_across_shards_is_an_error(tmp_path):
    d = tmp_path / "dup"
    d.mkdir()
    save_file({"w": np.zeros(2, np.float32)}, str(d / "a.safetensors"))
    save_file({"w": np.ones(2, np.float32)}, str(d / "b.safetensors"))
    with pytest.raises(CheckpointFormatError, match="appears in both"):
        open_checkpoint(d)
