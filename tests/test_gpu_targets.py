"""SGLang 0.5.17 on the H200 (marker gpu; skipped unless CKPT_GPU_TESTS=1): the target proven
unchanged on three target classes, a swap that writes the target caught, and the swap's seconds.

One ``ckpt verify --launch`` with three drafters against each target:

- a DeepseekV3 (MLA) target at Kimi-K2.5's text sizes (hidden 7168, 64 heads, q_lora 1536,
  kv_lora 512 + rope 64, vocab 163,840, dense MLP 18,432; 4 layers, 8.1 GiB), built on the GPU as
  a known pair (its layers add nothing and its head is its embedding: it repeats the last token),
  with three Kimi-shaped EAGLE-3 drafters of 2.26 GiB each (hidden 7168, draft vocab 64,000):
  ``id`` (4.0 at steps 3), ``swap`` (its head's rows in pairs swapped: 1.0) and ``perm`` (``id``
  with its 64,000 slots permuted, d2t and head rows together: 4.0 only if the running map is
  replaced too). No Kimi config is in shared/data/real-configs: the sizes are Kimi-K2's published
  text config, written here;
- a Qwen3 target (the tiny known pair's Llama target given Qwen3's class and its per-head q/k norms);
- the tiny known pair's Llama target;

each with ``target_unchanged: true`` and the parameter count its digest covered; then a fourth run
on the Llama target whose second drafter's swap writes one target element (tests/tamper_ext.py's
custom loader, named in the launch flags for this run only): ``target_unchanged: false``, exit 1.
Figures are printed and written to $CKPT_GPU_LOGS/targets-*.json."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli

from .swap_pairs import build
from .tamper_ext import MARKER
from .test_gpu_sglang import SGL_ARGS

pytestmark = pytest.mark.gpu
from .test_gpu_sglang import LOGS  # noqa: E402

TESTS = Path(__file__).resolve().parent
# Kimi-K2's text config (DeepseekV3ForCausalLM), 4 dense layers
H, V, HEADS, Q_LORA, KV_LORA, ROPE, NOPE, VHEAD, INTER, LAYERS = 7168, 163_840, 64, 1536, 512, 64, 128, 128, 18_432, 4
# the Kimi-shaped drafter: draft vocabulary 64,000 (2.26 GiB in all)
D_HEADS, D_KV, D_HD, VD = 64, 8, 128, 64_000


def _save(tensors: dict, out: Path, config: dict) -> Path:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous().cpu() for k, v in tensors.items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return out


def _kimi_pair(root: Path, dev: str = "cuda") -> tuple[Path, dict[str, Path]]:
    """The Kimi-shaped known pair, its weights made on the GPU (seconds, not minutes)."""
    import torch

    from ckpttools.demo.tiny import _deepseek_config

    bf = torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def small(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, device=dev) * 0.02).to(bf)

    emb = (torch.randint(0, 2, (V, H), generator=g, device=dev, dtype=torch.int8) * 2 - 1).to(bf)  # rows of +-1
    t: dict[str, torch.Tensor] = {"model.embed_tokens.weight": emb, "model.norm.weight": torch.ones(H, dtype=bf)}
    t["lm_head.weight"] = emb.clone()  # the head is the embedding: the last token again
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t |= {
            p + "self_attn.q_a_proj.weight": small(Q_LORA, H),
            p + "self_attn.q_a_layernorm.weight": torch.ones(Q_LORA, dtype=bf),
            p + "self_attn.q_b_proj.weight": small(HEADS * (NOPE + ROPE), Q_LORA),
            p + "self_attn.kv_a_proj_with_mqa.weight": small(KV_LORA + ROPE, H),
            p + "self_attn.kv_a_layernorm.weight": torch.ones(KV_LORA, dtype=bf),
            p + "self_attn.kv_b_proj.weight": small(HEADS * (NOPE + VHEAD), KV_LORA),
            p + "self_attn.o_proj.weight": torch.zeros(H, HEADS * VHEAD, dtype=bf),  # attention adds nothing
            p + "mlp.gate_proj.weight": small(INTER, H),
            p + "mlp.up_proj.weight": small(INTER, H),
            p + "mlp.down_proj.weight": torch.zeros(H, INTER, dtype=bf),  # nor does the MLP
            p + "input_layernorm.weight": torch.ones(H, dtype=bf),
            p + "post_attention_layernorm.weight": torch.ones(H, dtype=bf),
        }
    m = {"q_lora_rank": Q_LORA, "kv_lora_rank": KV_LORA, "qk_rope_head_dim": ROPE, "qk_nope_head_dim": NOPE}
    cfg = _deepseek_config(H, LAYERS, HEADS, INTER, V, {**m, "v_head_dim": VHEAD})
    target = _save(t, root / "kimi-target", cfg)
    del t
    common = {
        "fc.weight": torch.cat([torch.eye(H, dtype=bf, device=dev), torch.zeros(H, 2 * H, dtype=bf, device=dev)], 1),
        "layers.0.self_attn.q_proj.weight": small(D_HEADS * D_HD, 2 * H),
        "layers.0.self_attn.k_proj.weight": small(D_KV * D_HD, 2 * H),
        "layers.0.self_attn.v_proj.weight": small(D_KV * D_HD, 2 * H),
        "layers.0.self_attn.o_proj.weight": torch.zeros(H, D_HEADS * D_HD, dtype=bf),
        "layers.0.mlp.gate_proj.weight": small(INTER, H),
        "layers.0.mlp.up_proj.weight": small(INTER, H),
        "layers.0.mlp.down_proj.weight": torch.zeros(H, INTER, dtype=bf),
        "layers.0.post_attention_layernorm.weight": torch.ones(H, dtype=bf),
        "layers.0.input_layernorm.weight": torch.ones(H, dtype=bf),
        "layers.0.hidden_norm.weight": torch.ones(H, dtype=bf),
        "norm.weight": torch.ones(H, dtype=bf),
        "t2d": torch.arange(V) < VD,
    }
    dcfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": INTER,
        "num_attention_heads": D_HEADS,
        "num_key_value_heads": D_KV,
        "head_dim": D_HD,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": cfg["max_position_embeddings"],
        "rope_theta": cfg["rope_theta"],
        "tie_word_embeddings": False,
        "vocab_size": V,
        "draft_vocab_size": VD,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]},
    }
    slots = torch.arange(VD, device=dev)
    perm = torch.randperm(VD, generator=g, device=dev)
    heads = {"id": slots, "swap": slots ^ 1, "perm": perm}  # slot j predicts target token heads[k][j]
    maps = {"id": slots, "swap": slots, "perm": perm}  # and is read as target token maps[k][j]
    drafters = {}
    for k in heads:
        own = {"lm_head.weight": emb[heads[k]], "d2t": (maps[k] - slots).to(torch.int64)}
        drafters[k] = _save({**common, **own}, root / f"kimi-{k}", dcfg)
    return target, drafters


def _qwen3_target(llama: Path, out: Path) -> Path:
    """The tiny Llama target as a Qwen3 one: its class, and per-head q/k norms of ones."""
    import torch
    from safetensors.torch import load_file, save_file

    cfg = json.loads((llama / "config.json").read_text())
    t = load_file(str(llama / "model.safetensors"))
    ones = torch.ones(cfg["head_dim"], dtype=t["model.norm.weight"].dtype)
    for i in range(cfg["num_hidden_layers"]):
        t[f"model.layers.{i}.self_attn.q_norm.weight"] = ones.clone()
        t[f"model.layers.{i}.self_attn.k_norm.weight"] = ones.clone()
    out.mkdir(parents=True, exist_ok=True)
    save_file(t, str(out / "model.safetensors"))
    cfg |= {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False}
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


def _verify(
    target: Path, drafters: list[Path], prompts: Path, name: str, extra: tuple[str, ...] = ()
) -> tuple[int, dict, str, float]:
    LOGS.mkdir(parents=True, exist_ok=True)
    argv = ["verify", "--launch", "--engine", "sglang", "--target", str(target), *map(str, drafters)]
    argv += ["--steps", "3", "--prompts", str(prompts), "--num-prompts", "6", "--max-new-tokens", "48"]
    argv += ["--concurrency", "6", "--ignore-eos", "--json", "--quiet", "--engine-python", sys.executable]
    argv += ["--log", str(LOGS / f"targets-{name}.log"), "--ready-timeout", "400"]
    argv += [f"--engine-arg={a}" for a in (*SGL_ARGS, *extra)]
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, argv)
    seconds = time.monotonic() - t0
    rep = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    (LOGS / f"targets-{name}.json").write_text(json.dumps(rep, indent=1))
    print(f"\n=== {name}: exit {r.exit_code}, {seconds:.0f} s, {rep.get('server_starts')} server start(s)")
    print(f"  target_unchanged: {json.dumps(rep.get('target_unchanged'))}; {rep.get('target_check')}")
    print(f"  target_compared: {json.dumps(rep.get('target_compared'))}")
    for e in rep.get("drafters", []):
        sw = e["swap"]
        t = {k: round(v, 3) for k, v in (sw.get("timings") or {}).items()}
        print(f"  {Path(e['drafter']).name}: accept length {e['accept_length']}, {e['placed']}, verdict in "
              f"{e.get('seconds', 0):.2f} s, swap {sw['seconds']:.3f} s of {sw.get('bytes', 0) / 2**30:.2f} GiB {t}")  # fmt: skip
        print(f"    {sw.get('checked') or sw.get('why')}")
    if r.stderr.strip():
        print("  stderr:", r.stderr.strip()[-800:])
    return r.exit_code, rep, r.stderr, seconds


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    t0 = time.monotonic()
    kimi_t, kimi_d = _kimi_pair(root / "kimi")
    tp, ds, prompts = build(root / "tiny", "sglang")
    qwen = _qwen3_target(tp, root / "qwen3-target")
    print(f"\nbuilt the pairs in {time.monotonic() - t0:.1f} s")
    return {"kimi": (kimi_t, kimi_d), "llama": (tp, ds), "qwen3": (qwen, ds), "prompts": prompts}


def _honest(rep: dict, code: int, want: list[float]) -> None:
    assert code == 0, rep
    assert rep["target_unchanged"] is True and rep["target_compared"]["parameters"] > 0, rep["target_check"]
    assert rep["server_starts"] == 1 and [e["placed"] for e in rep["drafters"]] == ["swap"] * len(want)
    assert [e["accept_length"] for e in rep["drafters"]] == want
    for e in rep["drafters"]:
        assert "not compared" not in e["swap"]["checked"] and "equal the file's bytes" in e["swap"]["checked"]


#: which runs (CKPT_GPU_TARGETS, comma-separated; all by default): to spend the device's minutes on
#: the runs a change touches
RUNS = [r for r in os.environ.get("CKPT_GPU_TARGETS", "kimi-mla,kimi-small,qwen3,llama,tampered").split(",") if r]
#: the KV-memory advice (validate's target.draft_kv_memory), as launch_check prints it
KV_ADVICE = "the drafter's KV cache is"


def test_the_target_is_proven_unchanged_on_three_target_classes_and_a_write_is_caught(pairs, monkeypatch):
    from ckpttools.engines.config_rules import context_length

    prompts = pairs["prompts"]
    kt, kd = pairs["kimi"]
    ctx = context_length(json.loads((kt / "config.json").read_text()))[0]
    swaps: list[dict] = []
    verdicts: list[float] = []
    mem = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    print(f"memory before the runs: available {mem['MemAvailable'].strip()}, page cache {mem['Cached'].strip()}")
    if "kimi-mla" in RUNS:
        # a token cap of two full-length requests: the Llama-layer drafter's KV fits; no advice at all
        cap = ("--max-total-tokens", str(2 * ctx))
        code, rep, err, _ = _verify(
            kt, [kd["id"], kd["swap"], kd["perm"]], prompts, "kimi-mla", (f"{cap[0]}={cap[1]}",)
        )
        _kimi_checks(rep, code)
        assert KV_ADVICE not in err and "--max-total-tokens" not in err, err
        swaps = [e["swap"] for e in rep["drafters"]]
        verdicts = [e["seconds"] for e in rep["drafters"][1:]]
        print(f"kimi-mla (--max-total-tokens {2 * ctx}): no KV advice; swaps {[round(s['seconds'], 3) for s in swaps]} s;"
              f" further verdicts {verdicts} s")  # fmt: skip
    if "kimi-small" in RUNS:
        # half of one full-length request: the advice, once, naming the release that runs
        code, rep, err, _ = _verify(kt, [kd["id"]], prompts, "kimi-small", (f"--max-total-tokens={ctx // 2}",))
        assert code == 0 and rep["accept_length"] == 4.0, rep  # one drafter: a report of its own
        said = [line for line in err.splitlines() if KV_ADVICE in line]
        print(f"kimi-small (--max-total-tokens {ctx // 2}): the advice {len(said)} time(s): {said[:1]}")
        assert len(said) == 1 and err.count(KV_ADVICE) == 1, err
        assert f"the --max-total-tokens {ctx // 2:,} given is fewer than one full-length request" in err, err
        assert "sglang 0.5.17" in said[0] and "0.5.23" not in err, said
    _others(pairs, prompts, monkeypatch)
    # the swap seconds and the verdicts, last: the figures are printed above whatever they are
    if swaps:
        assert max(s["seconds"] for s in swaps) <= 1.5, swaps
        assert max(verdicts) <= 5.0, verdicts


def _kimi_checks(rep: dict, code: int) -> None:
    _honest(rep, code, [4.0, 1.0, 4.0])
    assert rep["target_compared"]["target_class"] == "DeepseekV3ForCausalLM"
    assert rep["target_compared"]["bytes"] > 8 << 30
    swaps = [e["swap"] for e in rep["drafters"]]
    assert all(s["bytes"] > 2 << 30 for s in swaps)


def _others(pairs: dict, prompts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("qwen3", "llama"):
        if name not in RUNS:
            continue
        tgt, ds = pairs[name]
        code, rep, _, _ = _verify(tgt, [ds["id"], ds["swap"], ds["perm"]], prompts, name)
        _honest(rep, code, [4.0, 1.0, 4.0])
        assert (
            rep["target_compared"]["target_class"] == {"qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[name]
        )

    # the fourth run: a drafter whose swap writes the target, through a test-only loader
    from ckpttools.engines import swap

    if "tampered" not in RUNS:
        return
    tp, ds = pairs["llama"]
    bad = tp.parent.parent / "sglang-swap-tampering"
    shutil.copytree(ds["swap"], bad)
    (bad / MARKER).write_text("")
    real = swap.swap_route

    def tampering(release):
        r = real(release)
        return r and {**r, "flags": {**r["flags"], "custom-weight-loader": "tamper_ext.sglang_load_drafter"}}

    monkeypatch.setattr(swap, "swap_route", tampering)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(TESTS)) if p))
    code, rep, err, _ = _verify(tp, [ds["id"], bad], prompts, "tampered")
    assert code == 1 and rep["target_unchanged"] is False, (code, rep.get("target_check"), err)
    assert rep["target_compared"]["changed"] == ["model.embed_tokens.weight"]
    assert "the target's weights read back differently after the swaps" in err
