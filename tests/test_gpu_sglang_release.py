"""SGLang 0.5.17 on the GPU machine (marker gpu): the load plan against the engine's real
parameters, and server logs recorded for ``ckpt logs`` (healthy, nothing accepted, refused at
start, died on its first request), each beside the meta_info of the same run."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from ckpttools.demo.tiny import build_drafter, build_known_pair, known_prompts
from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port
from ckpttools.engines.releases import SGLANG_0_5_17
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.measuring.logs import read_logs
from ckpttools.measuring.verify import verify

from .helpers import compare_plan
from .test_gpu_sglang import LOGS, SGL_ARGS

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[1]


def _spec(target: Path, drafter: Path, log: str, *extra: str, env: dict | None = None) -> LaunchSpec:
    LOGS.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(
        "sglang",
        str(target),
        str(drafter),
        port=free_port(),
        steps=3,
        engine_args=[*SGL_ARGS, *extra],
        python=sys.executable,
        log_path=str(LOGS / log),
        ready_timeout=400,
        env={"PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}", **(env or {})},
    )


def _prompts(tmp: Path) -> str:
    p = tmp / "prompts.jsonl"
    p.write_text("\n".join(json.dumps({"input_ids": x}) for x in known_prompts(6)))
    return str(p)


def _dump(url: str) -> None:
    """Ask the running server to call tests.gpu_dump.dump_params on its models (no tensors)."""
    import httpx
    from sglang.srt.utils import MultiprocessingSerializer
    from sglang.srt.utils.patch_torch import monkey_patch_torch_reductions

    monkey_patch_torch_reductions()
    payload = MultiprocessingSerializer.serialize([], output_str=True)
    body = {"serialized_named_tensors": [payload], "load_format": "tests.gpu_dump.dump_params", "flush_cache": True}
    r = httpx.post(url + "/update_weights_from_tensor", json=body, timeout=120)
    print("update_weights_from_tensor:", r.status_code, r.text[:200])


def _mislabelled(root: Path) -> tuple[Path, Path]:
    """A 2-layer SGLang-layout drafter whose layer 1 kept vLLM's norm name (input_layernorm)."""
    tp, dp = build_known_pair(root, drafter_layers=2)
    from ckpttools.demo.tiny import write_tensors

    with open_checkpoint(dp) as ck:
        ts = {n: ck.read(n).copy() for n in ck.tensors}
        cfg = dict(ck.config or {})
    ts["layers.1.input_layernorm.weight"] = ts.pop("layers.1.hidden_norm.weight") * 0 + 0.5
    bad = root / "mislabelled"
    write_tensors(bad, ts, cfg)
    return tp, bad


def test_load_plan_equals_sglang_parameters_and_logs_are_recorded(tmp_path):
    prompts = _prompts(tmp_path)
    cases = {
        "healthy": build_known_pair(tmp_path / "h"),
        "eagle31": build_known_pair(tmp_path / "e31", fc_norm=True, norm_output=True),
        "mislabelled": _mislabelled(tmp_path / "ml"),
    }
    report = {}
    for name, (tp, dp) in cases.items():
        dump = tmp_path / f"{name}.dump.json"
        extra = ["--custom-weight-loader", "tests.gpu_dump.dump_params", "--log-requests", "--log-requests-level", "2"]
        extra += ["--log-requests-format", "json", "--decode-log-interval", "8"]
        spec = _spec(tp, dp, f"sglang-{name}.log", *extra, env={"CKPT_DUMP": str(dump)})
        with RunningServer(spec) as srv:
            srv.wait_ready(None)
            rep = verify(spec.url, engine="sglang", prompts=prompts, num_prompts=6, max_new_tokens=32, ignore_eos=True)
            _dump(spec.url)
            time.sleep(1)
        logs = read_logs([spec.log_path])
        diff = compare_plan(dp, json.loads(dump.read_text()), SGLANG_0_5_17) if dump.is_file() else ["no dump"]
        report[name] = {
            "verify": rep.accept_length,
            "logs": logs.accept_length,
            "exact": logs.exact,
            "plan_vs_engine": diff,
        }
        print(
            f"\n{name}: verify {rep.accept_length} | ckpt logs {logs.accept_length} (exact {logs.exact}) | "
            f"plan vs engine: {diff or 'equal'}"
        )
    print(json.dumps(report, indent=1))
    assert report["healthy"]["verify"] == 4.0 and report["healthy"]["logs"] == pytest.approx(4.0)
    assert not report["healthy"]["plan_vs_engine"] and not report["eagle31"]["plan_vs_engine"]
    assert not report["mislabelled"]["plan_vs_engine"]


def _with_extra_bias(root: Path) -> tuple[Path, Path]:
    """A Llama drafter with a bias SGLang's Llama drafter has no parameter for (dropped without a word)."""
    import numpy as np

    from ckpttools.demo.tiny import write_tensors

    tp, dp = build_known_pair(root)
    with open_checkpoint(dp) as ck:
        ts = {n: ck.read(n).copy() for n in ck.tensors}
        cfg = dict(ck.config or {})
    w = ts["layers.0.self_attn.o_proj.weight"]
    ts["layers.0.self_attn.o_proj.bias"] = np.zeros(w.shape[0], w.dtype)
    write_tensors(root / "extra", ts, cfg)
    return tp, root / "extra"


_FAMILIES = {
    "two-layer": lambda root: build_known_pair(root, drafter_layers=2),
    "mla": lambda root: build_known_pair(root, target_arch="deepseek", drafter_flavor="mla"),
    "qwen3": lambda root: build_known_pair(root, qk_norm=True),
    "extra-tensor": _with_extra_bias,
}


@pytest.mark.parametrize("family", list(_FAMILIES))
def test_load_plan_equals_sglang_parameters_per_family(tmp_path, family):
    """For each other drafter family, SGLang 0.5.17's real draft-model parameters after load_weights
    equal the load plan of the 0.5.17 table (and the 0.5.23 table, whose loaders are the same code)."""
    from ckpttools.engines.load_plan import load_plan
    from ckpttools.engines.releases import SGLANG_0_5_23

    tp, dp = _FAMILIES[family](tmp_path / family)
    dump = tmp_path / f"{family}.dump.json"
    extra = ["--custom-weight-loader", "tests.gpu_dump.dump_params"]
    spec = _spec(tp, dp, f"sglang-plan-{family}.log", *extra, env={"CKPT_DUMP": str(dump)})
    with RunningServer(spec) as srv:
        srv.wait_ready(None)
        _dump(spec.url)
        time.sleep(1)
    state = json.loads(dump.read_text()) if dump.is_file() else None
    diff = compare_plan(dp, state, SGLANG_0_5_17) if state else ["no dump"]
    with open_checkpoint(dp) as ck:
        heads = {n: (list(e.shape), e.dtype) for n, e in ck.tensors.items()}
        cfg = dict(ck.config or {})
    old, new = (load_plan(heads, cfg, r).to_dict() for r in (SGLANG_0_5_17, SGLANG_0_5_23))
    dropped = [t["name"] for t in old["tensors"] if t["fate"] == "dropped"]
    print(
        f"\n{family}: SGLang built {state['class'] if state else None} with "
        f"{len(state['params']) if state else 0} parameters; dropped per the plan: {dropped}; "
        f"plan vs engine: {diff or 'equal'}"
    )
    assert not diff
    assert old["tensors"] == new["tensors"] and old["params"] == new["params"]
    if family in ("qwen3", "extra-tensor"):
        assert dropped, "the plan names the tensor SGLang drops"


def test_logs_of_servers_that_accept_nothing_refuse_at_start_or_die_on_the_first_request(tmp_path):
    prompts = _prompts(tmp_path)
    # nothing accepted: the swapping drafter behind the repeat target (1.0)
    tp, dp = build_known_pair(tmp_path / "none", drafter="swap")
    spec = _spec(
        tp,
        dp,
        "sglang-none-accepted.log",
        "--log-requests",
        "--log-requests-level",
        "2",
        "--log-requests-format",
        "json",
        "--decode-log-interval",
        "8",
    )
    with RunningServer(spec) as srv:
        srv.wait_ready(None)
        rep = verify(spec.url, engine="sglang", prompts=prompts, num_prompts=6, max_new_tokens=32, ignore_eos=True)
    lr = read_logs([spec.log_path])
    print(f"\nnone accepted: verify {rep.accept_length} | ckpt logs {lr.accept_length} (exact {lr.exact})")
    # refused at start: the drafter's context (2048) below the target's (8192), no override
    t2, d2 = build_known_pair(tmp_path / "ctx")
    cfg = json.loads((t2 / "config.json").read_text())
    cfg["max_position_embeddings"] = 8192
    (t2 / "config.json").write_text(json.dumps(cfg))
    dcfg = json.loads((d2 / "config.json").read_text())
    dcfg["max_position_embeddings"] = 2048
    (d2 / "config.json").write_text(json.dumps(dcfg))
    spec = _spec(t2, d2, "sglang-context-refused.log")
    with RunningServer(spec) as srv:
        with pytest.raises(Exception) as e:
            srv.wait_ready(None)
    print("context refused:", str(e.value)[:300])
    lr_ctx = read_logs([spec.log_path])
    # dies on its first request: aux ids past the target's layers
    t3, _ = build_known_pair(tmp_path / "aux")
    d3 = build_drafter(tmp_path / "aux" / "bad", vocab_size=256, draft_vocab_size=128, aux_layer_ids=(1, 3, 20))
    spec = _spec(t3, d3, "sglang-died-first-request.log")
    with RunningServer(spec) as srv:
        try:  # SGLang's own warmup request is its first: seen dying there (fc's shape), before ready
            srv.wait_ready(None)
            verify(spec.url, engine="sglang", prompts=prompts, num_prompts=1, max_new_tokens=8)
        except Exception as ex:  # noqa: BLE001 - the server dies: any error is the point
            print("first request:", str(ex)[:300])
        time.sleep(3)
    lr_aux = read_logs([spec.log_path])
    for n, r in (("context", lr_ctx), ("aux", lr_aux)):
        print(
            n, [(ev["kind"], ev["text"][:120]) for ev in r.to_dict()["events"] if ev["kind"] in ("error", "exception")]
        )
    assert rep.accept_length == 1.0 and lr.accept_length == pytest.approx(1.0, abs=0.02)
    assert any(ev["kind"] == "error" for ev in lr_ctx.to_dict()["events"])
    assert any(ev["kind"] == "error" for ev in lr_aux.to_dict()["events"])
