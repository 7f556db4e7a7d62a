"""Build the small trained pair that `ckpt demo` replays (shipped in ckpttools/data/story).

On a 2-core CPU in a few minutes, with torch and transformers:

1. a synthetic corpus from an order-2 Markov source over 512 tokens: the next token is
   one of six successors of the current token (Zipf-like popularity), and which one is
   most likely depends on the class (id mod 4) of the token before: predictable, not trivial;
2. target A: a 4-layer Llama (hidden 128) trained on it;
3. the drafter: an EAGLE-3 head trained against target A's hidden states on target A's
   own greedy continuations, with a 3-step training-time-test loss, over a 256-token
   draft vocabulary built by `ckpt vocab build` from those continuations;
4. mapping M2: `ckpt vocab build` from a different sample of the corpus, which shares
   most tokens with the drafter's mapping but few slots;
5. target B ("K2.5" to A's "K2"): target A trained further on a shifted source (other
   successor rankings and a third of the successor lists redrawn).

    python examples/build_story_pair.py [--out ckpttools/data/story] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

V, VD, H, LAYERS, HEADS, INTER = 512, 256, 128, 4, 4, 256
AUX = [0, 1, 2]  # SGLang's convention: the outputs of layers 0, 1, 2 (each < LAYERS - 1)
SEQ = 64


def make_source(seed: int, shift_from: dict | None = None) -> dict:
    """The Markov source: successors[b] (6 tokens) and a ranking per class of the token before."""
    rng = np.random.default_rng(seed)
    if shift_from is None:
        pop = 1.0 / (np.arange(V) + 8.0) ** 1.1
        order = rng.permutation(np.arange(3, V))  # token ids 0..2 are bos/eos/pad
        weight = np.zeros(V)
        weight[order] = pop[: len(order)]
        weight /= weight.sum()
        succ = np.stack([rng.choice(V, 6, replace=False, p=weight) for _ in range(V)])
        perms = np.stack([rng.permutation(6) for _ in range(4)])
        return {"succ": succ, "perms": perms, "weight": weight}
    succ = shift_from["succ"].copy()
    redraw = rng.choice(V, V // 3, replace=False)
    for b in redraw:
        succ[b] = rng.choice(V, 6, replace=False, p=shift_from["weight"])
    perms = np.stack([rng.permutation(6) for _ in range(4)])
    return {"succ": succ, "perms": perms, "weight": shift_from["weight"]}


def sample(src: dict, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    probs = np.array([0.55, 0.2, 0.1, 0.07, 0.05, 0.03])
    x = np.zeros((n, SEQ), dtype=np.int64)
    x[:, 0] = rng.choice(V, n, p=src["weight"])
    x[:, 1] = src["succ"][x[:, 0], rng.choice(6, n, p=probs)]
    for t in range(2, SEQ):
        rank = rng.choice(6, n, p=probs)
        x[:, t] = src["succ"][x[:, t - 1], src["perms"][x[:, t - 2] % 4][np.arange(n), rank]]
    return x


def train_target(model, data: np.ndarray, steps: int, lr: float, seed: int):
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    g = np.random.default_rng(seed)
    model.train()
    for step in range(steps):
        batch = torch.from_numpy(data[g.integers(0, len(data), 64)])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 200 == 0 or step == steps - 1:
            print(f"  target step {step:4d} loss {loss.item():.3f}", flush=True)
    model.eval()
    return model


def greedy_rollouts(model, prompts: np.ndarray, new: int):
    """Greedy continuations and the aux hidden states at every position."""
    import torch

    with torch.no_grad():
        out = model.generate(torch.from_numpy(prompts), max_new_tokens=new, do_sample=False, pad_token_id=2)
        hs = model(input_ids=out, output_hidden_states=True).hidden_states
        aux = torch.cat([hs[i + 1] for i in AUX], dim=-1)
    return out, aux


class Drafter:
    """The EAGLE-3 head in training form (full sequences), SGLang 0.5.17's layout."""

    def __init__(self, embed, ids):
        import torch

        torch.manual_seed(0)
        nn = torch.nn
        self.embed = embed  # the target's, frozen (engines share it)
        self.ids = torch.from_numpy(ids)
        self.m = nn.ModuleDict(
            {
                "fc": nn.Linear(3 * H, H, bias=False),
                "input_layernorm": nn.RMSNorm(H, eps=1e-5),
                "hidden_norm": nn.RMSNorm(H, eps=1e-5),
                "q": nn.Linear(2 * H, H, bias=False),
                "k": nn.Linear(2 * H, H, bias=False),
                "v": nn.Linear(2 * H, H, bias=False),
                "o": nn.Linear(H, H, bias=False),
                "post": nn.RMSNorm(H, eps=1e-5),
                "gate": nn.Linear(H, INTER, bias=False),
                "up": nn.Linear(H, INTER, bias=False),
                "down": nn.Linear(INTER, H, bias=False),
                "norm": nn.RMSNorm(H, eps=1e-5),
                "lm_head": nn.Linear(H, VD, bias=False),
            }
        )
        hd = H // HEADS
        self.inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))

    def rope(self, x, T):
        import torch

        f = torch.arange(T).float()[:, None] * self.inv[None]
        emb = torch.cat([f, f], -1)
        cos, sin = emb.cos()[None, :, None], emb.sin()[None, :, None]
        h = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin

    def step(self, tokens, hidden):
        """One draft pass over whole sequences: (logits over the draft vocab, pre-norm hidden)."""
        import torch

        m = self.m
        B, T = tokens.shape
        if hidden.shape[-1] != H:
            hidden = m["fc"](hidden)
        res = hidden
        x = torch.cat([m["input_layernorm"](self.embed[tokens]), m["hidden_norm"](hidden)], -1)
        q, k, v = (m[n](x).view(B, T, HEADS, -1) for n in ("q", "k", "v"))
        q, k = self.rope(q, T), self.rope(k, T)
        a = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        res = m["o"](a.transpose(1, 2).reshape(B, T, H)) + res
        y = m["post"](res)
        out = m["down"](torch.nn.functional.silu(m["gate"](y)) * m["up"](y))
        pre = out + res
        return m["lm_head"](m["norm"](pre)), pre

    def state_dict(self) -> dict[str, np.ndarray]:
        m = self.m
        names = {
            "fc": "fc.weight",
            "input_layernorm": "layers.0.input_layernorm.weight",
            "hidden_norm": "layers.0.hidden_norm.weight",
            "q": "layers.0.self_attn.q_proj.weight",
            "k": "layers.0.self_attn.k_proj.weight",
            "v": "layers.0.self_attn.v_proj.weight",
            "o": "layers.0.self_attn.o_proj.weight",
            "post": "layers.0.post_attention_layernorm.weight",
            "gate": "layers.0.mlp.gate_proj.weight",
            "up": "layers.0.mlp.up_proj.weight",
            "down": "layers.0.mlp.down_proj.weight",
            "norm": "norm.weight",
            "lm_head": "lm_head.weight",
        }
        return {names[k]: m[k].weight.detach().float().numpy() for k in names}


def train_drafter(d: Drafter, toks, aux, t2d_index, steps: int):
    """EAGLE-3's loss with a 3-step training-time test: position t has the target's state at
    t and token t+1 and predicts token t+2; later steps feed the drafter's own state."""
    import torch

    opt = torch.optim.AdamW(d.m.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    g = np.random.default_rng(1)
    T = toks.shape[1]
    for s in range(steps):
        i = torch.from_numpy(g.integers(0, len(toks), 64))
        z, A = toks[i], aux[i]
        loss = 0.0
        hidden = A[:, : T - 4]
        for k, wgt in enumerate((1.0, 0.8, 0.6)):
            tok_in = z[:, 1 + k : T - 3 + k]
            label = t2d_index[z[:, 2 + k : T - 2 + k]]
            logits, pre = d.step(tok_in, hidden)
            mask = label >= 0
            loss = loss + wgt * torch.nn.functional.cross_entropy(logits[mask], label[mask])
            hidden = pre
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if s % 200 == 0 or s == steps - 1:
            print(f"  drafter step {s:4d} loss {loss.item():.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "ckpttools" / "data" / "story")
    ap.add_argument("--quick", action="store_true", help="fewer steps (for a smoke run)")
    a = ap.parse_args()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ckpttools.demo.tiny import write_tensors
    from ckpttools.vocab.diff import build_vocab
    from ckpttools.vocab.mapping import load_mapping

    torch.set_num_threads(2)
    t0 = time.time()
    k = 4 if a.quick else 1
    src_a = make_source(1)
    src_b = make_source(2, shift_from=src_a)
    corpus_a = sample(src_a, 6000, 10)
    corpus_b = sample(src_b, 4000, 11)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=INTER,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=H // HEADS,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    print("target A", flush=True)
    target_a = train_target(LlamaForCausalLM(cfg), corpus_a, 800 // k, 3e-3, 0)

    print("greedy continuations of target A", flush=True)
    prompts = corpus_a[np.random.default_rng(5).integers(0, len(corpus_a), 1000 // k), :8]
    toks, aux = greedy_rollouts(target_a, prompts, 40)

    work = Path(tempfile.mkdtemp(prefix="story-"))
    counts = np.bincount(toks[:, 8:].reshape(-1).numpy(), minlength=V)
    np.save(work / "counts.npy", counts)
    build_vocab(work / "counts.npy", VD, work / "mapping-m1.safetensors")
    m1 = load_mapping(work / "mapping-m1.safetensors")
    # M2: `ckpt vocab build` on a different sample of the corpus (as another pipeline would)
    np.save(work / "frequencies-m2.npy", np.bincount(sample(src_a, 300, 99).reshape(-1), minlength=V))
    # built from inside WORK, so the mapping's metadata names its counts by the name they ship
    # under beside it, not by this machine's temporary directory
    here = os.getcwd()
    os.chdir(work)
    try:
        build_vocab("frequencies-m2.npy", VD, "mapping-m2.safetensors")
    finally:
        os.chdir(here)

    print("drafter", flush=True)
    t2d_index = torch.full((V,), -1, dtype=torch.long)
    t2d_index[torch.from_numpy(m1.ids)] = torch.arange(VD)
    d = Drafter(target_a.get_input_embeddings().weight.detach(), m1.ids)
    train_drafter(d, toks, aux, t2d_index, 700 // k)

    print("target B (target A trained further on a shifted source)", flush=True)
    import copy

    target_b = train_target(copy.deepcopy(target_a), corpus_b, 300 // k, 1e-3, 1)

    import ml_dtypes

    out = a.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    def save_target(model, path: Path) -> None:
        sd = {n: t.detach().float().numpy().astype(ml_dtypes.bfloat16) for n, t in model.state_dict().items()}
        c = model.config.to_dict()
        conf = {
            k2: c[k2]
            for k2 in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "rms_norm_eps",
                "rope_theta",
                "tie_word_embeddings",
                "bos_token_id",
                "eos_token_id",
                "pad_token_id",
                "hidden_act",
            )
            if k2 in c
        }
        conf.setdefault("rope_theta", 10000.0)
        conf.update(architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype="bfloat16")
        write_tensors(path, sd, conf)

    save_target(target_a, out / "target-a")
    save_target(target_b, out / "target-b")
    sd = {n: w.astype(ml_dtypes.bfloat16) for n, w in d.state_dict().items()}
    sd["d2t"] = m1.d2t
    sd["t2d"] = m1.t2d(V)
    dcfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": INTER,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "head_dim": H // HEADS,
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "vocab_size": V,
        "draft_vocab_size": VD,
        "torch_dtype": "bfloat16",
        "bos_token_id": 0,
        "eos_token_id": 1,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX},
    }
    write_tensors(out / "drafter", sd, dcfg)
    shutil.copy(work / "mapping-m2.safetensors", out / "mapping-m2.safetensors")
    shutil.copy(work / "frequencies-m2.npy", out / "frequencies-m2.npy")
    test_prompts = sample(src_a, 12, 1234)[:, :10]
    with open(out / "prompts.jsonl", "w") as f:
        for p in test_prompts:
            f.write(json.dumps({"input_ids": p.tolist(), "category": "markov"}) + "\n")
    (out / "README.md").write_text(
        "Built by examples/build_story_pair.py (synthetic order-2 Markov source over 512 tokens).\n"
        "target-a: 4-layer Llama, hidden 128; target-b: target-a trained further on a shifted source;\n"
        "drafter: EAGLE-3 (SGLang layout) trained against target-a, draft vocab 256 (mapping M1);\n"
        "mapping-m2.safetensors: `ckpt vocab build` on another sample; prompts.jsonl: token-id prompts.\n"
    )
    shutil.rmtree(work, ignore_errors=True)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out} ({size / 1e6:.1f} MB) in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
