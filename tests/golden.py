"""Golden write cases: one known input per writing operation, and what the output was
before the write path became plans and one executor (issue 21). ``test_plan.py`` runs
each case and compares every output file byte for byte with ``tests/data/golden-writes.json``,
the manifest compared without its times, version and machine paths.

Made anew (only when an output is meant to change) with:

    python -m tests.golden > tests/data/golden-writes.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ckpttools.demo.tiny import build_drafter, build_target, random_mapping

GOLDEN = Path(__file__).parent / "data" / "golden-writes.json"


def _remap_zero(w: Path) -> Path:
    build_drafter(w / "d", seed=1)
    build_drafter(w / "other", seed=2, mapping=random_mapping(1024, 256, seed=9))
    from ckpttools.ops.remap import remap

    remap(w / "d", w / "out", to=w / "other")
    return w / "out"


def _remap_mean_sharded(w: Path) -> Path:
    build_drafter(w / "d", seed=3, max_shard_size=40_000)
    np.save(w / "freq.npy", np.random.default_rng(4).integers(0, 1000, 1024).astype(np.int64))
    from ckpttools.ops.remap import remap

    remap(w / "d", w / "out", frequencies=w / "freq.npy", draft_vocab_size=300, fill="mean", max_shard_size="50KB")
    return w / "out"


def _remap_target_fill(w: Path) -> Path:
    build_drafter(w / "d", seed=5, embed_tokens=True)
    build_target(w / "t")
    build_drafter(w / "other", seed=6, mapping=random_mapping(1024, 200, seed=11), draft_vocab_size=200)
    from ckpttools.ops.remap import remap

    remap(w / "d", w / "out", to=w / "other", fill="target", target=w / "t")
    return w / "out"


def _export_training(w: Path) -> Path:
    build_drafter(w / "d", "training", seed=7, max_shard_size=60_000)
    (w / "d" / "optimizer.pkl").write_bytes(b"\x80\x04K\x01.")
    (w / "d" / "README.md").write_text("a drafter\n")
    build_target(w / "t")
    from ckpttools.ops.export import export

    export(w / "d", w / "out", target=w / "t", max_shard_size="60KB")
    return w / "out"


def _export_vllm(w: Path) -> Path:
    build_drafter(w / "d", "sglang", seed=8, num_layers=2)
    build_target(w / "t")
    from ckpttools.ops.export import export

    export(w / "d", w / "out", format="vllm", target=w / "t", dtype="fp16")
    return w / "out"


def _fix_eagle(w: Path) -> Path:
    build_drafter(w / "d", "eagle", seed=10)
    (w / "d" / "tokenizer.json").write_text('{"model": {"vocab": {}}}')
    build_target(w / "t")
    from ckpttools.ops.fix import fix

    fix(w / "d", w / "out", target=w / "t")
    return w / "out"


def _vocab_build(w: Path) -> Path:
    np.save(w / "freq.npy", np.random.default_rng(12).integers(0, 500, 1024).astype(np.int64))
    from ckpttools.vocab.diff import build_vocab

    build_vocab(w / "freq.npy", 128, w / "out.safetensors")
    return w / "out.safetensors"


CASES: dict[str, Callable[[Path], Path]] = {
    "remap-zero": _remap_zero,
    "remap-mean-sharded": _remap_mean_sharded,
    "remap-target-fill": _remap_target_fill,
    "export-training": _export_training,
    "export-vllm-fp16": _export_vllm,
    "fix-eagle": _fix_eagle,
    "vocab-build": _vocab_build,
}

_VOLATILE = ("created", "version", "seconds")


def _normal(obj: Any, work: Path) -> Any:
    """A manifest with its times, version and machine paths taken out."""
    if isinstance(obj, dict):
        return {k: _normal(v, work) for k, v in obj.items() if k not in _VOLATILE}
    if isinstance(obj, list):
        return [_normal(v, work) for v in obj]
    if isinstance(obj, str):
        return obj.replace(str(work.resolve()), "<work>").replace(str(work), "<work>")
    return obj


def _file(p: Path, work: Path) -> Any:
    raw = p.read_bytes()
    if p.name == "ckpttools-manifest.json":
        return _normal(json.loads(raw), work)
    if p.suffix == ".safetensors":  # the header as data (its metadata may name an input's path), then the bytes
        n = int.from_bytes(raw[:8], "little")
        return {"header": _normal(json.loads(raw[8 : 8 + n]), work), "data": hashlib.sha256(raw[8 + n :]).hexdigest()}
    return hashlib.sha256(raw).hexdigest()


def fingerprint(out: Path, work: Path) -> dict[str, Any]:
    """Each output file's sha256; the manifest and safetensors headers as normalized data."""
    if out.is_file():
        return {out.name: _file(out, work)}
    return {p.name: _file(p, work) for p in sorted(out.iterdir())}


def run_case(name: str, work: Path) -> dict[str, Any]:
    return fingerprint(CASES[name](work), work)


def main() -> None:
    result = {}
    for name in CASES:
        with tempfile.TemporaryDirectory() as d:
            result[name] = run_case(name, Path(d))
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
