"""Property test: our header reader and the safetensors library agree on every file.

Random headers and byte layouts, valid and invalid, go to both
``ckpttools.io.safetensors_header.read_header`` and ``safetensors.safe_open``. They must
agree on accept or refuse; on accept, names, shapes, dtypes and bytes must be equal.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpttools.errors import CheckpointFormatError
from ckpttools.io.safetensors_header import DTYPE_BITS, read_header

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402

DTYPES = sorted(DTYPE_BITS) + ["Q9", "f32", ""]
AGREEMENT = {"accept": 0, "refuse": 0}

dims = st.one_of(st.integers(0, 5), st.integers(-2, -1), st.just(True), st.just(1.0), st.just(1 << 62))


@st.composite
def safetensors_file(draw) -> bytes:
    n = draw(st.integers(0, 4))
    names = draw(st.lists(st.text(alphabet="abcxyz._-0", min_size=1, max_size=6), min_size=n, max_size=n, unique=True))
    header: dict = {}
    off = 0
    for name in names:
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(dims, max_size=3))
        bits = DTYPE_BITS.get(dtype, 32)
        numel = 1
        for d in shape:
            numel *= d if isinstance(d, int) and not isinstance(d, bool) and d >= 0 else 1
        size = numel * bits // 8 if numel < 1 << 20 else 4
        size += draw(st.sampled_from([0, 0, 0, 0, 1, -1, 4]))  # sometimes the wrong size
        gap = draw(st.sampled_from([0, 0, 0, 0, 4, -4]))  # sometimes a gap or an overlap
        b = max(0, off + gap)
        entry = {"dtype": dtype, "shape": shape, "data_offsets": [b, max(b, b + size)]}
        if draw(st.integers(0, 20)) == 0:
            entry["extra"] = 1
        if draw(st.integers(0, 30)) == 0:
            entry = draw(st.sampled_from([None, [], "x", {"dtype": dtype}]))
        header[name] = entry
        off = max(b, b + size)
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.sampled_from([{"format": "pt"}, {}, None, {"x": 1}, "s", {"a": {"b": "c"}}]))
    text = json.dumps(header)
    mutation = draw(st.integers(0, 12))
    if mutation == 0 and '"dtype"' in text:
        text = text.replace('"dtype"', '"dtype": "F32", "dtype"', 1)  # a duplicate field
    elif mutation == 1:
        text = " " * draw(st.integers(1, 9)) + text  # leading white space
    elif mutation == 2:
        text = text + " " * draw(st.integers(1, 9))  # padding, as safetensors writes
    elif mutation == 3 and names:
        text = text[:-1] + ", " + json.dumps(names[0]) + ': {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}'
    raw = text.encode()
    if mutation == 4 and raw:
        i = draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([draw(st.integers(0, 255))]) + raw[i + 1 :]  # one byte flipped
    data_len = off + draw(st.sampled_from([0, 0, 0, 0, 1, 3, -1]))
    hlen = len(raw) if draw(st.integers(0, 15)) else draw(st.sampled_from([0, len(raw) + 8, 1 << 40]))
    return (
        struct.pack("<Q", hlen)
        + raw
        + bytes(range(256)) * (max(0, data_len) // 256)
        + b"\x07" * (max(0, data_len) % 256)
    )


def _theirs(path: Path):
    try:
        with safe_open(str(path), "pt") as f:
            out = {}
            for k in f.keys():
                sl = f.get_slice(k)
                out[k] = (sl.get_dtype(), tuple(sl.get_shape()))
            return out
    except Exception:  # noqa: BLE001 - any refusal by the library counts as a refusal
        return None


@settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=safetensors_file())
def test_reader_agrees_with_safetensors(tmp_path_factory, data: bytes) -> None:
    p = tmp_path_factory.mktemp("prop") / "x.safetensors"
    p.write_bytes(data)
    theirs = _theirs(p)
    try:
        ours = read_header(p)
    except CheckpointFormatError:
        ours = None
    assert (ours is None) == (theirs is None), f"ours {'refused' if ours is None else 'accepted'}, safetensors not"
    if ours is None:
        AGREEMENT["refuse"] += 1
        return
    AGREEMENT["accept"] += 1
    assert {k: (t.dtype, t.shape) for k, t in ours.tensors.items()} == theirs
    raw = p.read_bytes()
    with safe_open(str(p), "pt") as f:
        for k, t in ours.tensors.items():
            if t.dtype in ("F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "C64") or not t.numel:
                continue
            theirs_bytes = f.get_tensor(k).reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
            assert raw[t.start : t.end] == theirs_bytes, k


def test_agreement_counts() -> None:
    """Runs after the property test (file order): both verdicts were exercised."""
    print(
        f"\nheader reader vs safetensors: {AGREEMENT['accept']} accepted by both, {AGREEMENT['refuse']} refused by both"
    )
    assert AGREEMENT["accept"] >= 50 and AGREEMENT["refuse"] >= 50
