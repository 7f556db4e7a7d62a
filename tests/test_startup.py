"""Start-up: each command imports what it uses and nothing else.

Each case runs ``python -X importtime -m ckpttools ...`` in a subprocess (a fresh interpreter,
so nothing another test imported counts) and reads the modules it imported from that report.
The assertions name modules, never timings: a heavy module imported by a command that does not
need it is a failure on any machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ckpttools.demo.tiny import build_drafter, build_target

REPO = Path(__file__).resolve().parents[1]

#: imported by no read-only command: the model runtimes, the schema checker, the Hub client and
#: HTTP, templates, tokenizers, progress bars, plots, the package metadata reader (~20 ms)
NEVER_FOR_READING = [
    "torch",
    "transformers",
    "jsonschema",
    "huggingface_hub",
    "httpx",
    "jinja2",
    "tokenizers",
    "tqdm",
    "matplotlib",
    "ml_dtypes",
    "xxhash",
    "concurrent.futures",
    "importlib.metadata",
]
#: what inspect --json does not use: the table renderers, logging (notes install it when one is
#: said), the checks and engine tables of validate, the writer, the archive modules shutil brings
NOT_FOR_INSPECT_JSON = [
    "ckpttools.cli.render",
    "ckpttools.ops.validate",
    "ckpttools.ops.validate_report",
    "ckpttools.engines.releases",
    "ckpttools.engines.claim_texts",
    "ckpttools.engines.load_plan",
    "ckpttools.io.writer",
    "ckpttools.io.plan",
    "ckpttools.io.write_plan",
    "ckpttools.io.hub",
    "ckpttools.vocab.tokens",
    "logging",
    "shutil",
]


def imported(*args: str, cwd: Path) -> tuple[set[str], str]:
    """The modules ``python -m ckpttools ARGS`` imports (from -X importtime), and its stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ckpttools", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    mods = {m.group(1) for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", r.stderr, re.M)}
    assert "ckpttools" in mods, "no -X importtime report on stderr"
    return mods, r.stdout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("startup")
    build_drafter(base / "drafter")
    build_target(base / "target")
    return base


def test_inspect_json_of_a_drafter_imports_only_what_it_uses(tiny: Path) -> None:
    mods, out = imported("inspect", str(tiny / "drafter"), "--json", cwd=tiny)
    assert json.loads(out)["vocab_mapping"] is not None  # it did read d2t/t2d (numpy's work)
    assert "numpy" in mods
    assert not mods & set(NEVER_FOR_READING + NOT_FOR_INSPECT_JSON), sorted(
        mods & set(NEVER_FOR_READING + NOT_FOR_INSPECT_JSON)
    )


def test_inspect_json_of_a_target_needs_no_numpy(tiny: Path) -> None:
    """No d2t/t2d to read: headers only, and no array library."""
    mods, out = imported("inspect", str(tiny / "target"), "--json", "--no-tensors", cwd=tiny)
    assert json.loads(out)["kind"] == "target"
    unwanted = set(NEVER_FOR_READING + NOT_FOR_INSPECT_JSON + ["numpy"])
    assert not mods & unwanted, sorted(mods & unwanted)


def test_inspect_as_a_table_loads_the_renderers(tiny: Path) -> None:
    """The other side of the --json case: the table needs cli.render, and gets it."""
    mods, out = imported("inspect", str(tiny / "target"), cwd=tiny)
    assert "ckpttools.cli.render" in mods and "target" in out
    assert not mods & set(NEVER_FOR_READING), sorted(mods & set(NEVER_FOR_READING))


#: what an export of an unquantized drafter to SGLang does not use: TensorRT-LLM's layout and FP8
#: dequantization (shutil, which the writer now imports only to clean up or copy a side file, comes
#: beside the copy with importlib.metadata's zipfile, for the manifest's version)
NOT_FOR_EXPORT = ["ckpttools.ops.export_trtllm", "ckpttools.ops.quantize"]


def test_export_to_sglang_imports_neither_trtllm_nor_quantize(tiny: Path) -> None:
    """The whole run of the common export, validate of the output included: what it does not use
    it does not import."""
    mods, out = imported("export", str(tiny / "drafter"), "-o", "out", "--quiet", cwd=tiny)
    assert (tiny / "out" / "model.safetensors").is_file() and "OK: no errors" in out, out
    assert {"ckpttools.ops.export", "ckpttools.io.writer"} <= mods
    assert not mods & set(NOT_FOR_EXPORT), sorted(mods & set(NOT_FOR_EXPORT))


def test_help_imports_no_library_module(tiny: Path) -> None:
    mods, out = imported("--help", cwd=tiny)
    assert "inspect" in out and "export" in out
    library = {
        m
        for m in mods
        if m.startswith(("ckpttools.ops", "ckpttools.measuring", "ckpttools.engines", "ckpttools.vocab"))
    }
    library |= mods & {"ckpttools.io.checkpoint", "ckpttools.io.safetensors_header", "ckpttools.cli.render"}
    assert not library, sorted(library)
    assert not mods & set(NEVER_FOR_READING + ["numpy", "orjson", "logging"]), sorted(
        mods & set(NEVER_FOR_READING + ["numpy", "orjson", "logging"])
    )


def test_every_renderer_a_command_names_exists() -> None:
    """Commands name their renderer as a string (cli.render is imported only to render a table):
    each name must be a function of ckpttools.cli.render."""
    from ckpttools.cli import render

    source = (REPO / "ckpttools" / "cli" / "commands.py").read_text()
    names = set(re.findall(r'_show\([^\n]*?"(render_[a-z_]+)"', source))
    assert len(names) >= 10, names
    assert all(callable(getattr(render, n, None)) for n in names), sorted(n for n in names if not hasattr(render, n))


# ------------------------------------------------------------------ the faster paths mean the same
def test_layer_ids_and_midlayer_match_the_line_anchored_patterns() -> None:
    """flavor's literal-led scans find what the ^-anchored (re.M) patterns they replaced found."""
    import random

    from ckpttools.engines.flavor import _has_midlayer, _layer_ids

    old_ids = re.compile(r"^(?:model\.)?layers\.([^.\n]*)", re.M)
    old_mid = re.compile(r"^(?:model\.)?midlayer\.", re.M)
    parts = ["layers.", "model.", "midlayer.", "1", "10", "0", ".", "x", "\n", "", "layers.1", "model.layers.2.a"]
    rng = random.Random(7)
    for _ in range(20_000):
        names = ["".join(rng.choice(parts) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(0, 6))]
        joined = "\n".join(names)
        assert _layer_ids(joined) == set(old_ids.findall(joined)), names
        assert _has_midlayer(joined) == bool(old_mid.search(joined)), names


@pytest.mark.parametrize(
    "raw, byte",
    [
        (b'{"a": "x\x80y"}', 8),  # a lone continuation byte inside a string
        (b'{"a": "\xed\xa0\x80"}', 7),  # an encoded surrogate
        (b'{"a": 1, \xff}', 9),  # outside any string (invalid JSON there too: UTF-8 is named first)
    ],
)
def test_json_that_is_not_utf8_is_named_so(raw: bytes, byte: int) -> None:
    """UTF-8 is checked only when orjson refuses the text: the error is the one it was before."""
    from ckpttools.errors import ConfigError
    from ckpttools.io.inputs import loads_json

    with pytest.raises(ConfigError, match=rf"x\.json: not UTF-8 text \(byte {byte}\)"):
        loads_json(raw, "x.json")
    assert loads_json('{"a": "é"}'.encode(), "x.json") == {"a": "é"}
