"""The drafters the swap tests measure against one ``repeat`` target (ckpttools.demo.tiny's known
pairs): ``id`` (4.0 at steps 3 by construction), ``swap`` (1.0), ``perm`` (id's 128 slots in
another order: d2t and lm_head rows moved together, so 4.0 only if the running map is replaced
too), ``half`` (id remapped to tokens 0..127: the tokens from 128 up are not drafted, a figure in
between), and ``twolayer`` (another config: it cannot take a one-layer drafter's place)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ckpttools.demo.tiny import KNOWN_VD_HI, KNOWN_VD_LO, build_known_pair, known_prompts
from ckpttools.ops.export import export
from ckpttools.ops.remap import remap
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping


def build(root: Path, fmt: str) -> tuple[Path, dict[str, Path], Path]:
    """(target, drafters by name in ``fmt``'s layout, prompts)."""
    root.mkdir(parents=True, exist_ok=True)
    tp, did = build_known_pair(root / "id", target="repeat", drafter="id")
    _, dsw = build_known_pair(root / "sw", target="repeat", drafter="swap")
    _, d2 = build_known_pair(root / "two", target="repeat", drafter="id", drafter_layers=2)
    ids = np.arange(KNOWN_VD_LO, KNOWN_VD_HI)
    save_mapping(VocabMapping.from_ids(ids[np.random.default_rng(0).permutation(len(ids))], 256), root / "perm.st")
    save_mapping(VocabMapping.from_ids(np.arange(len(ids)), 256), root / "half.st")
    remap(did, root / "drafter-perm", to=root / "perm.st")
    remap(did, root / "drafter-half", to=root / "half.st")
    src = {"id": did, "swap": dsw, "perm": root / "drafter-perm", "half": root / "drafter-half", "twolayer": d2}
    out = {k: Path(export(d, root / f"{fmt}-{k}", format=fmt, target=tp).output) for k, d in src.items()}
    prompts = root / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"input_ids": p}) for p in known_prompts(6)))
    return tp, out, prompts
