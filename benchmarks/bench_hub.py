"""Hub repos without downloading their weights: bytes and seconds against a local Hub.

Serves, through tests/local_hub.py (the Hub's HTTP protocol as huggingface_hub uses it):
  - org/huge: 64 shards whose headers describe ~1 TB in 35,000 tensors (sparse files);
  - org/k2-a, org/k2-b: Kimi-K2-shaped drafters (32,000 slots of 163,840), sparse weights;
  - org/k2-target: a target with a Kimi-shaped lm_head (163,840 x 7168 bf16, sparse).

and measures, whole-process, what the server sent and how long each command took:
  - `ckpt inspect org/huge --json`, first run, second run, offline run;
  - huggingface_hub's own `get_safetensors_metadata("org/huge")`, the baseline;
  - `ckpt diff-vocab org/k2-a org/k2-b`;
  - `ckpt remap org/k2-a --to org/k2-b --fill target --target org/k2-target`.

    python benchmarks/bench_hub.py [--workdir DIR]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.local_hub import LocalHub, Repo  # noqa: E402
from tests.test_hub import KIMI_H, KIMI_V, KIMI_VD, _kimi_sparse_drafter  # noqa: E402


def _kimi_target(out: Path) -> Path:
    """A target whose lm_head is Kimi-shaped (bf16 163,840 x 7168) and sparse, with its config."""
    import struct

    out.mkdir(parents=True)
    n = KIMI_V * KIMI_H * 2
    header = {"lm_head.weight": {"dtype": "BF16", "shape": [KIMI_V, KIMI_H], "data_offsets": [0, n]}}
    raw = json.dumps(header, separators=(",", ":")).encode()
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + n)
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": KIMI_H, "vocab_size": KIMI_V}
    cfg |= {"num_hidden_layers": 61, "torch_dtype": "bfloat16", "max_position_embeddings": 262144}
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path)
    a = ap.parse_args()
    import numpy as np

    from ckpttools.demo.tiny import build_huge_sparse
    from ckpttools.io.checkpoint import open_checkpoint

    tmp = tempfile.TemporaryDirectory(prefix="bench-hub-")
    work = a.workdir or Path(tmp.name)
    huge = work / "huge"
    if not huge.exists():
        build_huge_sparse(huge)
    rng = np.random.default_rng(7)
    ka = np.sort(rng.choice(KIMI_V, KIMI_VD, replace=False))
    kb = np.sort(np.concatenate([ka[298:], np.setdiff1d(np.arange(KIMI_V), ka)[:298]]))
    for name, ids in (("k2-a", ka), ("k2-b", kb)):
        if not (work / name).exists():
            _kimi_sparse_drafter(work / name, ids)
    if not (work / "k2-target").exists():
        _kimi_target(work / "k2-target")
    with open_checkpoint(huge) as ck:
        headers = sum(h.header_len + 8 for h in ck.headers.values())
    repos = {f"org/{n}": Repo.from_dir(work / n, by_path=True) for n in ("huge", "k2-a", "k2-b", "k2-target")}
    with LocalHub(repos, max_whole=4 << 30) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env |= {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
        env |= {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HOME": str(work / "hf-home"), "CKPT_CACHE": str(work / "cc")}
        for d in ("hf-home", "cc", "out"):
            subprocess.run(["rm", "-rf", str(work / d)], check=True)

        def run(label: str, cmd: list[str], extra: dict[str, str] | None = None) -> None:
            hub.reset_counts()
            t = time.perf_counter()
            r = subprocess.run(cmd, env={**env, **(extra or {})}, capture_output=True, text=True)
            dt = time.perf_counter() - t
            status = "" if r.returncode == 0 else f"  EXIT {r.returncode}: {r.stderr.strip()[-200:]}"
            print(f"{label:58s} {dt:6.2f} s  {hub.bytes_served / 1e6:8.2f} MB  {len(hub.requests):4d} requests{status}")

        ckpt = [sys.executable, "-m", "ckpttools"]
        print(f"org/huge: 64 shards, headers {headers / 1e6:.2f} MB describing ~1 TB")
        run("ckpt inspect org/huge --json (first run)", [*ckpt, "inspect", "org/huge", "--json"])
        run("ckpt inspect org/huge --json (second run)", [*ckpt, "inspect", "org/huge", "--json"])
        run(
            "ckpt inspect org/huge --json (HF_HUB_OFFLINE=1)",
            [*ckpt, "inspect", "org/huge", "--json"],
            {"HF_HUB_OFFLINE": "1"},
        )
        code = "from huggingface_hub import get_safetensors_metadata as g; g('org/huge')"
        fresh = {"HF_HOME": str(work / "hf-home-baseline")}  # its own cache: the index is not there yet
        subprocess.run(["rm", "-rf", fresh["HF_HOME"]], check=True)
        run("huggingface_hub get_safetensors_metadata('org/huge')", [sys.executable, "-c", code], fresh)
        mapping = 2 * (KIMI_VD * 8 + KIMI_V)
        print(f"org/k2-a, org/k2-b: d2t + t2d of both {mapping / 1e6:.2f} MB; each file 1.2 GB")
        run("ckpt diff-vocab org/k2-a org/k2-b", [*ckpt, "diff-vocab", "org/k2-a", "org/k2-b", "--json"])
        rows = 298 * KIMI_H * 2
        print(
            f"remap: 298 filled rows of 7168 bf16 = {rows / 1e6:.2f} MB from a {KIMI_V * KIMI_H * 2 / 1e9:.2f} GB head"
        )
        out = str(work / "out")
        cmd = [
            *ckpt,
            "remap",
            "org/k2-a",
            "--to",
            "org/k2-b",
            "--fill",
            "target",
            "--target",
            "org/k2-target",
            "-o",
            out,
        ]
        run("ckpt remap org/k2-a --to org/k2-b --fill target ...", [*cmd, "--force"])
        with open_checkpoint(work / "k2-target") as ck:
            data_start = ck.headers["model.safetensors"].header_len + 8
        target_rows = hub.read_bytes("org/k2-target", from_byte=data_start)
        drafter = hub.read_bytes("org/k2-a")
        print(
            f"  of which: drafter {drafter / 1e6:.2f} MB (whole, into the HF cache), target rows {target_rows / 1e6:.2f} MB"
        )
        run("the same remap again (drafter cached)", [*cmd, "--force"])


if __name__ == "__main__":
    main()
