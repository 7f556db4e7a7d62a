"""Time to verdict for N drafters against one target: one server with swaps beside N launches.

In one run, on vLLM's CPU build (or SGLang on a GPU machine with --engine sglang): the known pair's
repeat target and N drafters (id, swap, its slots permuted, remapped to other tokens, and more
permutations), measured by ``ckpt verify --launch T D1..DN`` (one server) and by N runs of
``ckpt verify --launch T Di``, after one launch that is not counted (the cold start). Prints each
figure and the ratio.

    python benchmarks/bench_verify_swap.py --engine-python .venv-vllm/bin/python [--n 3 6]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ARGS = ["--max-model-len=1024", "--dtype=bfloat16", "--enforce-eager", "--skip-tokenizer-init"]


def _drafters(root: Path, n: int, fmt: str) -> tuple[Path, list[Path], Path]:
    import numpy as np

    from ckpttools.demo.tiny import KNOWN_VD_HI, KNOWN_VD_LO
    from ckpttools.ops.export import export
    from ckpttools.ops.remap import remap
    from ckpttools.vocab.diff import save_mapping
    from ckpttools.vocab.mapping import VocabMapping
    from tests.swap_pairs import build

    tp, ds, prompts = build(root, fmt)
    out = [ds["id"], ds["swap"], ds["perm"], ds["half"]]
    ids = np.arange(KNOWN_VD_LO, KNOWN_VD_HI)
    for seed in range(1, max(0, n - len(out)) + 1):
        m = root / f"perm{seed}.st"
        save_mapping(VocabMapping.from_ids(ids[np.random.default_rng(seed).permutation(len(ids))], 256), m)
        d = remap(ds["id"], root / f"drafter-perm{seed}", to=m).output
        out.append(Path(export(d, root / f"{fmt}-perm{seed}", format=fmt, target=tp).output))
    return tp, out[:n], prompts


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, dict]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ckpttools", *argv], capture_output=True, text=True, env=env)
    if r.returncode not in (0, 1):
        sys.exit(f"failed ({r.returncode}): {' '.join(argv)}\n{r.stderr[-2000:]}")
    return time.monotonic() - t0, json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="vllm", choices=["vllm", "sglang"])
    ap.add_argument("--engine-python", default=sys.executable)
    ap.add_argument("--n", type=int, nargs="+", default=[3, 6])
    ap.add_argument("--engine-arg", action="append", default=None, help="server flags (default: vLLM CPU's)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-swap-"))
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(work / "vllm-cache")}
    tp, ds, prompts = _drafters(work, max(a.n), a.engine)
    common = ["--engine", a.engine, "--target", str(tp), "--steps", "3", "--prompts", str(prompts)]
    common += ["--num-prompts", "6", "--max-new-tokens", "32", "--ignore-eos", "--engine-python", a.engine_python]
    common += ["--json", "--quiet", *[f"--engine-arg={x}" for x in (a.engine_arg or ARGS)]]
    # a first launch, not counted, so that neither side pays the cold start (imports, compile cache)
    _run(["verify", "--launch", *common, str(ds[0]), "--log", str(work / "warmup.log")], env)
    for n in a.n:
        one, rep = _run(["verify", "--launch", *common, *map(str, ds[:n]), "--log", str(work / f"one-{n}.log")], env)
        figs = [e["accept_length"] for e in rep["drafters"]]
        sep, sep_figs = 0.0, []
        for i, d in enumerate(ds[:n]):
            t, r = _run(["verify", "--launch", *common, str(d), "--log", str(work / f"sep-{n}-{i}.log")], env)
            sep += t
            sep_figs.append(r["accept_length"])
        print(
            f"N={n}: one server with swaps {one:.1f} s ({rep['server_starts']} server start(s)); "
            f"{n} launches {sep:.1f} s; ratio {one / sep:.2f}x"
        )
        print(f"  accept lengths, swapped: {figs}")
        print(f"  accept lengths, own servers: {sep_figs}  (equal: {figs == sep_figs})")


if __name__ == "__main__":
    main()
