"""The real SGLang 0.5.17 on the GPU machine (marker gpu; skipped unless CKPT_GPU_TESTS=1).

Run there with the bundle from shared/device/sglang unpacked on PYTHONPATH (README).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_known_pair, known_prompts
from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port
from ckpttools.ops.export import export
from ckpttools.ops.validate import validate

from .helpers import with_live_attention

pytestmark = pytest.mark.gpu
STEPS = 3
SGL_ARGS = [
    "--attention-backend=triton",
    "--sampling-backend=pytorch",
    "--grammar-backend=none",
    "--disable-cuda-graph",
    "--skip-tokenizer-init",
    "--mem-fraction-static=0.3",
]
#: kept after the session: the system's temporary directory, not the session's (tests/conftest.py: _session_tmp)
LOGS = Path(
    os.environ.get("CKPT_GPU_LOGS")
    or Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()) / "ckpt-gpu-logs"
)
EXPECTED = {("repeat", "id"): STEPS + 1.0, ("swap", "id"): 2.0, ("repeat", "swap"): 1.0}


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    p = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    p.write_text("\n".join(json.dumps({"input_ids": x}) for x in known_prompts(6)))
    return p


def launch_verify(target: Path, drafter: Path, prompts: Path, log: str) -> tuple[int, dict | None, str]:
    LOGS.mkdir(parents=True, exist_ok=True)
    r = CliRunner().invoke(
        cli,
        [
            "verify",
            "--launch",
            "--engine",
            "sglang",
            "--target",
            str(target),
            "--drafter",
            str(drafter),
            "--steps",
            str(STEPS),
            "--prompts",
            str(prompts),
            "--num-prompts",
            "6",
            "--max-new-tokens",
            "32",
            "--ignore-eos",
            "--json",
            "--quiet",
            "--engine-python",
            sys.executable,
            "--log",
            str(LOGS / log),
            "--ready-timeout",
            "400",
            *[f"--engine-arg={a}" for a in SGL_ARGS],
        ],
    )
    print(f"\n--- ckpt verify --launch ({log}): exit {r.exit_code}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    return r.exit_code, (json.loads(r.stdout) if r.exit_code in (0, 1) and r.stdout.strip() else None), r.stderr


def test_export_proven_and_verify_launch_and_host(tmp_path, prompts):
    # the drafter in the official EAGLE layout: LlamaForCausalLM, midlayer., max_position_embeddings 2048
    tp, original = build_known_pair(tmp_path, target="repeat", drafter="id", drafter_flavor="eagle")
    assert json.loads((original / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    exported = Path(export(original, tmp_path / "exported", target=tp).output)
    assert validate(exported, tp).ok
    # 1. ckpt verify --launch on the exported drafter: SGLang's own figures, steps + 1
    code, rep, _ = launch_verify(tp, exported, prompts, "exported-launch.log")
    assert code == 0 and rep is not None
    assert rep["accept_length"] == STEPS + 1.0
    assert all(q["extra"]["server_spec_accept_length"] == STEPS + 1.0 for q in rep["requests"])
    # the decode log line averages over its interval, SGLang's own warmup request included
    # (its token ids lie outside this drafter's vocabulary), so it is only bounded here
    assert rep["log_accept_lens"] and all(1.0 <= x <= STEPS + 1.0 for x in rep["log_accept_lens"])
    assert rep["per_position_acceptance"] == [1.0, 1.0, 1.0]
    print(
        f"exported drafter: accept length {rep['accept_length']}, server avg {rep['server_avg_accept_length']}, "
        f"log {rep['log_accept_lens']}"
    )
    # 2. the same figures from an already running server, with --host
    spec = LaunchSpec(
        "sglang",
        str(tp),
        str(exported),
        port=free_port(),
        steps=STEPS,
        engine_args=SGL_ARGS,
        python=sys.executable,
        log_path=str(LOGS / "exported-host.log"),
        ready_timeout=400,
    )
    import httpx

    with RunningServer(spec) as srv, httpx.Client() as c:
        srv.wait_ready(c)
        r = CliRunner().invoke(
            cli,
            [
                "verify",
                "--host",
                spec.url,
                "--prompts",
                str(prompts),
                "--num-prompts",
                "6",
                "--max-new-tokens",
                "32",
                "--ignore-eos",
                "--json",
            ],
        )
    print(f"--- ckpt verify --host: exit {r.exit_code}\n{r.stdout[-1500:]}")
    assert r.exit_code == 0
    host = json.loads(r.stdout)
    assert host["engine"] == "sglang" and host["accept_length"] == rep["accept_length"]
    assert host["per_position_acceptance"] == rep["per_position_acceptance"]
    # SGLang's lifetime avg_spec_accept_length includes its warmup request: the same in both runs
    assert host["server_avg_accept_length"] == rep["server_avg_accept_length"]
    # 3. the unexported original fails to load, or serves at 1.00
    code, orig, err = launch_verify(tp, original, prompts, "original-launch.log")
    print(f"unexported original: exit {code}; accept length {orig and orig['accept_length']}")
    assert (code == 2 and "before it was ready" in err) or (orig is not None and orig["accept_length"] <= 1.05)


@pytest.mark.parametrize("pair", list(EXPECTED), ids=lambda p: f"{p[0]}-target-{p[1]}-drafter")
def test_torch_probe_matches_sglang(pair, tmp_path, prompts):
    from ckpttools.measuring.probe import verify_torch

    tp, dp = build_known_pair(tmp_path, target=pair[0], drafter=pair[1])
    code, rep, _ = launch_verify(tp, dp, prompts, f"{pair[0]}-{pair[1]}.log")
    assert code == 0 and rep is not None
    torch_rep = verify_torch(tp, dp, steps=STEPS, prompts=str(prompts), num_prompts=6, max_new_tokens=32, device="cuda")
    print(
        f"{pair}: SGLang {rep['accept_length']} per position {rep['per_position_acceptance']}; "
        f"torch {torch_rep.accept_length} per position {torch_rep.per_position_acceptance}"
    )
    assert rep["accept_length"] == EXPECTED[pair] == torch_rep.accept_length
    assert rep["per_position_acceptance"] == torch_rep.per_position_acceptance


#: the drafter families of issue 14 that a Llama target can carry: EAGLE-3.1 options with two aux
#: states, and an MLA drafter (Eagle3DeepseekV2ForCausalLM, SGLang's kimi_k25_eagle3.py)
FAMILIES = {
    "eagle31": {"aux_layer_ids": (1, 3), "fc_norm": True, "norm_output": True},
    "mla": {"drafter_flavor": "mla"},
    # a tiny DeepSeek-V3 target (MLA attention): an MLA drafter, and a Llama-layer drafter whose
    # first aux id is not 1, which SGLang's DeepSeek rule reads as it is (boundaries [2, 4, 6])
    "deepseek-mla": {"target_arch": "deepseek", "drafter_flavor": "mla"},
    "deepseek-ids246": {"target_arch": "deepseek", "aux_layer_ids": (2, 4, 6)},
}


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("pair", list(EXPECTED), ids=lambda p: f"{p[0]}-target-{p[1]}-drafter")
def test_drafter_families_give_the_known_acceptance(family, pair, tmp_path, prompts):
    opts = dict(FAMILIES[family])
    flavor = str(opts.pop("drafter_flavor", "sglang"))
    arch = str(opts.pop("target_arch", "llama"))
    aux = tuple(opts.pop("aux_layer_ids", (1, 3, 5)))  # type: ignore[arg-type]
    tp, dp = build_known_pair(
        tmp_path, target=pair[0], drafter=pair[1], drafter_flavor=flavor, aux_layer_ids=aux, target_arch=arch, **opts
    )
    assert validate(dp, tp).ok, [f.message for f in validate(dp, tp).errors]
    code, rep, _ = launch_verify(tp, dp, prompts, f"{family}-{pair[0]}-{pair[1]}.log")
    assert code == 0 and rep is not None
    print(f"{family} {pair}: SGLang {rep['accept_length']} per position {rep['per_position_acceptance']}")
    assert rep["accept_length"] == EXPECTED[pair]
    from ckpttools.measuring.probe import verify_torch

    t = verify_torch(tp, dp, steps=STEPS, prompts=str(prompts), num_prompts=6, max_new_tokens=32, device="cuda")
    print(f"{family} {pair}: torch {t.accept_length} per position {t.per_position_acceptance}")
    assert t.accept_length == rep["accept_length"]
    assert t.per_position_acceptance == rep["per_position_acceptance"]


def test_the_probes_mla_attention_equals_sglang_on_a_drafter_whose_attention_matters(tmp_path):
    """As the vLLM test of the same name: an MLA drafter with random attention behind the repeat
    DeepSeek-V3 target (4.0 without attention); SGLang's pooled figure against the probe's."""
    from ckpttools.measuring.probe import verify_torch

    tp, dp = build_known_pair(tmp_path, target="repeat", drafter="id", target_arch="deepseek", drafter_flavor="mla")
    with_live_attention(Path(dp))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(6, seed=3, length=24)))
    code, rep, _ = launch_verify(tp, dp, prompts, "mla-live-attention.log")
    assert code in (0, 1) and rep is not None
    t = verify_torch(tp, dp, steps=STEPS, prompts=str(prompts), num_prompts=6, max_new_tokens=32, device="cuda")
    print(
        f"live MLA attention: SGLang {rep['accept_length']:.4f} per request "
        f"{[round(r['accept_length'], 3) for r in rep['requests']]}; torch {t.accept_length:.4f} per request "
        f"{[round(r['accept_length'], 3) for r in t.requests]}"
    )
    assert 1.2 < rep["accept_length"] < 3.8
    assert abs(t.accept_length - rep["accept_length"]) <= 0.1


#: pairs where a capture one layer off is visible (build_known_pair's flip_boundary): target
#: layers 2 and 3 negate the residual stream, so only boundary 3 carries what the drafter reads.
#: Each drafter is built in vLLM's layout (ids = boundaries, as it was "trained"), exported by
#: ckpt export for SGLang with the target, and set against a mis-converted copy.
ALIGNMENT = {
    # DeepSeek rule: first id not 1, so ids as they are; a Llama-rule conversion writes ids - 1
    "deepseek-first-id-not-1": ("deepseek", (3, 5, 7), (2, 4, 6)),
    # gpt-oss rule: the largest id equals L = 8, so ids as they are; a tool that clamps to
    # L - 1 under the Llama rule writes [3, 5, 7], which SGLang then reads as [4, 6, 8]
    "gpt-oss-last-boundary": ("gpt_oss", (3, 5, 8), (3, 5, 7)),
    # gpt-oss rule without the last boundary: id + 1, so export writes [2, 4, 6]
    "gpt-oss-plus1": ("gpt_oss", (3, 5, 7), None),
}


@pytest.mark.parametrize("case", list(ALIGNMENT))
def test_exported_aux_ids_get_the_acceptance_and_misconverted_ones_do_not(case, tmp_path, prompts):
    from ckpttools.measuring.probe import verify_torch

    arch, trained, wrong = ALIGNMENT[case]
    tp, src = build_known_pair(
        tmp_path, target_arch=arch, flip_boundary=3, aux_layer_ids=trained, drafter_flavor="vllm"
    )
    out = tmp_path / "exported"
    export(src, out, format="sglang", target=tp)
    ids = json.loads((out / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    runs = [("exported", out, STEPS + 1.0)]
    if wrong is not None:
        _, bad = build_known_pair(
            tmp_path, target_arch=arch, flip_boundary=3, aux_layer_ids=wrong, drafter_flavor="sglang", force=True
        )
        runs.append(("mis-converted", bad, 1.0))
    for label, d, want in runs:
        code, rep, _ = launch_verify(tp, d, prompts, f"align-{case}-{label}.log")
        assert code in (0, 1) and rep is not None
        t = verify_torch(tp, d, steps=STEPS, prompts=str(prompts), num_prompts=6, max_new_tokens=32, device="cuda")
        mine = json.loads((d / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        print(
            f"{case} trained on boundaries {list(trained)}, {label} (ids {mine}; export wrote {ids}): "
            f"SGLang {rep['accept_length']}, torch {t.accept_length}, want {want}"
        )
        assert rep["accept_length"] == want == t.accept_length


# ----------------------------------------------------------------------------- issue 15
STORY = Path(__file__).resolve().parents[1] / "ckpttools" / "data" / "story"


def _plot(name: str) -> list[str]:
    """--plot where matplotlib is installed (the device image may lack it: the PNG is then drawn
    from the saved report with ckpttools.measuring.plot afterwards)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return []
    return ["--plot", str(LOGS / name)]


def _verify_cli(args: list[str], name: str) -> tuple[int, dict, str]:
    LOGS.mkdir(parents=True, exist_ok=True)
    out = LOGS / f"{name}.json"
    r = CliRunner().invoke(
        cli,
        [*args, "--quiet", "--engine-python", sys.executable, "--log", str(LOGS / f"{name}.log"), "--ready-timeout",
         "400", "--output", str(out), *[f"--engine-arg={a}" for a in SGL_ARGS]],
    )  # fmt: skip
    print(f"\n--- {name}: exit {r.exit_code}\n{r.stdout[-6000:]}\n{r.stderr[-1500:]}")
    return r.exit_code, json.loads(out.read_text()) if out.is_file() else {}, r.stdout


def test_sweep_on_the_trained_story_pair():
    """steps 1,3 x topk 1,4 on the story pair (target-a and its trained drafter), each against a
    baseline server at the same concurrency; ranked, with the best setting's launch commands."""
    code, rep, text = _verify_cli(
        ["verify", "--launch", "--engine", "sglang", "--target", str(STORY / "target-a"), "--drafter",
         str(STORY / "drafter"), "--prompts", str(STORY / "prompts.jsonl"), "--num-prompts", "12",
         "--max-new-tokens", "64", "--ignore-eos", "--sweep", "steps=1,3;topk=1,4",
         *_plot("story-sweep.png")],
        "story-sweep",
    )  # fmt: skip
    sw = rep["sweep"]
    assert rep["baseline"]["output_tokens_per_s"] > 0, rep["baseline"]
    assert len(sw["settings"]) == 4 and all(e["status"] in ("ok", "stopped early") for e in sw["settings"])
    tps = [sw["settings"][i]["output_tokens_per_s"] for i in sw["ranking"]]
    assert tps == sorted(tps, reverse=True) and sw["best"] is not None
    assert "sglang.launch_server" in sw["launch_commands"]["sglang"] and "best setting" in text


def test_concurrency_8_gives_the_per_request_figures_of_concurrency_1(tmp_path, prompts):
    tp, dp = build_known_pair(tmp_path, target="swap", drafter="id")
    many = tmp_path / "p16.jsonl"
    many.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(16)))
    code, rep, _ = _verify_cli(
        ["verify", "--launch", "--engine", "sglang", "--target", str(tp), "--drafter", str(dp), "--steps", str(STEPS),
         "--prompts", str(many), "--num-prompts", "16", "--max-new-tokens", "32", "--ignore-eos", "--concurrency", "1,8"],
        "concurrency",
    )  # fmt: skip
    c1, c8 = rep["concurrency_levels"]
    assert code == 0 and c8["figures"] == c1["figures"] == "per-request"
    assert c1["accept_length"] == c8["accept_length"] == 2.0
    assert c1["per_position_acceptance"] == c8["per_position_acceptance"] == [1.0, 0.0, 0.0]


def test_context_lengths_on_the_story_pair_within_and_past_the_drafters_context(tmp_path, monkeypatch):
    """The story drafter has max_position_embeddings 2048; a copy of target-a whose config allows
    8192 is measured at 256, 1024 and 4096 tokens. SGLang serves the pair past the drafter's
    length only with SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (verify's pre-check allows it then)."""
    import shutil

    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    target = tmp_path / "target-a-8k"
    shutil.copytree(STORY / "target-a", target)
    cfg = json.loads((target / "config.json").read_text())
    cfg["max_position_embeddings"] = 8192
    (target / "config.json").write_text(json.dumps(cfg, indent=2))
    code, rep, _ = _verify_cli(
        ["verify", "--launch", "--engine", "sglang", "--target", str(target), "--drafter", str(STORY / "drafter"),
         "--prompts", str(STORY / "prompts.jsonl"), "--num-prompts", "12", "--max-new-tokens", "64", "--ignore-eos",
         "--context-lengths", "256,1024,4096", *_plot("story-context.png")],
        "story-context",
    )  # fmt: skip
    c = rep["context"]
    assert c["drafter_max_position_embeddings"] == 2048 and c["target_context"] == 8192
    bins = {b["tokens"]: b for b in c["bins"]}
    assert not bins[1024]["past_drafter_context"] and bins[4096]["past_drafter_context"]
    assert all(b["accept_length"] is not None for b in bins.values())
    print({n: (b["accept_length"], b["accept_length_ci95"]) for n, b in bins.items()})


def test_launch_with_tensor_parallel_2(tmp_path, prompts):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here; --tp 2 runs on the two-GPU kind")
    tp, dp = build_known_pair(tmp_path, target="repeat", drafter="id")
    code, rep, _ = _verify_cli(
        ["verify", "--launch", "--engine", "sglang", "--target", str(tp), "--drafter", str(dp), "--steps", str(STEPS),
         "--prompts", str(prompts), "--num-prompts", "6", "--max-new-tokens", "32", "--ignore-eos", "--tp", "2"],
        "tp2",
    )  # fmt: skip
    assert code == 0 and rep["accept_length"] == STEPS + 1.0 and rep["server"]
