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
from ckpttools.io.safetensors_header import DTYPE_BITS, _fast_columns, _parse_entries, read_header

from .conftest import Scratch

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402

DTYPES = sorted(DTYPE_BITS) + ["Q9", "f32", ""]
AGREEMENT = {"accept": 0, "refuse": 0, "fast": 0}
#: test_agreement_counts reads what the property tests counted in this process: one worker, file order
pytestmark = pytest.mark.xdist_group("header-property")

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
    # compact, as every writer writes it (the reader's column-wise path), or with spaces
    text = json.dumps(header, separators=(",", ":") if draw(st.booleans()) else None)
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
def test_reader_agrees_with_safetensors(scratch: Scratch, data: bytes) -> None:
    p = scratch.fresh() / "x.safetensors"
    p.write_bytes(data)
    theirs = _theirs(p)
    try:
        ours = read_header(p)
    except CheckpointFormatError:
        ours = None
    assert (ours is None) == (theirs is None), f"ours {'refused' if ours is None else 'accepted'}, safetensors not"
    _fast_agrees_with_entries(data)
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


WHOLE_BYTE = ["F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "C64"]
#: what a writer could have done to a well-formed compact header, each aimed at one of the column-wise
#: path's guards: a key given twice (top level, in an entry, __metadata__), an escape, a bool, a float,
#: -0 and a negative dim, a field too many, white space, an overwritten entry, a gap, a short range
TWEAKS = [
    "none",
    "none",
    "none",
    "dup-entry-field",
    "dup-top-number",
    "dup-top-same",
    "dup-metadata",
    "escape-name",
    "escape-key",
    "bool-dim",
    "float-dim",
    "minus-zero",
    "negative-dim",
    "extra-field",
    "spaces",
    "gap",
    "short",
    "dash-name",
]


@st.composite
def compact_file(draw) -> tuple[bytes, str]:
    """A well-formed compact header (as writers write them), entries in any order, then one tweak."""
    n = draw(st.integers(1, 6))
    names = draw(st.lists(st.text(alphabet="abcxyz._0", min_size=1, max_size=6), min_size=n, max_size=n, unique=True))
    entries = []
    for name in names:
        dtype = draw(st.sampled_from(WHOLE_BYTE))
        shape = draw(st.lists(st.integers(1, 4), max_size=3))
        numel = 1
        for d in shape:
            numel *= d
        entries.append((name, dtype, shape, numel * DTYPE_BITS[dtype] // 8))
    order = draw(st.permutations(range(n)))  # data in another order than the names
    off, header = 0, {}
    for i in order:
        name, dtype, shape, size = entries[i]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
        off += size
    header = dict(sorted(header.items()))
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.sampled_from([{"format": "pt"}, {}, {"a": "b", "c": "d"}]))
    text = json.dumps(header, separators=(",", ":"))
    tweak = draw(st.sampled_from(TWEAKS))
    first = json.dumps(names[0])
    if tweak == "dup-entry-field":
        text = text.replace('"dtype":', '"dtype":"F32","dtype":', 1)
    elif tweak == "dup-top-number":
        text = "{" + first + ":5," + text[1:]
    elif tweak == "dup-top-same":
        text = "{" + first + ":" + json.dumps(header[names[0]], separators=(",", ":")) + "," + text[1:]
    elif tweak == "dup-metadata":
        text = text[:-1] + ',"__metadata__":{"x":"y"}}'
    elif tweak == "escape-name":
        text = text.replace(first, first[:-1] + '\\u0061"', 1)
    elif tweak == "escape-key":
        text = text.replace('"shape"', '"sh\\u0061pe"', 1)
    elif tweak == "bool-dim" and "[1" in text:
        text = text.replace('"shape":[1', '"shape":[true', 1)
    elif tweak == "float-dim":
        text = text.replace('"shape":[', '"shape":[1.0,', 1)
    elif tweak == "minus-zero":
        text = text.replace('"data_offsets":[0,', '"data_offsets":[-0,', 1)
    elif tweak == "negative-dim":
        text = text.replace('"shape":[', '"shape":[-1,-1,', 1)
    elif tweak == "extra-field":
        text = text.replace('"dtype":', '"x":"y","dtype":', 1)
    elif tweak == "spaces":
        text = text.replace(",", ", ").replace(":", ": ")
    elif tweak == "dash-name":
        text = text.replace(first, first[:-1] + '-"', 1)
    if tweak == "gap":
        off += 2
    raw = text.encode() + b" " * draw(st.integers(0, 7))
    data_len = off - 1 if tweak == "short" else off
    return struct.pack("<Q", len(raw)) + raw + bytes(range(256)) * (data_len // 256) + b"\x07" * (data_len % 256), tweak


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(case=compact_file())
def test_compact_headers_agree_with_safetensors(scratch: Scratch, case: tuple[bytes, str]) -> None:
    """The headers real checkpoints have (compact text), each with one tweak aimed at a guard of the
    column-wise path: we accept exactly what safetensors accepts, read the same, and the column-wise
    path agrees with the entry-by-entry one."""
    data, tweak = case
    p = scratch.fresh() / "x.safetensors"
    p.write_bytes(data)
    theirs = _theirs(p)
    try:
        ours = read_header(p)
    except CheckpointFormatError:
        ours = None
    assert (ours is None) == (theirs is None), f"{tweak}: ours {'refused' if ours is None else 'accepted'}"
    if ours is not None:
        assert {k: (t.dtype, t.shape) for k, t in ours.tensors.items()} == theirs
    _fast_agrees_with_entries(data)


def _fast_agrees_with_entries(data: bytes) -> None:
    """Where the column-wise path accepts a header, the entry-by-entry one accepts it too and
    reads the same: every name, dtype, shape, byte range and metadata value, in order."""
    if len(data) < 8:
        return
    n = struct.unpack("<Q", data[:8])[0]
    if 8 + n > len(data):
        return
    raw = data[8 : 8 + n]
    fast = _fast_columns(raw, len(data))
    if fast is None:
        return
    AGREEMENT["fast"] += 1
    slow = _parse_entries(raw, len(data), Path("x"), "x")  # raises if it refuses
    from ckpttools.io.safetensors_header import ShardHeader

    quick = ShardHeader(Path("x"), n, len(data), fast[0], columns=fast[1], shard="x")
    assert list(quick.tensors.items()) == list(slow.tensors.items())
    assert quick.metadata == slow.metadata and quick.names == slow.names
    assert quick.dtype_totals() == slow.dtype_totals()


def test_agreement_counts() -> None:
    """Runs after the property test (file order): both verdicts were exercised, and the
    column-wise path (compact text) too."""
    print(
        f"\nheader reader vs safetensors: {AGREEMENT['accept']} accepted by both, {AGREEMENT['refuse']} refused by "
        f"both; {AGREEMENT['fast']} read column-wise"
    )
    assert AGREEMENT["accept"] >= 50 and AGREEMENT["refuse"] >= 50 and AGREEMENT["fast"] >= 20
