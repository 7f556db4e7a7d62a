"""Inspect on a 64-shard sparse checkpoint whose headers describe ~1 TB in ~35,000 tensors.

Compares, whole-process and in the same run:
  - `ckpt inspect --json` (headers only), and
  - the naive way: open every shard with the safetensors library, read each
    tensor's dtype and shape, and print that inventory as JSON,
and `ckpt --help`. It also counts the bytes each process read (/proc/self/io rchar).

The summary (`inspect --json --no-tensors` against the loop that only counts tensors, the
figure with a target) is also timed in pairs, A B A B ..., with the ratio taken pair by pair,
so that a machine whose speed drifts between runs moves both sides of each ratio alike.

    python benchmarks/bench_inspect.py [--workdir DIR] [--repeat 5] [--before OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CKPT, run_timed  # noqa: E402

NAIVE = r"""
import json, sys
from pathlib import Path
from safetensors import safe_open
root = Path(sys.argv[1])
index = json.loads((root / "model.safetensors.index.json").read_text())
out = {}
for shard in sorted(set(index["weight_map"].values())):
    with safe_open(root / shard, framework="numpy") as f:
        for k in f.keys():
            s = f.get_slice(k)
            out[k] = (s.get_dtype(), s.get_shape())
json.dump([{"name": k, "dtype": d, "shape": s} for k, (d, s) in out.items()], sys.stdout)
"""

# the least a script can do to learn how many tensors a sharded checkpoint has
COUNT = r"""
import json, sys
from pathlib import Path
from safetensors import safe_open
root = Path(sys.argv[1])
index = json.loads((root / "model.safetensors.index.json").read_text())
n = 0
for shard in sorted(set(index["weight_map"].values())):
    with safe_open(root / shard, framework="numpy") as f:
        n += len(f.keys())
print(json.dumps({"num_tensors": n}))
"""

RCHAR = r"""
import sys, runpy
def rchar():
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])
sys.argv = ["ckpt", *sys.argv[1:]]
try:
    from ckpttools.cli.commands import main
    main()
except SystemExit:
    pass
sys.stderr.write(f"RCHAR {rchar()}\n")
"""


def rchar_of(args: list[str]) -> int:
    import subprocess

    r = subprocess.run([sys.executable, "-c", RCHAR, *args], capture_output=True, text=True)
    return int(r.stderr.strip().split("RCHAR ")[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--before", type=Path, help="another checkout of ckpttools (e.g. a git worktree of 0.1) to time in the same run"
    )
    a = ap.parse_args()
    from ckpttools.demo.tiny import build_huge_sparse
    from ckpttools.io.checkpoint import open_checkpoint

    tmp = tempfile.TemporaryDirectory(prefix="bench-inspect-")
    work = a.workdir or Path(tmp.name)
    huge = work / "huge"
    if not huge.exists():
        build_huge_sparse(huge)
    with open_checkpoint(huge) as ck:
        n, total = len(ck.tensors), sum(t.nbytes for t in ck.tensors.values())
        shards = len(ck.headers)
        header_bytes = sum(h.header_len + 8 for h in ck.headers.values())
    disk = sum(f.stat().st_blocks * 512 for f in huge.iterdir())
    print(
        f"checkpoint: {shards} shards, {n} tensors, headers describe {total / 1e12:.3f} TB; "
        f"{disk / 1e6:.1f} MB on disk; headers total {header_bytes / 1e6:.2f} MB"
    )
    ckpt = list(CKPT)
    help_med, help_min = run_timed([*ckpt, "--help"], a.repeat)
    ins_med, ins_min = run_timed([*ckpt, "inspect", str(huge), "--json"], a.repeat)
    naive_med, naive_min = run_timed([sys.executable, "-c", NAIVE, str(huge)], a.repeat)
    quiet = NAIVE.replace("json.dump(", "len(")  # the same loop, printing nothing
    quiet_med, quiet_min = run_timed([sys.executable, "-c", quiet.replace(", sys.stdout)", ")"), str(huge)], a.repeat)
    nt_med, nt_min = run_timed([*ckpt, "inspect", str(huge), "--json", "--no-tensors"], a.repeat)
    count_med, count_min = run_timed([sys.executable, "-c", COUNT, str(huge)], a.repeat)
    import statistics
    import subprocess
    import time

    # the summary against the counting loop, in pairs (3x the runs: the figure with a target)
    pair_ratios, pair_a, pair_b = [], [], []
    for _ in range(3 * a.repeat):
        t = time.perf_counter()
        subprocess.run([*ckpt, "inspect", str(huge), "--json", "--no-tensors"], capture_output=True, check=True)
        ta = time.perf_counter() - t
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", COUNT, str(huge)], capture_output=True, check=True)
        tb = time.perf_counter() - t
        pair_a.append(ta)
        pair_b.append(tb)
        pair_ratios.append(ta / tb)
    pair_ratios.sort()
    if a.before is not None:  # another checkout against this one and the counting loop, interleaved
        # its bytecode, written once: where PYTHONDONTWRITEBYTECODE is set, each run would
        # otherwise compile the other checkout from source, and this one's (installed) not
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(a.before / "ckpttools")], check=True)
        cmds = {
            "before": [
                "env",
                f"PYTHONPATH={a.before}",
                sys.executable,
                "-m",
                "ckpttools",
                "inspect",
                str(huge),
                "--json",
                "--no-tensors",
            ],
            "after": [*ckpt, "inspect", str(huge), "--json", "--no-tensors"],
            "count": [sys.executable, "-c", COUNT, str(huge)],
        }
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(3 * a.repeat):
            for k, c in cmds.items():
                t = time.perf_counter()
                # `python -m` puts the working directory first on sys.path: run the other
                # checkout from its own root, or it would import this one
                subprocess.run(c, capture_output=True, check=True, cwd=a.before if k == "before" else None)
                times[k].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"interleaved x{3 * a.repeat}, inspect --json --no-tensors: before {med['before']:.3f} s "
            f"({med['before'] / med['count']:.2f}x the counting loop), after {med['after']:.3f} s "
            f"({med['after'] / med['count']:.2f}x); counting loop {med['count']:.3f} s"
        )
    base = rchar_of(["--help"])
    read = rchar_of(["inspect", str(huge), "--json", "--no-tensors"]) - base
    print(f"ckpt --help                 median {help_med:.3f} s  min {help_min:.3f} s   (target < 0.3 s)")
    print(f"ckpt inspect --json         median {ins_med:.3f} s  min {ins_min:.3f} s   (target < 0.5 s)")
    print(f"naive safetensors open-all  median {naive_med:.3f} s  min {naive_min:.3f} s")
    print(f"naive, printing nothing     median {quiet_med:.3f} s  min {quiet_min:.3f} s")
    print(f"ckpt inspect --json --no-tensors  median {nt_med:.3f} s  min {nt_min:.3f} s")
    print(f"naive safe_open loop counting tensors  median {count_med:.3f} s  min {count_min:.3f} s")
    print(f"ratio inspect / naive: {ins_med / naive_med:.2f}x  (below 1 = faster than naive)")
    print(f"ratio inspect --no-tensors / naive count loop: {nt_med / count_med:.2f}x  (of the medians)")
    print(
        f"paired x{len(pair_ratios)}, inspect --json --no-tensors / naive count loop: median "
        f"{statistics.median(pair_ratios):.2f}x, min {pair_ratios[0]:.2f}x, max {pair_ratios[-1]:.2f}x  "
        f"(target <= 1.0); inspect median {statistics.median(pair_a):.3f} s, loop median "
        f"{statistics.median(pair_b):.3f} s (spread {min(pair_b):.3f}-{max(pair_b):.3f} s)"
    )
    print(f"ratio inspect / naive printing nothing: {ins_med / quiet_med:.2f}x")
    print(
        f"bytes read by inspect beyond `ckpt --help`: {read / 1e6:.2f} MB "
        f"(headers are {header_bytes / 1e6:.2f} MB of {total / 1e12:.3f} TB)"
    )


if __name__ == "__main__":
    main()
