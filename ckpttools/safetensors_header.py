"""Reading and checking a .safetensors header without touching tensor data.

The format: 8 bytes little-endian u64 ``N``, then ``N`` bytes of JSON mapping tensor
names to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the
end of the header) plus an optional ``"__metadata__"`` of strings, then the data.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from math import prod
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

import orjson

from .errors import CheckpointFormatError

__all__ = ["DTYPE_SIZES", "MAX_HEADER_BYTES", "TensorInfo", "ShardHeader", "read_header"]

#: bytes per element of every safetensors dtype this tool understands
DTYPE_SIZES: dict[str, int] = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
}

#: the safetensors library refuses headers larger than this; so do we
MAX_HEADER_BYTES = 100_000_000


class TensorInfo(NamedTuple):
    """Where one tensor lives: its shard and absolute byte range in that file.

    A NamedTuple rather than a dataclass: a 1 TB target has tens of thousands of these.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: str
    start: int
    end: int
    numel: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ShardHeader:
    """The parsed header of one .safetensors file."""

    path: Path
    header_len: int
    file_size: int
    metadata: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)

    @property
    def data_start(self) -> int:
        return 8 + self.header_len


def _fail(path: Path, msg: str, tensor: str | None = None) -> CheckpointFormatError:
    return CheckpointFormatError(f"{path}: {msg}", path=path, tensor=tensor)


def read_header(path: str | Path, shard_name: str | None = None) -> ShardHeader:
    """Parse and check the header of a .safetensors file, reading only the header bytes.

    Args:
        path: the file.
        shard_name: the name recorded as each tensor's shard (default: the file name).

    Returns:
        a :class:`ShardHeader` whose tensors carry absolute byte ranges.

    Raises:
        CheckpointFormatError: truncated file, absurd header length, header not JSON,
            unknown dtype, size/shape mismatch, byte ranges outside the data or overlapping.

    Example:
        >>> read_header("model.safetensors").tensors["fc.weight"].shape  # doctest: +SKIP
        (64, 192)
    """
    path = Path(path)
    shard = shard_name or path.name
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise _fail(path, f"truncated: {size} bytes, shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", f.read(8))
        if n == 0 or n > MAX_HEADER_BYTES:
            raise _fail(path, f"header length {n} is not plausible (limit {MAX_HEADER_BYTES} bytes)")
        if 8 + n > size:
            raise _fail(
                path, f"header length {n} runs past the end of the file ({size} bytes): truncated"
            )
        raw = f.read(n)
    try:
        header = orjson.loads(raw)  # 3x faster than json on a 1 TB target's 64 headers
    except orjson.JSONDecodeError as e:
        raise _fail(path, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")

    data_start = 8 + n
    data_len = size - data_start
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise _fail(path, "__metadata__ is not an object")
    tensors: dict[str, TensorInfo] = {}
    sizes = DTYPE_SIZES
    for name, entry in header.items():
        try:  # fast path: a well-formed entry, checked with C-level builtins
            dtype = entry["dtype"]
            shape = entry["shape"]
            b, e = entry["data_offsets"]
            numel = prod(shape)
            ok = (
                numel.__class__ is int and shape.__class__ is list and (not shape or min(shape) >= 0)
                and b.__class__ is int and e.__class__ is int and 0 <= b <= e
                and e - b == numel * sizes[dtype] and e <= data_len
            )  # fmt: skip
        except (TypeError, KeyError, ValueError, AttributeError):
            ok = False
        if not ok:
            _explain_entry(path, name, entry, data_len)
        tensors[name] = TensorInfo(name, dtype, tuple(shape), shard, data_start + b, data_start + e, numel)

    prev: TensorInfo | None = None
    for t in sorted(tensors.values(), key=itemgetter(4, 5)):  # (start, end)
        if prev is not None and t.start < prev.end and t.nbytes and prev.nbytes:
            raise _fail(path, f"tensors {prev.name!r} and {t.name!r} overlap in the file", t.name)
        prev = t
    return ShardHeader(path, n, size, {str(k): str(v) for k, v in metadata.items()}, tensors)


def _explain_entry(path: Path, name: str, entry: object, data_len: int) -> None:
    """Raise the precise error for an entry that failed the fast check."""
    if not isinstance(entry, dict):
        raise _fail(path, f"entry for tensor {name!r} is not an object", name)
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offs = entry.get("data_offsets")
    if dtype not in DTYPE_SIZES:
        raise _fail(path, f"tensor {name!r} has unknown dtype {dtype!r}", name)
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise _fail(path, f"tensor {name!r} has a bad shape {shape!r}", name)
    if not (
        isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs) and 0 <= offs[0] <= offs[1]
    ):
        raise _fail(path, f"tensor {name!r} has bad data_offsets {offs!r}", name)
    expect = prod(shape) * DTYPE_SIZES[dtype]
    if offs[1] - offs[0] != expect:
        raise _fail(
            path,
            f"tensor {name!r}: {dtype}{shape} needs {expect} bytes but its byte range holds {offs[1] - offs[0]}",
            name,
        )
    raise _fail(
        path,
        f"tensor {name!r} ends at data byte {offs[1]} but the file holds only {data_len} data bytes: "
        "truncated or bad offsets",
        name,
    )
