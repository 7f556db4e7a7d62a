"""ckpt inspect on every flavor, human and JSON, and the no-torch promise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_target
from ckpttools.ops.inspect import inspect

REPO = Path(__file__).resolve().parents[1]
EXPECTED_KIND = {
    "sglang": "sglang",
    "eagle": "eagle",
    "vllm": "vllm",
    "speculators": "vllm",
    "mla": "mla",
    "modelopt": "modelopt",
    "training": "sglang",
    "target": "target",
    "sharded": "sglang",
}


def _schema():
    return json.loads((REPO / "schemas" / "inspect-report.schema.json").read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED_KIND))
def test_every_flavor_json(ckpts, name):
    r = CliRunner().invoke(cli, ["inspect", str(ckpts[name]), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    jsonschema.validate(d, _schema())
    assert d["kind"] == EXPECTED_KIND[name]
    assert d["evidence"]
    assert d["num_tensors"] == len(d["tensors"])
    assert d["total_bytes"] == sum(t["bytes"] for t in d["tensors"])


@pytest.mark.parametrize("name", sorted(EXPECTED_KIND))
def test_every_flavor_human(ckpts, name):
    r = CliRunner().invoke(cli, ["inspect", str(ckpts[name])])
    assert r.exit_code == 0, r.output
    assert f"kind: {EXPECTED_KIND[name]} (" in r.stdout
    assert "tensors (" in r.stdout and "lm_head.weight" in r.stdout


def test_flavor_evidence_and_mapping_summary(ckpts):
    r = inspect(ckpts["eagle"])
    assert "tensor names use midlayer." in r.evidence and "config has draft_vocab_size" in r.evidence
    assert r.config["max_position_embeddings"] == 2048 and r.config["torch_dtype"] == "float16"
    vm = r.vocab_mapping
    assert vm["order"] == "ascending" and vm["t2d_agrees"] is True and vm["draft_vocab_size"] == 256
    m = inspect(ckpts["modelopt"]).vocab_mapping
    assert m["order"] == "unordered" and m["has_t2d"] is False
    assert any(p["code"] == "order" for p in m["problems"])
    t = inspect(ckpts["target"])
    assert t.vocab_mapping is None and t.config["num_hidden_layers"] == 8


def test_text_config_and_filter(tmp_path):
    p = build_target(tmp_path / "k25", text_config=True, max_position_embeddings=262144)
    r = inspect(p, filter="model.layers.0.*")
    assert r.config["hidden_size"] == 64 and r.config["sources"]["hidden_size"] == "$.text_config.hidden_size"
    assert r.context_length == 262144
    assert r.tensors and all(t["name"].startswith("model.layers.0.") for t in r.tensors)
    assert r.num_tensors > len(r.tensors)


def test_no_tensors_flag(ckpts):
    d = json.loads(CliRunner().invoke(cli, ["inspect", str(ckpts["sglang"]), "--json", "--no-tensors"]).stdout)
    assert "tensors" not in d and d["num_tensors"] == 15


def test_identity_and_missing_mapping_are_reported(tmp_path):
    from ckpttools.demo.tiny import build_drafter

    full = build_drafter(tmp_path / "full", "sglang", vocab_size=300, draft_vocab_size=300, mapping=list(range(300)))
    assert inspect(full).vocab_mapping["identity"] is True
    none = build_drafter(tmp_path / "none", "sglang", draft_vocab_size=256, mapping=None, config_overrides={})
    # strip the mapping: rebuild the same drafter without d2t/t2d
    from ckpttools.demo.tiny import write_tensors
    from ckpttools.io.checkpoint import open_checkpoint

    with open_checkpoint(none) as ck:
        tensors = {n: ck.read(n).copy() for n in ck.tensors if n not in ("d2t", "t2d")}
        cfg = ck.config
    bare = write_tensors(tmp_path / "bare", tensors, cfg)
    r = inspect(bare)
    assert r.vocab_mapping is None
    assert any("no d2t while draft_vocab_size 256 < vocab_size 1024" in n for n in r.notes)


TRIPWIRE = """
import os
open(os.environ["CKPT_TRIPWIRE"], "w").write("torch was imported")
raise ImportError("tripwire: torch must not be imported here")
"""


def test_inspect_and_help_never_import_torch(ckpts, tmp_path):
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(TRIPWIRE)
    mark = tmp_path / "tripped"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "CKPT_TRIPWIRE": str(mark)}
    for args in (
        ["--help"],
        ["inspect", str(ckpts["sglang"]), "--json"],
        ["inspect", str(ckpts["sharded"])],
        ["inspect", str(ckpts["modelopt"])],
    ):
        r = subprocess.run([sys.executable, "-m", "ckpttools", *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        assert not mark.exists(), f"ckpt {' '.join(args)} imported torch"


def test_every_command_has_help_with_examples():
    def walk(group, prefix):
        for name, cmd in group.commands.items():
            yield [*prefix, name], cmd
            if hasattr(cmd, "commands"):
                yield from walk(cmd, [*prefix, name])

    for path, cmd in walk(cli, []):
        r = CliRunner().invoke(cli, [*path, "--help"])
        assert r.exit_code == 0, path
        assert cmd.help and len(cmd.help.strip()) > 20, f"ckpt {' '.join(path)} has no help"
        if not hasattr(cmd, "commands") and path[0] not in ("demo",):
            assert "Example" in cmd.help, f"ckpt {' '.join(path)} has no example"


def test_repeated_layers_are_grouped_and_all_tensors_lists_each(tmp_path):
    """A 35,000-tensor target reads in a screenful; --all-tensors and --json keep every row."""
    from ckpttools.cli.render import group_tensor_rows
    from ckpttools.demo.tiny import build_huge_sparse

    rows = [
        {"name": f"model.layers.{i}.mlp.experts.{j}.w", "dtype": "BF16", "shape": [4, 8], "bytes": 64, "shard": "a"}
        for i in range(3)
        for j in (0, 1, 2, 5)
    ] + [{"name": "lm_head.weight", "dtype": "BF16", "shape": [9, 8], "bytes": 144, "shard": "b"}]
    g = group_tensor_rows(rows)
    assert g[0] == {"name": "model.layers.{0..2}.mlp.experts.{0..2,5}.w", "dtype": "BF16", "shape": [4, 8],
                    "bytes": 12 * 64, "shard": "a", "count": 12}  # fmt: skip
    assert g[1]["name"] == "lm_head.weight" and "count" not in g[1]
    huge = build_huge_sparse(tmp_path / "huge", num_shards=4, num_tensors=3000)
    grouped = CliRunner().invoke(cli, ["inspect", str(huge)])
    each = CliRunner().invoke(cli, ["inspect", str(huge), "--all-tensors"])
    as_json = CliRunner().invoke(cli, ["inspect", str(huge), "--json"])
    assert grouped.exit_code == each.exit_code == as_json.exit_code == 0
    assert len(grouped.stdout.splitlines()) < 40
    assert "model.layers.{0..2}.mlp.experts.{0..383}.gate_proj.weight  BF16   2048x7168" in grouped.stdout
    assert "x999" in grouped.stdout and "tensors (3000, 6 rows (--all-tensors for each))" in grouped.stdout
    assert len(each.stdout.splitlines()) > 3000
    assert len(json.loads(as_json.stdout)["tensors"]) == 3000
