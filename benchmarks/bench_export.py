"""Export the Kimi-K2-shaped synthetic drafter (about 3.5 GB) to SGLang's layout.

In one run, on the same warm page cache, median of interleaved repeats:
  - names only (the source has training-style "model." prefixes, bf16): `ckpt export`
    against `cp -r` of the same directory;
  - fp32 -> bf16 (a 7.3 GB fp32 source): `ckpt export --dtype bf16` against `cp -r` of the
    fp32 source, and against the naive torch load_file / .to(bfloat16) / save_file.

    python benchmarks/bench_export.py [--workdir DIR] [--repeat 5] [--skip-fp32]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CKPT, interleaved, report  # noqa: E402
from kimi_shaped import build  # noqa: E402

NAIVE_CAST = r"""
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
src, out = Path(sys.argv[1]), Path(sys.argv[2])
t = load_file(str(src / "model.safetensors"))
t = {k.removeprefix("model."): (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in t.items()}
out.mkdir()
save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
(out / "config.json").write_text((src / "config.json").read_text())
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-fp32", action="store_true")
    a = ap.parse_args()
    tmp = None
    if a.workdir is None:
        tmp = tempfile.mkdtemp(prefix="bench-export-", dir="/var/tmp")
        a.workdir = Path(tmp)
    w = a.workdir
    w.mkdir(parents=True, exist_ok=True)
    bf16 = w / "drafter-prefixed-bf16"
    if not (bf16 / "model.safetensors").exists():
        build(bf16, "BF16", prefix="model.")
    fp32 = w / "drafter-fp32"
    if not a.skip_fp32 and not (fp32 / "model.safetensors").exists():
        build(fp32, "F32", prefix="model.")

    ckpt = [*CKPT, "export"]
    cmds = {
        "cp -r (bf16 source)": ["cp", "-r", str(bf16), str(w / "o")],
        "ckpt export (names only)": [*ckpt, str(bf16), "-o", str(w / "o"), "--quiet"],
    }
    if not a.skip_fp32:
        cmds |= {
            "cp -r (fp32 source)": ["cp", "-r", str(fp32), str(w / "o")],
            "ckpt export --dtype bf16 (fp32)": [*ckpt, str(fp32), "-o", str(w / "o"), "--dtype", "bf16", "--quiet"],
            "naive torch cast (fp32)": [sys.executable, "-c", NAIVE_CAST, str(fp32), str(w / "o")],
        }
    for src in (bf16, fp32):
        if src.exists():
            subprocess.run(["cat", str(src / "model.safetensors")], stdout=subprocess.DEVNULL, check=True)
    # the fp32 paths are long: two runs each
    runs = interleaved(cmds, a.repeat, w / "o", {k: 2 for k in cmds if "fp32" in k})
    med = report(runs)
    cp = [t for t, _ in runs["cp -r (bf16 source)"]]
    ex = [t for t, _ in runs["ckpt export (names only)"]]
    pairs = sorted(e / c for e, c in zip(ex, cp))  # run i of each was made one after the other
    print(
        f"export (names only) / cp: {med['ckpt export (names only)'] / med['cp -r (bf16 source)']:.2f}x "
        f"of the medians (target <= 1.1x); pair by pair: median {statistics.median(pairs):.2f}x, "
        f"min {pairs[0]:.2f}x, max {pairs[-1]:.2f}x; cp's own spread {min(cp):.2f}-{max(cp):.2f} s"
    )
    if not a.skip_fp32:
        print(
            f"export fp32->bf16 / cp of the fp32 source: "
            f"{med['ckpt export --dtype bf16 (fp32)'] / med['cp -r (fp32 source)']:.2f}x; "
            f"/ naive torch cast: {med['ckpt export --dtype bf16 (fp32)'] / med['naive torch cast (fp32)']:.2f}x"
        )
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
