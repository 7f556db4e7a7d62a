"""diff-vocab on two 32,000-slot mappings over a 163,840-token vocabulary (the Kimi-K2 case).

Whole-process `ckpt diff-vocab A B --json`, against the baseline of a plain Python
process that imports numpy and loads both files with safetensors.numpy (the least any
tool must do), and a naive pure-Python set/loop comparison, in the same run.

    python benchmarks/bench_diff_vocab.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CKPT, run_timed  # noqa: E402

LOAD_ONLY = r"""
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
"""

NAIVE = r"""
import sys
from safetensors.numpy import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
ia = [int(d) + i for i, d in enumerate(a["d2t"])]
ib = [int(d) + i for i, d in enumerate(b["d2t"])]
agree = sum(1 for x, y in zip(ia, ib) if x == y)
shared = len(set(ia) & set(ib))
print(agree, shared)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    from ckpttools.vocab.diff import save_mapping
    from ckpttools.vocab.mapping import VocabMapping

    rng = np.random.default_rng(0)
    v, vd = 163_840, 32_000
    base = rng.choice(v, size=vd + 300, replace=False)
    ids_a = np.sort(base[:vd])
    ids_b = np.sort(base[300 : vd + 300])  # shares 31,700 tokens, shifted slots
    with tempfile.TemporaryDirectory() as tmp:
        pa, pb = Path(tmp) / "a.safetensors", Path(tmp) / "b.safetensors"
        save_mapping(VocabMapping.from_ids(ids_a, v), pa)
        save_mapping(VocabMapping.from_ids(ids_b, v), pb)
        ck_med, ck_min = run_timed([*CKPT, "diff-vocab", str(pa), str(pb), "--json"], a.repeat)
        ld_med, ld_min = run_timed([sys.executable, "-c", LOAD_ONLY, str(pa), str(pb)], a.repeat)
        nv_med, nv_min = run_timed([sys.executable, "-c", NAIVE, str(pa), str(pb)], a.repeat)
    print(f"mappings: Vd {vd:,} over V {v:,}")
    print(f"ckpt diff-vocab --json            median {ck_med:.3f} s  min {ck_min:.3f} s  (target < 0.5 s)")
    print(f"baseline: load both, nothing else median {ld_med:.3f} s  min {ld_min:.3f} s")
    print(f"naive Python loops and sets       median {nv_med:.3f} s  min {nv_min:.3f} s")
    print(f"ratio ckpt / load-only: {ck_med / ld_med:.2f}x; ckpt / naive: {ck_med / nv_med:.2f}x")


if __name__ == "__main__":
    main()
