"""The PyTorch probe (verify --engine torch) against a slow reference and known figures."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ckpttools.demo.tiny import build_known_pair, known_prompts  # noqa: E402
from ckpttools.measuring.probe import TorchSpeculator, _rms, verify_torch  # noqa: E402

STEPS = 3


def reference_generate(spec: TorchSpeculator, prompt: list[int], max_new: int) -> dict:
    """The same speculation with no cache anywhere: the target re-runs the whole sequence with
    use_cache=False; the drafter is recomputed over its whole input sequence each step with
    full-sequence attention (SDPA, causal), from its own weights."""
    d, model = spec.drafter, spec.model
    w = d.w

    def target_all(seq):
        out = model(input_ids=torch.tensor([seq]), use_cache=False, output_hidden_states=True)
        aux = torch.cat([out.hidden_states[i + 1][0] for i in d.aux_ids], -1)
        return out.logits[0].argmax(-1).tolist(), aux

    def rope(x, pos):
        f = pos.float()[:, None] * d.inv_freq[None]
        emb = torch.cat([f, f], -1)
        h = d.hd // 2
        return (
            x.float() * emb.cos()[:, None] + torch.cat([-x[..., h:], x[..., :h]], -1).float() * emb.sin()[:, None]
        ).to(x.dtype)

    def drafter_all(tokens, hidden_in):
        """hidden_in[i]: a 3H aux row (goes through fc) or an H row (the drafter's own)."""
        hs = torch.stack([h @ w["fc.weight"].T if h.shape[-1] != d.H else h for h in hidden_in])
        T = len(tokens)
        pos = torch.arange(T)
        e = d.embed[torch.tensor(tokens)]
        x = torch.cat(
            [_rms(e, w["layers.0.input_layernorm.weight"], d.eps), _rms(hs, w["layers.0.hidden_norm.weight"], d.eps)],
            -1,
        )
        p = "layers.0.self_attn."
        q = rope((x @ w[p + "q_proj.weight"].T).view(T, d.heads, d.hd), pos)
        k = rope((x @ w[p + "k_proj.weight"].T).view(T, d.kv, d.hd), pos)
        v = (x @ w[p + "v_proj.weight"].T).view(T, d.kv, d.hd)
        rep = d.heads // d.kv
        a = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1).float(),
            k.repeat_interleave(rep, 1).transpose(0, 1).float(),
            v.repeat_interleave(rep, 1).transpose(0, 1).float(),
            is_causal=True,
        )
        res = a.transpose(0, 1).reshape(T, -1).to(x.dtype) @ w[p + "o_proj.weight"].T + hs
        y = _rms(res, w["layers.0.post_attention_layernorm.weight"], d.eps)
        m = "layers.0.mlp."
        out = (
            torch.nn.functional.silu((y @ w[m + "gate_proj.weight"].T).float())
            * (y @ w[m + "up_proj.weight"].T).float()
        ).to(y.dtype) @ w[m + "down_proj.weight"].T
        pre = out + res
        logits = _rms(pre, w["norm.weight"], d.eps).float() @ w["lm_head.weight"].float().T
        return d.hot[logits.argmax(-1)], pre

    with torch.no_grad():
        seq = list(prompt)
        preds, aux = target_all(seq)
        seq.append(preds[-1])
        produced = [preds[-1]]
        # committed drafter inputs: (token x_{t+1}, target aux at t) for t = 0 .. len-2
        c_tok, c_hid = seq[1:], [aux[t] for t in range(len(prompt))]
        steps = accepted = 0
        while len(produced) < max_new:
            toks, hid = list(c_tok), list(c_hid)
            drafts = []
            for _ in range(STEPS):
                ids, pre = drafter_all(toks, hid)
                drafts.append(int(ids[-1]))
                toks.append(drafts[-1])
                hid.append(pre[-1])
            y, aux = target_all(seq + drafts)
            base = len(seq) - 1
            a = 0
            while a < STEPS and drafts[a] == y[base + a]:
                a += 1
            new = drafts[:a] + [y[base + a]]
            steps += 1
            accepted += a
            c_tok += new
            c_hid += [aux[base + j] for j in range(a + 1)]
            seq += new
            produced += new
    return {"tokens": produced[:max_new], "verify_steps": steps, "accepted": accepted}


def story():
    from ckpttools.demo.story import story_dir

    p = story_dir()
    if not (p / "drafter" / "model.safetensors").is_file():
        pytest.skip("the story pair is not built (examples/build_story_pair.py)")
    return p


@pytest.mark.parametrize("target", ["target-a", "target-b"])
def test_probe_matches_the_slow_reference(target):
    s = story()
    spec = TorchSpeculator(s / target, s / "drafter", STEPS, dtype="float32")
    prompts = [json.loads(line)["input_ids"] for line in (s / "prompts.jsonl").read_text().splitlines()][:4]
    total = 0
    for p in prompts:
        fast = spec.generate(p, 40)
        slow = reference_generate(spec, p, 40)
        assert fast["tokens"] == slow["tokens"]
        assert (fast["verify_steps"], fast["accepted"]) == (slow["verify_steps"], slow["accepted"])
        total += fast["accepted"]
    assert total > 0  # the accepting path was exercised


def test_known_pairs_give_exact_figures(tmp_path):
    pf = tmp_path / "p.jsonl"
    pf.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(4)))
    expected = {("repeat", "id"): 4.0, ("swap", "id"): 2.0, ("repeat", "swap"): 1.0}
    for (t, d), want in expected.items():
        tp, dp = build_known_pair(tmp_path / f"{t}-{d}", target=t, drafter=d)
        r = verify_torch(tp, dp, steps=STEPS, prompts=str(pf), num_prompts=4, max_new_tokens=32)
        assert r.accept_length == want and r.engine == "torch"
        assert r.per_position_acceptance == {4.0: [1.0] * 3, 2.0: [1.0, 0.0, 0.0], 1.0: [0.0] * 3}[want]


def test_vllm_layout_drafter_gives_the_same_figures(tmp_path):
    from ckpttools.ops.export import export

    pf = tmp_path / "p.jsonl"
    pf.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(2)))
    tp, dp = build_known_pair(tmp_path, target="swap", drafter="id")
    vp = export(dp, tmp_path / "vllm", format="vllm", target=tp).output
    a = verify_torch(tp, dp, prompts=str(pf), num_prompts=2, max_new_tokens=24)
    b = verify_torch(tp, vp, prompts=str(pf), num_prompts=2, max_new_tokens=24)
    assert a.accept_length == b.accept_length == 2.0  # aux ids read in each layout's convention
    assert a.server["aux_layer_ids"] == [1, 3, 5] and b.server["aux_layer_ids"] == [2, 4, 6]
    assert a.server["aux_boundaries"] == b.server["aux_boundaries"] == [2, 4, 6]  # the same target layers


def test_text_prompts_need_a_tokenizer(tmp_path):
    from ckpttools.errors import CkptError

    tp, dp = build_known_pair(tmp_path)
    with pytest.raises(CkptError, match="text prompts need a tokenizer"):
        verify_torch(tp, dp, prompts="builtin", num_prompts=1, max_new_tokens=4)


@pytest.mark.parametrize(
    "arch, trained, exported_ids, wrong",
    [
        ("llama", (3, 5, 7), [2, 4, 6], (3, 4, 6)),  # Llama rule: id + 1; a copied first vLLM id is one off
        ("deepseek", (3, 5, 7), [3, 5, 7], (2, 4, 6)),  # first id not 1: as they are; Llama-rule ids one off
        ("gpt_oss", (3, 5, 8), [3, 5, 8], (3, 5, 7)),  # largest id = L: as they are; clamped ids one off
    ],
)
def test_a_capture_one_layer_off_is_visible(tmp_path, arch, trained, exported_ids, wrong):
    """flip_boundary=3: only boundary 3 carries what the drafter reads, so export's ids for the
    target's class give every draft and a mis-converted copy none (the same pairs run on SGLang
    in tests/test_gpu_sglang.py)."""
    from ckpttools.ops.export import export

    pf = tmp_path / "p.jsonl"
    pf.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(2)))
    tp, src = build_known_pair(
        tmp_path, target_arch=arch, flip_boundary=3, aux_layer_ids=trained, drafter_flavor="vllm"
    )
    out = tmp_path / "sglang"
    export(src, out, format="sglang", target=tp)
    assert (
        json.loads((out / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        == exported_ids
    )
    _, bad = build_known_pair(tmp_path, target_arch=arch, flip_boundary=3, aux_layer_ids=wrong, force=True)
    got = {
        name: verify_torch(tp, d, steps=STEPS, prompts=str(pf), num_prompts=2, max_new_tokens=16)
        for name, d in [("source", src), ("exported", out), ("wrong", bad)]
    }
    assert {k: r.accept_length for k, r in got.items()} == {"source": 4.0, "exported": 4.0, "wrong": 1.0}
    assert got["exported"].server["aux_boundaries"] == list(trained)
    assert got["wrong"].server["aux_boundaries"] != list(trained)


_YARN = {
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 256,
    "mscale": 1.0,
    "mscale_all_dim": 0.5,
    "beta_fast": 32,
    "beta_slow": 1,
}


@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("yarn", [None, _YARN], ids=["plain-rope", "yarn"])
def test_mla_attention_equals_transformers_deepseek_v3(interleave, yarn):
    """The probe's MLA attention against transformers' own DeepseekV3Attention (random weights,
    positions past the yarn's original context), in one pass and token by token over the cache."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention, DeepseekV3RotaryEmbedding

    from ckpttools.measuring.probe import MlaAttention

    torch.manual_seed(0)
    cfg = {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "q_lora_rank": 32,
        "kv_lora_rank": 256,
        "qk_rope_head_dim": 32,
        "qk_nope_head_dim": 16,
        "v_head_dim": 32,
        "max_position_embeddings": 1024,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-6,
        "rope_interleave": interleave,
    }
    rp = {"rope_type": "default", "rope_theta": 10000.0}
    if yarn:
        rp = {"rope_type": "yarn", "rope_theta": 10000.0, **{k: v for k, v in yarn.items() if k != "type"}}
    hf = DeepseekV3Config(**cfg, rope_parameters=rp)
    hf._attn_implementation = "eager"
    attn, rot = DeepseekV3Attention(hf, 0).eval(), DeepseekV3RotaryEmbedding(hf)
    with torch.no_grad():
        for n, p in attn.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if "norm" in n else 0.2) + (1.0 if "norm" in n else 0.0))
        T = 12
        x, pos = torch.randn(1, T, 64), torch.arange(300, 300 + T)
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        ref = attn(x, rot(x, pos[None]), mask)[0][0]
        w = {f"a.{n}": p.detach() for n, p in attn.named_parameters()}
        mla = MlaAttention({**cfg, "rope_scaling": yarn})
        full, _ = mla(w, "a.", x[0], pos, (None, None))
        outs, cache = [], (None, None)
        for lo, hi in [(0, 5), *((t, t + 1) for t in range(5, T))]:
            o, cache = mla(w, "a.", x[0, lo:hi], pos[lo:hi], cache)
            outs.append(o)
    assert torch.allclose(full, ref, atol=1e-4) and torch.allclose(torch.cat(outs), ref, atol=1e-4)
    assert ref.abs().max() > 1.0  # the attention is not a trivial zero


@pytest.mark.parametrize("target_arch", ["llama", "deepseek"])
def test_mla_drafter_known_pairs_in_the_probe(tmp_path, target_arch):
    pf = tmp_path / "p.jsonl"
    pf.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(3)))
    for (t, d), want in {("repeat", "id"): 4.0, ("swap", "id"): 2.0, ("repeat", "swap"): 1.0}.items():
        tp, dp = build_known_pair(
            tmp_path / f"{t}-{d}", target=t, drafter=d, drafter_flavor="mla", target_arch=target_arch
        )
        spec = TorchSpeculator(tp, dp, steps=STEPS)
        assert spec.drafter.mla is not None  # the MLA attention ran, not the Llama one
        r = verify_torch(tp, dp, steps=STEPS, prompts=str(pf), num_prompts=3, max_new_tokens=24)
        assert r.accept_length == want


def test_a_two_layer_drafter_gives_the_same_figures_in_either_engines_layout(tmp_path):
    """The probe reads layers 1 and up with the norm of the layout's engine; export trades the
    names, so a drafter with live attention and distinct later-layer norms scores the same in
    SGLang's layout and, exported, in vLLM's."""
    from ckpttools.ops.export import export

    from .helpers import with_live_attention

    tp, dp = build_known_pair(tmp_path, target="repeat", drafter="id", drafter_layers=2)
    with_live_attention(dp)
    pf = tmp_path / "p.jsonl"
    pf.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(4, seed=3, length=24)))
    vp = export(dp, tmp_path / "vllm", format="vllm", target=tp).output
    a = verify_torch(tp, dp, steps=STEPS, prompts=str(pf), num_prompts=4, max_new_tokens=32)
    b = verify_torch(tp, vp, steps=STEPS, prompts=str(pf), num_prompts=4, max_new_tokens=32)
    assert 1.0 < a.accept_length < STEPS + 1.0  # the attention and the later layer matter
    assert [r["accept_length"] for r in a.requests] == [r["accept_length"] for r in b.requests]
