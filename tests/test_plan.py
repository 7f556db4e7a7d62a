"""Writes as plans (issue 21): every operation's plan as data, the executor's output
byte-equal to what the commands wrote before plans existed (tests/golden.py), and
``--dry-run`` writing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .golden import CASES, GOLDEN, run_case


@pytest.mark.parametrize("case", sorted(CASES))
def test_output_equals_the_golden_tree(case: str, tmp_path: Path) -> None:
    want = json.loads(GOLDEN.read_text())[case]
    got = run_case(case, tmp_path)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], f"{case}: {name} differs from the golden tree"


# ------------------------------------------------------------------ plans as data
import ast  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import jsonschema  # noqa: E402
import numpy as np  # noqa: E402

from ckpttools.demo.tiny import build_drafter, build_target, random_mapping  # noqa: E402
from ckpttools.io.checkpoint import open_checkpoint  # noqa: E402
from ckpttools.io.plan import Cast, Copy, Data, Gather, execute  # noqa: E402
from ckpttools.ops.export import plan_export  # noqa: E402
from ckpttools.ops.fix import plan_fix  # noqa: E402
from ckpttools.ops.remap import plan_remap, remap  # noqa: E402
from ckpttools.vocab.diff import plan_vocab  # noqa: E402
from ckpttools.vocab.mapping import VocabMapping  # noqa: E402

from .helpers import tree_digest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "schemas" / "write-plan.schema.json").read_text())


def _listing(root: Path) -> dict[str, str]:
    """Every entry under root, hidden temporaries included, with its bytes' digest."""
    out = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = tree_digest(p.parent)[p.name] if p.is_file() and not p.is_symlink() else "-"
    return out


def test_a_remap_plan_names_every_rows_source(tmp_path: Path) -> None:
    a_ids = random_mapping(1024, 256, seed=1)
    b_ids = np.sort(np.concatenate([a_ids[:100], np.setdiff1d(np.arange(1024), a_ids)[:156]]))
    d = build_drafter(tmp_path / "d", mapping=a_ids)
    other = build_drafter(tmp_path / "b", mapping=b_ids, seed=2)
    before = _listing(tmp_path)
    plan = plan_remap(d, tmp_path / "out", to=other)
    assert _listing(tmp_path) == before  # a plan writes nothing
    t = {x.name: x for x in plan.tensors}
    head = t["lm_head.weight"].source
    assert isinstance(head, Gather) and head.refs[0].tensor == "lm_head.weight"
    carried = head.part >= 0
    assert int(carried.sum()) == 100 == plan.report["rows_carried"]
    # each carried output row is the source row of the same target token
    slot_of = {int(tok): i for i, tok in enumerate(a_ids)}
    assert [int(r) for r in head.rows[carried]] == [slot_of[int(tok)] for tok in b_ids[carried]]
    assert head.fill == bytes(64 * 2)  # zeros, one bf16 row
    d2t = t["d2t"].source
    assert isinstance(d2t, Data) and np.array_equal(d2t.array + np.arange(256), b_ids)
    with open_checkpoint(d) as ck:
        fc = ck.tensors["fc.weight"]
        assert t["fc.weight"].source == Copy(plan.tensors[0].source.ref)  # type: ignore[union-attr]
        assert t["fc.weight"].source.ref.offset == fc.start  # type: ignore[union-attr]
    assert plan.bytes_by_kind()["gather"] == 256 * 64 * 2
    assert plan.config_diff() == []  # same draft vocabulary size, same vocabulary


def test_an_export_plan_casts_renames_and_builds(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", "training")
    build_target(tmp_path / "t")
    plan = plan_export(d, tmp_path / "out", target=tmp_path / "t")
    t = {x.name: x for x in plan.tensors}
    assert "model.fc.weight" not in t and isinstance(t["fc.weight"].source, Cast)
    assert t["fc.weight"].source.ref.tensor == "model.fc.weight" and t["fc.weight"].dtype == "BF16"
    assert isinstance(t["d2t"].source, Copy)  # already int64
    assert not any("rotary_emb" in n for n in t)  # training-only, dropped
    assert {"key": "torch_dtype", "before": "float32", "after": "bfloat16"} in plan.config_diff()
    assert plan.check is not None and "validate" in plan.check.what
    assert not (tmp_path / "out").exists()


def test_a_fix_plan_keeps_the_shards_and_renames(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", "eagle", max_shard_size=40_000)
    build_target(tmp_path / "t")
    plan = plan_fix(d, tmp_path / "out", target=tmp_path / "t")
    with open_checkpoint(d) as ck:
        assert plan.shards == [list(h.tensors) for h in ck.headers.values()]
    assert all(isinstance(x.source, Copy) for x in plan.tensors)
    diff = {c["key"]: (c["before"], c["after"]) for c in plan.config_diff()}
    assert diff["architectures"] == (["LlamaForCausalLM"], ["LlamaForCausalLMEagle3"])
    assert diff["max_position_embeddings"] == (2048, 4096)


def test_a_vocab_plan_is_one_file_of_two_arrays(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.arange(64, dtype=np.float64))
    plan = plan_vocab(tmp_path / "f.npy", 8, tmp_path / "m.safetensors")
    assert plan.layout == "file" and [x.name for x in plan.tensors] == ["d2t", "t2d"]
    ids = plan.tensors[0].source.array + np.arange(8)  # type: ignore[union-attr]
    assert ids.tolist() == list(range(56, 64))  # the 8 most frequent
    assert not (tmp_path / "m.safetensors").exists()


def test_executing_a_plan_equals_the_operation(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d", seed=4)
    other = build_drafter(tmp_path / "b", seed=5, mapping=random_mapping(1024, 256, seed=6))
    remap(d, tmp_path / "op", to=other)
    execute(plan_remap(d, tmp_path / "plan", to=other))
    a, b = tree_digest(tmp_path / "op"), tree_digest(tmp_path / "plan")
    a.pop("ckpttools-manifest.json"), b.pop("ckpttools-manifest.json")
    assert a == b


def test_the_side_file_rule(tmp_path: Path) -> None:
    d = build_drafter(tmp_path / "d")
    for name in (
        "optimizer.pkl",
        "state.ckpt",
        "training_args.bin",
        "README.md",
        "tokenizer.json",
        "special_tokens_map.json",
    ):
        (d / name).write_bytes(b"x")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", d / "tokenizer_config.json")
    os.symlink("README.md", d / "README.link.md")  # a link inside the checkpoint is fine
    plan = plan_remap(d, tmp_path / "out", to=d)
    why = {s.name: s.skipped for s in plan.side_files}
    assert why["optimizer.pkl"] == why["state.ckpt"] == why["training_args.bin"] == "weights or a pickle"
    assert why["tokenizer_config.json"] == "a link that leads outside the checkpoint"
    assert why["model.safetensors"] == "the source's weights (read as tensors)"
    assert why["config.json"] == "written anew"
    assert {n for n, w in why.items() if w is None} == {
        "README.md",
        "README.link.md",
        "tokenizer.json",
        "special_tokens_map.json",
    }
    execute(plan)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [
            "README.md",
            "README.link.md",
            "tokenizer.json",
            "special_tokens_map.json",
            "config.json",
            "model.safetensors",
            "ckpttools-manifest.json",
        ]
    )


# ------------------------------------------------------------------ --dry-run
DRY = {
    "remap": ["remap", "d", "--to", "m.safetensors", "-o", "OUT", "--fill", "mean"],
    "export": ["export", "d", "-o", "OUT", "--target", "t", "--max-shard-size", "60KB"],
    "fix": ["validate", "d", "--target", "t", "--fix", "-o", "OUT"],
    "vocab-build": ["vocab", "build", "--frequencies", "freq.npy", "--draft-vocab-size", "16", "-o", "OUT"],
}


@pytest.fixture(scope="module")
def dry_inputs(tmp_path_factory) -> Path:
    from ckpttools.vocab.diff import save_mapping

    base = tmp_path_factory.mktemp("dry")
    build_drafter(base / "d", "eagle")
    build_target(base / "t")
    save_mapping(VocabMapping.from_ids(np.arange(100, 356), 1024), base / "m.safetensors")
    np.save(base / "freq.npy", np.arange(1024, dtype=np.float64))
    return base


@pytest.mark.parametrize("cmd", sorted(DRY))
def test_dry_run_prints_the_plan_and_writes_nothing(dry_inputs: Path, tmp_path: Path, cmd: str) -> None:
    import shutil

    w = tmp_path / "w"
    shutil.copytree(dry_inputs, w)
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**os.environ, "CKPT_CACHE": str(cache)}
    before, cache_before = _listing(w), _listing(cache)
    for as_json in (False, True):
        argv = [sys.executable, "-m", "ckpttools", *DRY[cmd], "--dry-run", *(["--json"] if as_json else [])]
        r = subprocess.run(argv, cwd=w, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        if as_json:
            d = json.loads(r.stdout)
            jsonschema.validate(d, SCHEMA)
            assert d["written"] is False and d["tensors"] and d["output"] == "OUT"
        else:
            assert r.stdout.startswith("dry run: ") and "nothing was written" in r.stdout
    assert _listing(w) == before  # no output, no temporary, inputs unchanged
    assert _listing(cache) == cache_before


# ------------------------------------------------------------------ one executor
#: the names through which bytes reach a checkpoint, a mapping or a config file
_WRITERS = {"CheckpointWriter", "SafetensorsFileWriter", "open_new", "rename_noreplace", "rename_exchange", "save_file"}
_EXECUTOR = {"ckpttools/io/plan.py", "ckpttools/io/writer.py", "ckpttools/io/guard.py", "ckpttools/io/fsutil.py"}


def test_no_checkpoint_mapping_or_config_is_written_outside_the_executor() -> None:
    found = []
    for p in sorted((REPO / "ckpttools").rglob("*.py")):
        rel = str(p.relative_to(REPO))
        if rel in _EXECUTOR:
            continue
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name in _WRITERS or name in ("write_bytes", "write_text", "write_json", "tofile"):
                found.append(f"{rel}:{node.lineno}: {name}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ("config.json",):
                parent_calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and node in ast.walk(n)]
                if any(getattr(c.func, "attr", None) in ("add_json", "write_text", "open") for c in parent_calls):
                    found.append(f"{rel}:{node.lineno}: config.json written")
    # reports, plots and ckpttools' own cache go through the guard (io/guard.write_*), never a checkpoint
    allowed = {
        "ckpttools/io/hub.py",
        "ckpttools/measuring/plot.py",
        "ckpttools/cli/commands.py",
        "ckpttools/measuring/measure.py",
    }
    stray = [
        f
        for f in found
        if f.split(":")[0] not in allowed or not any(w in f for w in ("write_bytes", "write_text", "write_json"))
    ]
    assert not stray, "writes outside the executor (ckpttools/io/plan.py):\n" + "\n".join(stray)


def test_one_large_copy_lands_at_its_sources_offset_in_a_page(tmp_path: Path) -> None:
    """A shard that is one kernel copy of >= 64 MiB gets its header padded so its data starts at
    the source's offset within a page; a small copy keeps the 8-byte padding (golden trees)."""
    import struct

    from safetensors.numpy import load_file

    from ckpttools.io.plan import Copy, PlannedTensor, TensorRef, _copy_runs, _page_offsets
    from ckpttools.io.writer import SafetensorsFileWriter, TensorSpec

    big = [
        PlannedTensor(
            f"t{i}", "BF16", (16 << 20,), Copy(TensorRef(f"s{i}", "src", 1728 + i * (32 << 20), "BF16", (16 << 20,)))
        )
        for i in range(2)
    ]
    small = [PlannedTensor("x", "F32", (4,), Copy(TensorRef("x", "src", 1728, "F32", (4,))))]
    assert _copy_runs(big) == {0: 2}  # consecutive in one file: one run, one copy
    assert _page_offsets(big, [[TensorSpec(t.name, t.dtype, t.shape) for t in big]], _copy_runs(big)) == {0: 1728}
    assert _page_offsets(small, [[TensorSpec("x", "F32", (4,))]], _copy_runs(small)) == {}
    tmp = tmp_path / ".o.ckpt-tmp-1-write"
    tmp.mkdir()
    with SafetensorsFileWriter(tmp / "a.safetensors", [TensorSpec("x", "F32", (4,))], page_offset=1728) as w:
        w.write("x", np.arange(4, dtype=np.float32))
    raw = (tmp / "a.safetensors").read_bytes()
    assert (8 + struct.unpack("<Q", raw[:8])[0]) % 4096 == 1728
    assert load_file(tmp / "a.safetensors")["x"].tolist() == [0, 1, 2, 3]
