"""Remap a Kimi-K2-shaped synthetic drafter (about 3.5 GB, bf16) into another mapping.

In one run, on the same warm page cache:
  - baseline `cp -r` of the drafter directory (and `cp -r` followed by `sync`);
  - `ckpt remap --to B` (streams, copies untouched tensors in the kernel, fsyncs);
  - the naive way: safetensors.torch.load_file everything, index lm_head, save_file.
Prints wall time and peak RSS of each whole process, and the ratios.

    python benchmarks/bench_remap.py [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, report  # noqa: E402
from kimi_shaped import build, write_mapping_b  # noqa: E402

NAIVE = r"""
import json, shutil, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
src, mapping, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
t = load_file(str(src / "model.safetensors"))
m = load_file(mapping)
ids_a = t["d2t"] + torch.arange(len(t["d2t"]))
ids_b = m["d2t"] + torch.arange(len(m["d2t"]))
slot = torch.full((int(t["t2d"].numel()),), -1, dtype=torch.long)
slot[ids_a] = torch.arange(len(ids_a))
rows = slot[ids_b]
head = torch.zeros(len(ids_b), t["lm_head.weight"].shape[1], dtype=t["lm_head.weight"].dtype)
head[rows >= 0] = t["lm_head.weight"][rows[rows >= 0]]
t["lm_head.weight"], t["d2t"], t["t2d"] = head, m["d2t"], m["t2d"]
out.mkdir()
save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
cfg = json.loads((src / "config.json").read_text())
(out / "config.json").write_text(json.dumps(cfg))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tmp = None
    if a.workdir is None:
        tmp = tempfile.mkdtemp(prefix="bench-remap-", dir="/var/tmp")
        a.workdir = Path(tmp)
    w = a.workdir
    w.mkdir(parents=True, exist_ok=True)
    src = w / "drafter"
    if not (src / "model.safetensors").exists():
        build(src)
    mb = write_mapping_b(w / "mapping-b.safetensors")
    size = sum(p.stat().st_size for p in src.iterdir())
    subprocess.run(["cat", str(src / "model.safetensors")], stdout=subprocess.DEVNULL, check=True)  # warm cache

    cmds = {
        "cp -r": ["cp", "-r", str(src), str(w / "o")],
        "cp -r && sync": ["sh", "-c", f"cp -r {src} {w / 'o'} && sync"],
        "ckpt remap": [
            sys.executable,
            "-m",
            "ckpttools",
            "remap",
            str(src),
            "--to",
            str(mb),
            "-o",
            str(w / "o"),
            "--quiet",
        ],
        "ckpt remap --fsync": [
            sys.executable,
            "-m",
            "ckpttools",
            "remap",
            str(src),
            "--to",
            str(mb),
            "-o",
            str(w / "o"),
            "--quiet",
            "--fsync",
        ],
    }
    if not a.skip_naive:
        cmds["naive load+save (torch)"] = [sys.executable, "-c", NAIVE, str(src), str(mb), str(w / "o")]
    runs = interleaved(cmds, a.repeat, w / "o")
    print(f"input: {size / 1e9:.2f} GB ({size / 2**30:.2f} GiB) Kimi-K2-shaped drafter, bf16")
    med = report(runs)
    results = {k: (med[k], max(r for _, r in v)) for k, v in runs.items()}
    base = results["cp -r"][0]
    r = results["ckpt remap"]
    rf = results["ckpt remap --fsync"]
    print(
        f"remap / cp -r: {r[0] / base:.2f}x (target <= 1.3x); best runs: "
        f"{min(t for t, _ in runs['ckpt remap']) / min(t for t, _ in runs['cp -r']):.2f}x"
    )
    print(f"remap --fsync / (cp -r && sync): {rf[0] / results['cp -r && sync'][0]:.2f}x")
    print(f"remap peak RSS {max(r[1], rf[1]) / 2**20:.0f} MiB (target <= 1024)")
    if "naive load+save (torch)" in results:
        n = results["naive load+save (torch)"]
        print(f"remap / naive: {r[0] / n[0]:.2f}x time, {r[1] / n[1]:.2f}x peak RSS")
    if tmp and not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
