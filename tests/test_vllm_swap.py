"""Several drafters against one loaded target on the real vLLM 0.32 (CPU build): each swapped into
one server through ckpttools' worker extension (ckpttools.engines.swap), in the order given and
in reverse, against each drafter's figure on a server of its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli

from .swap_pairs import build
from .test_vllm_engine import ARGS, VLLM_PY

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not Path(VLLM_PY).is_file(), reason=f"no vLLM interpreter at {VLLM_PY}"),
]


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    old = {k: os.environ.get(k) for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CACHE_ROOT")}
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    os.environ["VLLM_CACHE_ROOT"] = str(tmp_path_factory.mktemp("vllm-cache"))
    yield build(tmp_path_factory.mktemp("swap"), "vllm")
    for k, v in old.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def _verify(target: Path, drafters: list[Path], log: Path, *extra: str) -> dict:
    argv = ["verify", "--launch", "--engine", "vllm", "--target", str(target), *map(str, drafters), *extra]
    argv += ["--steps", "3", "--prompts", str(target.parent.parent / "prompts.jsonl"), "--num-prompts", "6"]
    argv += ["--max-new-tokens", "32", "--ignore-eos", "--engine-python", VLLM_PY, "--log", str(log), "--json"]
    argv += ["--quiet", *[f"--engine-arg={a}" for a in ARGS]]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.output + (log.read_text()[-3000:] if log.exists() else "")
    return json.loads(r.stdout)


def test_three_drafters_and_another_mapping_on_one_vllm_server_in_either_order(known, tmp_path):
    tp, ds, _ = known
    order = [ds["id"], ds["swap"], ds["perm"], ds["half"], ds["twolayer"]]
    fwd = _verify(tp, order, tmp_path / "fwd.log")
    back = _verify(tp, order[3::-1], tmp_path / "back.log")
    own = _verify(tp, [ds["half"]], tmp_path / "own.log")  # one drafter: the single report
    assert [e["drafter"] for e in fwd["drafters"]] == [str(d) for d in order]
    f = {Path(e["drafter"]).name: e for e in fwd["drafters"]}
    b = {Path(e["drafter"]).name: e for e in back["drafters"]}
    assert f["vllm-id"]["accept_length"] == 4.0 and f["vllm-swap"]["accept_length"] == 1.0
    assert f["vllm-perm"]["accept_length"] == 4.0  # 4.0 only with the running map replaced too
    assert f["vllm-half"]["accept_length"] == own["accept_length"] and 1.0 < own["accept_length"] < 4.0
    assert all(f[k]["placed"] == "swap" for k in ("vllm-id", "vllm-swap", "vllm-perm", "vllm-half"))
    assert f["vllm-twolayer"]["placed"] == "own server" and "num_hidden_layers" in f["vllm-twolayer"]["swap"]["why"]
    assert f["vllm-twolayer"]["accept_length"] == 4.0
    assert fwd["server_starts"] == 2 and back["server_starts"] == 1
    assert fwd["target_unchanged"] is True and back["target_unchanged"] is True
    for k in ("vllm-id", "vllm-swap", "vllm-perm", "vllm-half"):
        assert b[k]["placed"] == "swap" and b[k]["accept_length"] == f[k]["accept_length"], k
        assert "read back" in b[k]["swap"]["checked"]
    est = f["vllm-id"]["steps_estimate"]
    assert est["estimate"] is True and est["accept_length"] == [2.0, 3.0, 4.0]


def test_the_swap_reaches_both_ranks_at_tensor_parallel_2(known, tmp_path, monkeypatch):
    """vLLM's CPU build at --tensor-parallel-size 2 (one core per worker): the extension runs in
    both workers, both replace the map, and the figures are the single-rank ones."""
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # vLLM refuses to guess with one NUMA node
    tp, ds, _ = known
    rep = _verify(tp, [ds["id"], ds["swap"], ds["perm"]], tmp_path / "tp2.log", "--tp", "2")
    assert rep["tp"] == 2 and rep["server_starts"] == 1 and rep["target_unchanged"] is True
    assert [e["accept_length"] for e in rep["drafters"]] == [4.0, 1.0, 4.0]
    for e in rep["drafters"]:
        assert e["placed"] == "swap" and e["swap"]["ranks"] == 2 and e["swap"]["maps_replaced"] == 2
        assert "read back on 2 ranks" in e["swap"]["checked"]
