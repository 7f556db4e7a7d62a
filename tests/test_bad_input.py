"""Every kind of bad input: one clear line, a hint, exit code 2, no traceback."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import save_file

from ckpttools.cli.commands import cli


def _raw(path: Path, header: bytes | str, data: bytes = b"", n: int | None = None) -> Path:
    h = header.encode() if isinstance(header, str) else header
    path.write_bytes(struct.pack("<Q", len(h) if n is None else n) + h + data)
    return path


def _good(path: Path) -> Path:
    save_file({"w": np.arange(64, dtype=np.float32), "v": np.ones(8, np.float32)}, str(path))
    return path


def case_missing(tmp: Path) -> Path:
    return tmp / "does-not-exist"


def case_no_weights(tmp: Path) -> Path:
    d = tmp / "empty"
    d.mkdir()
    (d / "README.md").write_text("hi")
    return d


def case_truncated(tmp: Path) -> Path:
    p = _good(tmp / "t.safetensors")
    p.write_bytes(p.read_bytes()[:-100])
    return p


def case_header_past_end(tmp: Path) -> Path:
    return _raw(tmp / "h.safetensors", b"{}", n=5000)


def case_header_absurd(tmp: Path) -> Path:
    return _raw(tmp / "a.safetensors", b"{}" + b" " * 6, n=1 << 50)


def case_header_not_json(tmp: Path) -> Path:
    return _raw(tmp / "j.safetensors", b"this is not json", b"\0" * 16)


def case_range_outside(tmp: Path) -> Path:
    h = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})
    return _raw(tmp / "o.safetensors", h, b"\0" * 16)


def case_overlap(tmp: Path) -> Path:
    h = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
            "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
        }
    )
    return _raw(tmp / "ov.safetensors", h, b"\0" * 24)


def case_index_missing_shard(tmp: Path) -> Path:
    d = tmp / "idx"
    d.mkdir()
    _good(d / "model-00001-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model-00001-of-00002.safetensors", "x": "model-00002-of-00002.safetensors"}})
    )
    return d


def case_shard_escapes(tmp: Path) -> Path:
    d = tmp / "esc"
    d.mkdir()
    _good(tmp / "outside.safetensors")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../outside.safetensors"}}))
    return d


def case_pickle_dir(tmp: Path) -> Path:
    d = tmp / "pkl"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")  # a real pickle of the int 1
    return d


def case_pickle_file(tmp: Path) -> Path:
    p = tmp / "weights.pt"
    p.write_bytes(b"\x80\x04K\x01.")
    return p


def case_config_not_json(tmp: Path) -> Path:
    d = tmp / "badcfg"
    d.mkdir()
    _good(d / "model.safetensors")
    (d / "config.json").write_text("{'architectures': nope")
    return d


CASES = {
    "missing": (case_missing, "no such file or directory"),
    "no-weights": (case_no_weights, "no .safetensors weights in this directory"),
    "truncated": (case_truncated, "truncated or bad offsets"),
    "header-past-end": (case_header_past_end, "header length 5000 runs past the end of the file"),
    "header-absurd": (case_header_absurd, "is not plausible"),
    "header-not-json": (case_header_not_json, "header is not valid JSON"),
    "range-outside": (case_range_outside, "ends at data byte 32 but the file holds only 16 data bytes"),
    "overlap": (case_overlap, "tensors 'a' and 'b' overlap"),
    "index-missing-shard": (
        case_index_missing_shard,
        "names shard 'model-00002-of-00002.safetensors', which is missing",
    ),
    "shard-escapes": (case_shard_escapes, "outside"),
    "pickle-dir": (case_pickle_dir, "pickle-based weights are refused"),
    "pickle-file": (case_pickle_file, "pickle-based weights are refused"),
    "config-not-json": (case_config_not_json, "config.json: not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_clear_line_with_exit_2(case, tmp_path):
    make, expected = CASES[case]
    path = make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    r = CliRunner().invoke(cli, ["inspect", str(path)])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("ckpt: error: ") and expected in lines[0]
    assert len(lines) == 2 and lines[1].startswith("ckpt: hint: ")
    assert "Traceback" not in r.output and r.stdout == ""
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # input untouched


def test_pickle_is_never_unpickled(tmp_path, monkeypatch):
    import pickle

    def boom(*a, **k):
        raise AssertionError("unpickled!")

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    r = CliRunner().invoke(cli, ["inspect", str(case_pickle_file(tmp_path))])
    assert r.exit_code == 2 and "convert to safetensors" in r.stderr


def test_debug_variable_shows_the_traceback(tmp_path):
    r = CliRunner(env={"CKPT_DEBUG": "1"}).invoke(cli, ["inspect", str(tmp_path / "nope")])
    assert r.exit_code != 0 and r.exception is not None
    assert isinstance(r.exception, FileNotFoundError)


def test_bad_usage_is_exit_2():
    r = CliRunner().invoke(cli, ["inspect"])
    assert r.exit_code == 2 and "Missing argument" in r.stderr
