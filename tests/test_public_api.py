"""The Python API: every public name, in random orders, each in an interpreter that has imported no
ckpttools module (a child of a zygote that imported torch and transformers only, tests/zygote.py);
and the README's Python section, run as written in a fresh interpreter."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import ckpttools
from ckpttools.demo.tiny import build_drafter, build_target
from ckpttools.vocab.diff import save_mapping
from ckpttools.vocab.mapping import VocabMapping

from .zygote import TORCH, Zygote

REPO = Path(__file__).resolve().parents[1]

#: how each public name is exercised (names of classes and errors are checked as types)
CALLS = {
    "open_checkpoint": "with ckpttools.open_checkpoint('d') as ck: assert ck.tensors",
    "inspect": "assert ckpttools.inspect('d').kind == 'sglang'",
    "validate": "assert ckpttools.validate('d', target='t').ok",
    "fix": "assert ckpttools.fix('e', out / 'fixed').output",
    "diff_vocab": "assert ckpttools.diff_vocab('d', 'm.safetensors').slots_total == 256",
    "build_vocab": "assert ckpttools.build_vocab(np.arange(1024.0), 16, out / 'map.safetensors').draft_vocab_size == 16",
    "remap": "assert ckpttools.remap('d', out / 'remapped', to='m.safetensors').rows_carried >= 0",
    "export": "assert ckpttools.export('d', out / 'exported').output",
    "verify": (
        "try:\n    ckpttools.verify('http://127.0.0.1:9', prompts='p.jsonl', num_prompts=1)\n"
        "except ckpttools.ServerError:\n    pass\nelse:\n    raise AssertionError('no server, no report')"
    ),
    "verify_torch": "assert ckpttools.verify_torch('t', 'd', num_prompts=1, max_new_tokens=4, prompts='p.jsonl').engine",
    "detect_flavor": "assert ckpttools.detect_flavor({'architectures': ['LlamaForCausalLMEagle3']}, ['fc.weight']).kind",
    "load_mapping": "assert ckpttools.load_mapping('m.safetensors').draft_vocab_size == 256",
    "VocabMapping": "assert ckpttools.VocabMapping.identity(8).is_identity",
    "plan_remap": "assert ckpttools.plan_remap('d', out / 'r2', to='m.safetensors').tensors and not (out / 'r2').exists()",
    "plan_export": "assert ckpttools.plan_export('d', out / 'e2').check is not None",
    "plan_fix": "assert ckpttools.plan_fix('e', out / 'f2').config_diff()",
    "plan_vocab": "assert ckpttools.plan_vocab(np.arange(64.0), 8, out / 'v2.safetensors').layout == 'file'",
    "execute": "assert ckpttools.execute(ckpttools.plan_remap('d', out / 'r3', to='m.safetensors')).bytes_written > 0",
    "measure": (
        "r = ckpttools.measure(ckpttools.MeasureRequest.from_options(['d'], engine='torch', target='t', "
        "num_prompts=1, max_new_tokens=4, prompts='p.jsonl'))\nassert r.engine == 'torch' and r.accept_length"
    ),
    "MeasureRequest": (
        "try:\n    ckpttools.MeasureRequest.from_options(['d', 'e'], host='http://127.0.0.1:9')\n"
        "except ckpttools.RequestError:\n    pass\nelse:\n    raise AssertionError('several drafters need a launch')"
    ),
    "quantize": "assert ckpttools.quantize('d', out / 'q').quantized",
    "plan_quantize": "assert ckpttools.plan_quantize('d', out / 'q2').config['quantization_config']",
    "compare_drafters": (
        "from ckpttools.engines.launch import LaunchSpec\ntry:\n    ckpttools.compare_drafters("
        "LaunchSpec('vllm', 't', 'd'), ['nope', 'd'], engine='vllm')\n"
        "except ckpttools.CheckpointNotFoundError:\n    pass\nelse:\n    raise AssertionError('a missing drafter is refused before any load')"
    ),
    "swap_drafter": (
        "try:\n    ckpttools.swap_drafter('http://127.0.0.1:9', 'd', api_key='k')\n"
        "except ckpttools.ServerError:\n    pass\nelse:\n    raise AssertionError('no server, no swap')"
    ),
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("api")
    build_drafter(w / "d", "sglang")
    build_drafter(w / "e", "eagle")
    build_target(w / "t")
    save_mapping(VocabMapping.from_ids(np.arange(100, 356), 1024), w / "m.safetensors")
    (w / "p.jsonl").write_text('{"input_ids": [1, 2, 3, 4]}\n')
    return w


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    """Children that start with torch and transformers imported and no ckpttools module."""
    z = Zygote(dict(os.environ), tmp_path_factory.mktemp("api-zygote"), preload=TORCH)
    yield z
    z.close()


def test_no_public_name_is_a_submodule() -> None:
    pkg = REPO / "ckpttools"
    modules = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    assert not set(ckpttools.__all__) & modules


@pytest.mark.parametrize("seed", range(4))
def test_every_public_name_in_a_random_order(inputs: Path, tmp_path: Path, zygote: Zygote, seed: int) -> None:
    names = list(ckpttools.__all__)
    random.Random(seed).shuffle(names)
    lines = [
        "import sys",
        "ckpttools_before = [m for m in sys.modules if m.split('.')[0] == 'ckpttools']",
        "import types, numpy as np, ckpttools",
        "from pathlib import Path",
        f"out = Path({str(tmp_path)!r})",
    ]
    for i, n in enumerate(names):
        lines.append(f"obj = getattr(ckpttools, {n!r})")
        lines.append(f"assert not isinstance(obj, types.ModuleType), {n!r}")
        if n in CALLS:
            lines.append(CALLS[n])
        # submodules imported by the calls so far must not have replaced an earlier name
        lines.append(f"assert all(not isinstance(getattr(ckpttools, m), types.ModuleType) for m in {names[: i + 1]!r})")
    lines.append("assert not ckpttools_before, ckpttools_before")
    rc, _, err = zygote.run([], inputs, 600, code="\n".join(lines))
    assert rc == 0, f"order {names}:\n{err.decode(errors='replace')[-2000:]}"


def test_every_operation_is_called() -> None:
    ops = {"inspect", "validate", "fix", "diff_vocab", "build_vocab", "remap", "export", "verify", "verify_torch"}
    assert ops <= set(CALLS) and ops <= set(ckpttools.__all__)


def test_readme_python_section_runs(tmp_path: Path) -> None:
    text = (REPO / "README.md").read_text()
    section = text.split("## Python API", 1)[1]
    code = textwrap.dedent(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    build_drafter(tmp_path / "drafter", "sglang")
    build_drafter(tmp_path / "drafter-k2", "sglang")
    build_target(tmp_path / "target")
    save_mapping(VocabMapping.from_ids(np.arange(300, 556), 1024), tmp_path / "mapping-k25.safetensors")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "drafter-k25" / "model.safetensors").is_file()


def test_all_lists_every_lazy_name() -> None:
    from ckpttools import _LAZY

    assert set(_LAZY) <= set(ckpttools.__all__) and len(ckpttools.__all__) == len(set(ckpttools.__all__))
