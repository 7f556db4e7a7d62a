"""Several drafters against one loaded target on the real vLLM 0.32 (CPU build): each swapped into
one server through ckpttools' worker extension (ckpttools.engines.swap), in the order given (one
`verify --launch` with five drafters) and in reverse (on the session's shared llama server); each
swapped figure equals the other order's, and the partly-matching drafter's swapped figure equals its
figure on a server that loaded it at start (the first drafter of the `verify --launch`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli

from .swap_pairs import build
from .vllm_pool import ARGS, VLLM_PY, server_env, vllm_packs_linears

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not Path(VLLM_PY).is_file(), reason=f"no vLLM interpreter at {VLLM_PY}"),
]


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    """The pairs, and the pool's server settings (tests/vllm_pool.py) for the servers `verify --launch` starts."""
    with server_env(tmp_path_factory.mktemp("vllm-cache")):
        yield build(tmp_path_factory.mktemp("swap"), "vllm")


def _verify(target: Path, drafters: list[Path], log: Path, *extra: str) -> dict:
    argv = ["verify", "--launch", "--engine", "vllm", "--target", str(target), *map(str, drafters), *extra]
    argv += ["--steps", "3", "--prompts", str(target.parent.parent / "prompts.jsonl"), "--num-prompts", "6"]
    argv += ["--max-new-tokens", "32", "--ignore-eos", "--engine-python", VLLM_PY, "--log", str(log), "--json"]
    argv += ["--quiet", *[f"--engine-arg={a}" for a in ARGS]]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.output + (log.read_text()[-3000:] if log.exists() else "")
    return json.loads(r.stdout)


def _reverse_on_the_shared_server(pool, tp: Path, drafters: list[Path], prompts: Path) -> dict:
    """``drafters`` swapped one after another into the pool's llama server (its target put in place
    first), each checked and measured by `verify --host`; the target's weights read back before the
    first swap and after the last (ckpttools.engines.swap.target_digest)."""
    from ckpttools.engines.swap import target_digest
    from ckpttools.io.net import NetClient

    srv = pool.get("llama", *pool.pair("llama")[::2])
    srv.load_target(tp)
    starts = len(pool.servers)
    with NetClient(retries=0) as net:
        before = target_digest(net, srv.url, srv.spec)
        entries = []
        for d in drafters:
            res = srv.swap(d)
            argv = ["verify", "--host", srv.url, "--engine", "vllm", "--prompts", str(prompts), "--num-prompts", "6",
                    "--max-new-tokens", "32", "--ignore-eos", "--json", "--quiet"]  # fmt: skip
            r = CliRunner().invoke(cli, argv)
            assert r.exit_code == 0, r.output + srv.server.log_tail(40)
            entries.append({"drafter": str(d), "swap": res.to_dict(), **json.loads(r.stdout)})
        after = target_digest(net, srv.url, srv.spec)
    assert len(pool.servers) == starts  # no server started for these
    return {"drafters": entries, "target_unchanged": before.digest == after.digest}


@pytest.mark.pool_family("llama")
def test_three_drafters_and_another_mapping_on_one_vllm_server_in_either_order(known, tmp_path, vllm_pool):
    tp, ds, prompts = known
    # half first: the shared server loads it at start (its own-server figure: the swap of it onto
    # itself changes no byte); on the pool's server it is swapped in last, over the id drafter
    order = [ds["half"], ds["id"], ds["swap"], ds["perm"], ds["twolayer"]]
    fwd = _verify(tp, order, tmp_path / "fwd.log")
    back = _reverse_on_the_shared_server(vllm_pool, tp, order[3::-1], prompts)
    assert [e["drafter"] for e in fwd["drafters"]] == [str(d) for d in order]
    assert [Path(e["drafter"]).name for e in back["drafters"]][-2:] == ["vllm-id", "vllm-half"]
    f = {Path(e["drafter"]).name: e for e in fwd["drafters"]}
    b = {Path(e["drafter"]).name: e for e in back["drafters"]}
    assert f["vllm-id"]["accept_length"] == 4.0 and f["vllm-swap"]["accept_length"] == 1.0
    assert f["vllm-perm"]["accept_length"] == 4.0  # 4.0 only with the running map replaced too
    assert 1.0 < f["vllm-half"]["accept_length"] < 4.0  # b's swapped-in figure equals it (below)
    assert all(f[k]["placed"] == "swap" for k in ("vllm-id", "vllm-swap", "vllm-perm", "vllm-half"))
    assert f["vllm-twolayer"]["placed"] == "own server" and "num_hidden_layers" in f["vllm-twolayer"]["swap"]["why"]
    assert f["vllm-twolayer"]["accept_length"] == 4.0
    assert fwd["server_starts"] == 2
    assert fwd["target_unchanged"] is True and back["target_unchanged"] is True
    # every target parameter digested in the server, its packed linear layers by their output: packed
    # where vLLM repacks bf16 linears on this CPU (AMX or a oneDNN bf16 matmul; vllm_packs_linears says
    # which, asked of vLLM's own dispatch), else none, every weight then a parameter digested as it is
    packs = vllm_packs_linears()
    tc = fwd["target_compared"]
    assert tc["parameters"] > 0 and tc["bytes"] > 0 and tc["changed"] == []
    assert (tc["packed_layers"] > 0) is packs, (tc, f"vLLM packs bf16 linears on this CPU: {packs}")
    assert fwd["target_check"].startswith(f"unchanged: {tc['parameters']:,} parameters")
    for e in fwd["drafters"][:4]:  # every parameter of every swap read back, none left out
        checked = e["swap"]["checked"]
        assert checked.startswith("read back on the device: "), checked
        assert "not compared" not in checked and ("fixed random input" in checked) is packs, (checked, packs)
        assert {"read", "update", "read_back"} <= set(e["swap"]["timings"]), e["swap"]
    for k in ("vllm-id", "vllm-swap", "vllm-perm", "vllm-half"):
        assert b[k]["swap"]["ok"] and b[k]["accept_length"] == f[k]["accept_length"], k
        assert "read back" in b[k]["swap"]["checked"]
    est = f["vllm-id"]["steps_estimate"]
    assert est["estimate"] is True and est["accept_length"] == [2.0, 3.0, 4.0]


def test_the_swap_reaches_both_ranks_at_tensor_parallel_2(known, tmp_path, monkeypatch):
    """vLLM's CPU build at --tensor-parallel-size 2 (one core per worker): the extension runs in
    both workers, both replace the map, and the figures are the single-rank ones."""
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # vLLM refuses to guess with one NUMA node
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)  # vLLM's own multiprocess setup
    tp, ds, _ = known
    rep = _verify(tp, [ds["id"], ds["swap"], ds["perm"]], tmp_path / "tp2.log", "--tp", "2")
    assert rep["tp"] == 2 and rep["server_starts"] == 1 and rep["target_unchanged"] is True
    assert [e["accept_length"] for e in rep["drafters"]] == [4.0, 1.0, 4.0]
    for e in rep["drafters"]:
        assert e["placed"] == "swap" and e["swap"]["ranks"] == 2 and e["swap"]["maps_replaced"] == 2
        assert "read back on 2 ranks" in e["swap"]["checked"]


@pytest.mark.pool_family("llama")
def test_a_swap_that_writes_the_target_is_caught_by_the_target_digest(known, tmp_path, vllm_pool):
    """On the pool's real server: a drafter whose swap also writes one target element (the test-only
    hook of tests/tamper_ext.py, in the pool's extension) makes the digests read before its swap and
    after differ in that tensor, and the run's exit code 1; the target loaded again from its file
    digests as before (the digest is of the weights, not of the run)."""
    import shutil

    from ckpttools.engines.swap import target_digest
    from ckpttools.io.net import NetClient
    from ckpttools.measuring.compare import CompareReport, judge_target

    from .tamper_ext import MARKER

    tp, ds, _ = known
    bad = tmp_path / "vllm-id-tampering"
    shutil.copytree(ds["id"], bad)
    (bad / MARKER).write_text("")
    srv = vllm_pool.get("llama", *vllm_pool.pair("llama")[::2])
    srv.load_target(tp)
    with NetClient(retries=0) as net:
        before = target_digest(net, srv.url, srv.spec)
        srv.swap(ds["swap"])
        again = target_digest(net, srv.url, srv.spec)
        srv.swap(bad)
        after = target_digest(net, srv.url, srv.spec)
        srv.load_target(tp)  # the pool's server gets its target back from the file
        restored = target_digest(net, srv.url, srv.spec)
    assert judge_target(before, again)[0] is True  # an honest swap: the same digest
    unchanged, words, compared = judge_target(before, after)
    print("tampered:", words)
    assert unchanged is False and compared is not None and compared["changed"] == ["model.embed_tokens.weight"]
    rep = CompareReport("vllm", str(tp), None, target_unchanged=unchanged, target_compared=compared)
    err = rep.error()
    assert rep.exit_code == 1 and err is not None and "model.embed_tokens.weight" in str(err)
    assert judge_target(before, restored)[0] is True
