"""Test helpers: rewrite a real checkpoint with changes, hash a tree."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ckpttools.demo.tiny import write_tensors
from ckpttools.io.checkpoint import open_checkpoint


def rewrite(
    src: Path,
    dst: Path,
    *,
    drop: tuple[str, ...] = (),
    rename: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
    remove_keys: tuple[str, ...] = (),
    replace: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None,
) -> Path:
    """A copy of a checkpoint with tensors dropped/renamed/replaced and config keys changed."""
    rename, replace = rename or {}, replace or {}
    with open_checkpoint(src) as ck:
        tensors = {}
        for n in ck.tensors:
            if n in drop:
                continue
            a = ck.read(n).copy()
            tensors[rename.get(n, n)] = replace[n](a) if n in replace else a
        cfg = {k: v for k, v in (ck.config or {}).items() if k not in remove_keys}
    cfg.update(config or {})
    return write_tensors(dst, tensors, cfg)


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def with_live_attention(drafter: Path, o_std: float = 0.05, qk_std: float = 0.3, seed: int = 7) -> None:
    """Give a known drafter attention that matters: random q/k/v projections (Llama or MLA
    names), per-head norms and later layers' input norms (if any) around 1, and an o_proj small enough that drafts are right
    only part of the time (rewrites its safetensors)."""
    from safetensors.numpy import load_file, save_file

    f = next(drafter.glob("*.safetensors"))
    t, rng = load_file(str(f)), np.random.default_rng(seed)
    proj = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "q_proj", "k_proj", "v_proj")
    for k in sorted(t):
        if k.endswith("o_proj.weight"):
            t[k] = rng.normal(0, o_std, t[k].shape).astype(t[k].dtype)
        elif k.endswith(tuple(f"self_attn.{n}.weight" for n in proj)):
            t[k] = rng.normal(0, qk_std, t[k].shape).astype(t[k].dtype)
        elif k.endswith(("q_norm.weight", "k_norm.weight")) or re.match(
            r"layers\.[1-9]\d*\.(hidden_norm|input_layernorm)\.", k
        ):
            t[k] = (1 + rng.normal(0, 0.3, t[k].shape)).astype(t[k].dtype)  # later layers' norms too
    save_file(t, str(f), metadata={"format": "pt"})


def compare_plan(drafter: Path, dump: dict, release: Any, repacked: tuple[str, ...] = ()) -> list[str]:
    """Where an engine's real draft-model parameters (``dump``: {"class", "params": {name: {shape,
    sum, all_ones}}}, read from the running engine) differ from the load plan's prediction for
    ``release``; empty when they agree on names, class, file sums and the norms left at ones.
    Parameters of the kinds in ``repacked`` are compared by name only (a backend that moves their
    values elsewhere after loading, as vLLM's CPU GEMM dispatch does). Parameters the plan says
    are ``derived`` from one parameter are compared by value together: their sums add up to the
    file's sum for that parameter (a split, as vLLM's MLA W_UV / W_UK_T of kv_b_proj)."""
    from ckpttools.engines.load_plan import load_plan

    with open_checkpoint(drafter) as ck:
        heads = {n: (list(e.shape), e.dtype) for n, e in ck.tensors.items()}
        cfg = dict(ck.config or {})
        sums = {n: float(np.asarray(ck.read(n), dtype=np.float64).sum()) for n in ck.tensors}
    plan = load_plan(heads, cfg, release).to_dict()
    got, want = dump["params"], {p["name"]: p for p in plan["params"]}
    bad = [f"class {dump['class']} vs plan {plan['class']}"] if dump["class"] != plan["class"] else []
    bad += [f"engine has {n}, the plan does not" for n in sorted(set(got) - set(want))]
    bad += [f"the plan has {n}, the engine does not" for n in sorted(set(want) - set(got))]
    bad += [f"the engine loaded the drafter; the plan says: {m}" for m in plan["refused"]]
    into: dict[str, float] = {}
    for t in plan["tensors"]:
        if t["fate"] in ("loaded", "renamed") and t.get("param") in want:
            into[t["param"]] = into.get(t["param"], 0.0) + sums[t["name"]]
    for n, p in want.items():
        g = got.get(n)
        if g is None:
            continue
        if p["source"] == "init" and p.get("init") == "ones" and not g["all_ones"]:
            bad.append(f"{n}: the plan says it starts at ones; the engine's is not all ones")
        if p["kind"] in repacked:
            continue
        if p["source"] == "file" and n in into and not np.isclose(g["sum"], into[n], rtol=2e-2, atol=1e-2):
            bad.append(f"{n}: engine sum {g['sum']:.4f}, the file's {into[n]:.4f}")
    return bad + _derived_sums(want, got, into)


def _derived_sums(want: dict, got: dict, into: dict[str, float]) -> list[str]:
    parts: dict[str, list[str]] = {}
    for n, p in want.items():
        if p.get("derived_from"):
            parts.setdefault(p["derived_from"], []).append(n)
    bad = []
    for src, names in parts.items():
        if src not in into or not all(n in got for n in names):
            continue
        total = sum(got[n]["sum"] for n in names)
        if not np.isclose(total, into[src], rtol=2e-2, atol=1e-2):
            bad.append(f"{', '.join(names)}: engine sums {total:.4f} together, the file's {src} {into[src]:.4f}")
    return bad
