"""Reading and checking a .safetensors header without touching tensor data.

The format: 8 bytes little-endian u64 ``N``, then ``N`` bytes of JSON mapping tensor
names to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the
end of the header) plus an optional ``"__metadata__"`` of strings, then the data.
"""

from __future__ import annotations

import os
import struct
from functools import partial
from itertools import chain, compress, islice, repeat
from math import prod
from operator import add, and_, eq, itemgetter, lt, mul, rshift, sub
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

from ckpttools.errors import CheckpointFormatError

__all__ = ["DTYPE_BITS", "DTYPE_SIZES", "MAX_HEADER_BYTES", "TensorInfo", "ShardHeader", "read_header"]

#: bits per element of every dtype the safetensors library (0.8) accepts
DTYPE_BITS: dict[str, int] = {
    "F64": 64,
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "C64": 64,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F4": 4,
    "I64": 64,
    "I32": 32,
    "I16": 16,
    "I8": 8,
    "U64": 64,
    "U32": 32,
    "U16": 16,
    "U8": 8,
    "BOOL": 8,
}

#: bytes per element of the whole-byte dtypes (the ones ckpttools can write and cast)
DTYPE_SIZES: dict[str, int] = {k: v // 8 for k, v in DTYPE_BITS.items() if v % 8 == 0 and k != "C64"}

#: the safetensors library refuses headers larger than this; so do we
MAX_HEADER_BYTES = 100_000_000
_U64 = (1 << 64) - 1
_INT_ONLY = frozenset({int})
_STR_ONLY = frozenset({str})
_LIST_ONLY = frozenset({list})
_TWO_ONLY = frozenset({2})
_GET_DTYPE, _GET_SHAPE, _GET_OFFSETS = itemgetter("dtype"), itemgetter("shape"), itemgetter("data_offsets")
_START, _END = itemgetter(4), itemgetter(5)


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


_DTYPE_NAMES = frozenset(DTYPE_BITS)
#: a TensorInfo from a 7-tuple, made in C (a NamedTuple's own __new__ is Python code)
_MAKE_INFO = partial(tuple.__new__, TensorInfo)
#: bytes per element of every whole-byte dtype safetensors accepts (C64 too: it is read, never written)
_BYTES: dict[str, int] = {k: v // 8 for k, v in DTYPE_BITS.items() if v % 8 == 0}
_BYTE_NAMES = frozenset(_BYTES)
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


class _Columns:
    """A checked header's entries column by column (header order), before any TensorInfo is made:
    what a TensorInfo needs and nothing it can be made from (numel, end), plus the per-dtype sums.

    Only flat tuples of strings and ints: no per-tensor container, and none the garbage
    collector walks twice (it untracks a tuple of atoms the first time it sees one; a list it
    walks at every collection: a 1 TB target's columns as lists cost each one ~5 ms).
    """

    __slots__ = ("names", "dtypes", "dims", "ndims", "begins", "totals")

    def __init__(
        self,
        names: tuple[str, ...],
        dtypes: tuple[str, ...],
        dims: tuple[int, ...],
        ndims: tuple[int, ...],
        begins: tuple[int, ...],
        totals: dict[str, tuple[int, int, int]],
    ) -> None:
        self.names = names
        self.dtypes = dtypes
        self.dims = dims  # every shape's dims, one after another
        self.ndims = ndims
        self.begins = begins  # data offsets, relative to the data section
        self.totals = totals


def _totals(dtypes: Sequence[str], numel: Sequence[int], lengths: Sequence[int]) -> dict[str, tuple[int, int, int]]:
    """dtype -> (tensors, elements, bytes), summed in C."""
    kinds = set(dtypes)
    if len(kinds) == 1:
        return {dtypes[0]: (len(dtypes), sum(numel), sum(lengths))}
    out = {}
    for dt in sorted(kinds):
        sel = list(map(eq, dtypes, repeat(dt)))
        out[dt] = (sum(sel), sum(compress(numel, sel)), sum(compress(lengths, sel)))
    return out


class ShardHeader:
    """The parsed header of one .safetensors file.

    ``tensors`` (a :class:`TensorInfo` per entry) is made on first use: a 1 TB target's
    35,000 entries cost more to turn into objects than to check, and what ``inspect``
    reports (names, counts, per-dtype totals) comes from the checked columns alone.
    """

    __slots__ = ("path", "header_len", "file_size", "metadata", "_tensors", "_columns", "_shard")

    def __init__(
        self,
        path: Path,
        header_len: int,
        file_size: int,
        metadata: dict[str, str] | None = None,
        tensors: dict[str, TensorInfo] | None = None,
        *,
        columns: _Columns | None = None,
        shard: str = "",
    ) -> None:
        self.path = path
        self.header_len = header_len
        self.file_size = file_size
        self.metadata: dict[str, str] = {} if metadata is None else metadata
        self._tensors = tensors if tensors is not None or columns is not None else {}
        self._columns = columns
        self._shard = shard

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    @property
    def tensors(self) -> dict[str, TensorInfo]:
        """Tensor name -> :class:`TensorInfo` (absolute byte ranges), in header order."""
        t = self._tensors
        if t is None:
            c = self._columns
            assert c is not None
            dims = iter(c.dims)
            shapes = list(map(tuple, map(islice, repeat(dims), c.ndims)))
            numel = list(map(prod, shapes))
            starts = list(map(add, c.begins, repeat(self.data_start)))
            stops = map(add, starts, map(mul, numel, map(_BYTES.__getitem__, c.dtypes)))
            rows = zip(c.names, c.dtypes, shapes, repeat(self._shard), starts, stops, numel)
            t = self._tensors = dict(zip(c.names, map(_MAKE_INFO, rows)))
        return t

    @property
    def names(self) -> tuple[str, ...]:
        """The tensor names, in header order (no :class:`TensorInfo` made)."""
        c = self._columns
        return c.names if c is not None else tuple(self.tensors)

    def dtype_totals(self) -> dict[str, tuple[int, int, int]]:
        """dtype -> (tensors, elements, bytes)."""
        c = self._columns
        if c is not None:
            return dict(c.totals)
        ts = self.tensors.values()
        return _totals(
            tuple(map(itemgetter(1), ts)),
            tuple(map(itemgetter(6), ts)),
            tuple(map(sub, map(_END, ts), map(_START, ts))),
        )

    def __repr__(self) -> str:
        return f"ShardHeader({str(self.path)!r}, {self.header_len} header bytes, {len(self.names)} tensors)"


def _fail(path: Path, msg: str, tensor: str | None = None) -> CheckpointFormatError:
    return CheckpointFormatError(f"{path}: {msg}", path=path, tensor=tensor)


def read_header(path: str | Path, shard_name: str | None = None) -> ShardHeader:
    """Parse and check the header of a .safetensors file, reading only the header bytes.

    Accepts exactly what the safetensors library (0.8) accepts: a JSON object of
    tensor entries (dtype, shape and data_offsets of non-negative integers), an optional
    ``__metadata__`` of strings, and byte ranges that tile the data section with no
    gap, overlap or trailing bytes. Duplicate tensor names keep the last entry, as
    safetensors does; a duplicate field inside an entry is refused.

    Args:
        path: the file (a FIFO, device or directory is refused, never read).
        shard_name: the name recorded as each tensor's shard (default: the file name).

    Returns:
        a :class:`ShardHeader` whose tensors carry absolute byte ranges.

    Raises:
        CheckpointFormatError: with the reason.

    Example:
        >>> read_header("model.safetensors").tensors["fc.weight"].shape  # doctest: +SKIP
        (64, 192)
    """
    path = Path(path)
    raw, size = _read_header_bytes(path)
    return parse_header(raw, size, path, shard_name or path.name)


def _read_header_bytes(path: Path) -> tuple[bytes, int]:
    """The header's JSON bytes and the file's size; only the header is read."""
    from ckpttools.io.fsutil import open_regular

    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        n = check_header_length(path, os.pread(fd, 8, 0), size)
        raw = os.pread(fd, n, 8)
    finally:
        os.close(fd)
    if len(raw) != n:
        raise _fail(path, "the file changed while its header was read")
    return raw, size


def check_header_length(path: str | Path, first8: bytes, size: int) -> int:
    """The header length from a file's first 8 bytes, checked against the file's size."""
    path = Path(path)
    if size < 8 or len(first8) < 8:
        raise _fail(path, f"truncated: {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", first8[:8])
    if n > MAX_HEADER_BYTES:
        raise _fail(path, f"header length {n} is not plausible (limit {MAX_HEADER_BYTES} bytes)")
    if 8 + n > size:
        raise _fail(path, f"header length {n} runs past the end of the file ({size} bytes): truncated")
    return n


def parse_header(raw: bytes, size: int, path: str | Path, shard: str) -> ShardHeader:
    """Check a header's JSON bytes, of a file of ``size`` bytes, as :func:`read_header` does.

    For headers read elsewhere (a range request to a Hub file); ``path`` names the file
    in messages and in the result.
    """
    path = Path(path)
    fast = _fast_columns(raw, size)
    if fast is not None:
        meta, columns = fast
        return ShardHeader(path, len(raw), size, meta, columns=columns, shard=shard)
    return _parse_entries(raw, size, path, shard)


def _parse_entries(raw: bytes, size: int, path: Path, shard: str) -> ShardHeader:
    """:func:`parse_header` for any header: each check in turn, with the precise reason for a refusal."""
    n = len(raw)
    header, compact = _parse_json(path, raw)
    data_len = size - 8 - n
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _fail(path, "__metadata__ must be an object of strings")
    tensors = _entries_fast(header, 8 + n, data_len, shard)
    if tensors is None:  # something to explain, or an empty tensor: entry by entry
        tensors = _entries(path, header, raw, 8 + n, data_len, shard)
    # every entry is a dict now; with three fields each and compact text, orjson saw what serde sees
    if not compact or sum(map(len, header.values())) != 3 * len(header):
        _slow_check(path, raw)
    _check_tiling(path, tensors, 8 + n, size)
    return ShardHeader(path, n, size, dict(meta), tensors, shard=shard)


def _fast_columns(raw: bytes, size: int) -> tuple[dict[str, str], _Columns] | None:
    """The common header, checked whole and column by column in C: the metadata and the
    columns, or None for anything else (which the entry-by-entry path then checks, and
    explains when it refuses).

    It accepts only what that path accepts: text with no backslash (so no escape can hide a
    name or a key), no ``-`` (no negative number, no ``-0``) and exactly the strings the
    parsed value holds (five per entry, and the metadata's: so no key was given twice, at the
    top or in an entry); every entry exactly dtype, shape and data_offsets, a whole-byte
    dtype, int dims (no bool, no float) and int offsets, no empty tensor, byte lengths equal
    to numel times the dtype's size, and byte ranges that tile the data section. Every
    number is then bounded by the file's size, so no 64-bit limit can be passed.
    """
    if b"\\" in raw or b"-" in raw:
        return None
    try:
        header = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(header) is not dict:
        return None
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta, strings = {}, 0
    elif type(meta) is dict and set(map(type, meta.values())) <= _STR_ONLY:
        strings = 1 + 2 * len(meta)
    else:
        return None
    n = len(header)
    if not n or raw.count(b'"') != 2 * (5 * n + strings):
        return None
    entries = list(header.values())
    try:
        if sum(map(len, entries)) != 3 * n:
            return None
        dtypes = list(map(_GET_DTYPE, entries))
        shapes = list(map(_GET_SHAPE, entries))
        offsets = list(map(_GET_OFFSETS, entries))
        if not set(dtypes) <= _BYTE_NAMES:
            return None
    except (TypeError, KeyError):  # an entry that is no object, a field missing, an unhashable dtype
        return None
    if not set(map(type, shapes)) <= _LIST_ONLY or not set(map(type, offsets)) <= _LIST_ONLY:
        return None
    if not set(map(len, offsets)) <= _TWO_ONLY:
        return None
    begins, ends = list(map(_FIRST, offsets)), list(map(_SECOND, offsets))
    if not set(map(type, chain(begins, ends, chain.from_iterable(shapes)))) <= _INT_ONLY:  # no bool, no float
        return None
    numel = list(map(prod, shapes))
    lengths = list(map(sub, ends, begins))
    if not all(numel) or list(map(mul, numel, map(_BYTES.__getitem__, dtypes))) != lengths:
        return None
    starts, stops = sorted(begins), sorted(ends)  # no length is 0: tiled iff each start is the last end
    if starts[0] != 0 or stops[-1] != size - 8 - len(raw) or starts[1:] != stops[:-1]:
        return None
    return meta, _Columns(
        tuple(header),
        tuple(dtypes),
        tuple(chain.from_iterable(shapes)),
        tuple(map(len, shapes)),
        tuple(begins),
        _totals(dtypes, numel, lengths),
    )


def _entries_fast(header: dict, data_start: int, data_len: int, shard: str) -> dict[str, TensorInfo] | None:
    """Every entry checked column by column, each check one C-level pass (no Python code per
    tensor); None when any check fails or a tensor is empty, for :func:`_entries` to explain.

    Accepts exactly what :func:`_entries` accepts without an empty tensor: a known dtype,
    a list shape and a 2-list of offsets of ints (``type(x) is int``: no bool, no float),
    non-negative dims, offsets within the data, and a byte length equal to numel times
    the dtype's size, in whole bytes. (Fields beyond the three go to ``_slow_check``.)
    """
    entries = list(header.values())
    try:
        dtypes = list(map(_GET_DTYPE, entries))
        shapes = list(map(_GET_SHAPE, entries))
        offsets = list(map(_GET_OFFSETS, entries))
        if not set(dtypes) <= _DTYPE_NAMES:
            return None
    except (TypeError, KeyError):  # an entry that is no object, a missing field, an unhashable dtype
        return None
    if not set(map(type, shapes)) <= _LIST_ONLY or not set(map(type, offsets)) <= _LIST_ONLY:
        return None
    if not set(map(len, offsets)) <= _TWO_ONLY:
        return None
    flat = list(chain.from_iterable(offsets))
    if not set(map(type, flat)) <= _INT_ONLY or not set(map(type, chain.from_iterable(shapes))) <= _INT_ONLY:
        return None
    begins, ends = flat[0::2], flat[1::2]
    if min(chain.from_iterable(shapes), default=0) < 0 or min(begins, default=0) < 0 or max(ends, default=0) > data_len:
        return None
    numel = list(map(prod, shapes))
    nbits = list(map(mul, numel, map(DTYPE_BITS.__getitem__, dtypes)))
    if not all(numel) or max(nbits, default=0) > _U64 or any(map(and_, nbits, repeat(7))):
        return None
    if list(map(rshift, nbits, repeat(3))) != list(map(sub, ends, begins)):
        return None
    names = header.keys()
    starts = map(add, begins, repeat(data_start))
    stops = map(add, ends, repeat(data_start))
    rows = zip(names, dtypes, map(tuple, shapes), repeat(shard), starts, stops, numel)
    return dict(zip(names, map(_MAKE_INFO, rows)))


def _entries(path: Path, header: dict, raw: bytes, data_start: int, data_len: int, shard: str) -> dict[str, TensorInfo]:
    """Each entry checked (the hot loop: C-level builtins on the well-formed path)."""
    tensors: dict[str, TensorInfo] = {}
    bits = DTYPE_BITS
    maybe_bool = b"true" in raw or b"false" in raw  # only then can a dim be a bool (True == 1)
    for name, entry in header.items():
        try:  # fast path: a well-formed entry, checked with C-level builtins
            dtype = entry["dtype"]
            shape = entry["shape"]
            b, e = entry["data_offsets"]
            ok = (
                shape.__class__ is list
                and b.__class__ is int
                and e.__class__ is int
                and 0 <= b <= e <= data_len
                and dtype in bits
                and (not shape or min(shape) >= 0)
            )
            numel = prod(shape)  # a float or str dim makes this no int
            ok = ok and numel.__class__ is int and not (maybe_bool and not set(map(type, shape)) <= _INT_ONLY)
        except (TypeError, KeyError, ValueError, AttributeError):
            ok = False
        if not ok:
            _explain_entry(path, name, entry, data_len)
        nbits = numel * bits[dtype]
        if not numel or nbits > _U64 or nbits & 7:  # zero, overflow or sub-byte: safetensors' exact rule
            numel = _numel(path, name, shape, dtype)
            nbits = numel * bits[dtype]
        if e - b != nbits >> 3:
            raise _fail(
                path,
                f"tensor {name!r}: {dtype}{shape} needs {nbits >> 3} bytes but its byte range holds {e - b}",
                name,
            )
        tensors[name] = TensorInfo(name, dtype, tuple(shape), shard, data_start + b, data_start + e, numel)
    return tensors


def _check_tiling(path: Path, tensors: dict[str, TensorInfo], data_start: int, size: int) -> None:
    """The byte ranges must tile the data section exactly, in offset order (safetensors' rule)."""
    # With no empty tensor, that holds iff the sorted starts, less the first, equal the sorted
    # ends, less the last: checked in C, with ints only (no tuples for the garbage collector)
    ts = tensors.values()
    starts, ends = sorted(map(_START, ts)), sorted(map(_END, ts))
    if (
        starts
        and starts[0] == data_start
        and ends[-1] == size
        and all(map(lt, map(_START, ts), map(_END, ts)))
        and starts[1:] == ends[:-1]
    ):
        return
    pos, prev = data_start, ""
    for t in sorted(tensors.values(), key=itemgetter(4, 5)):  # (start, end)
        if t.start < pos:
            raise _fail(path, f"tensors {prev!r} and {t.name!r} overlap in the file", t.name)
        if t.start > pos:
            raise _fail(
                path,
                f"a gap of {t.start - pos} bytes before tensor {t.name!r} (data byte "
                f"{t.start - data_start}): the byte ranges must tile the data",
                t.name,
            )
        pos, prev = t.end, t.name
    if pos > size:
        raise _fail(
            path,
            f"tensors need {pos - data_start} data bytes but the file holds only {size - data_start}: "
            "truncated or bad offsets",
        )
    if pos != size:
        raise _fail(path, f"{size - pos} trailing bytes after the last tensor: the file is not fully covered")


class _Pairs(list):
    """A JSON object as its (key, value) pairs, kept in order for the duplicate check."""


def _parse_json(path: Path, raw: bytes) -> tuple[dict, bool]:
    """The header as a dict, and whether its text is compact (orjson's own form of it).

    A compact text cannot hide a duplicate key or a ``-0``: either would make it longer
    than orjson's compact form of the parsed value. :func:`read_header` sends any other
    text, and entries with fields beyond the three, to :func:`_slow_check`, which refuses
    exactly what serde (safetensors) refuses and orjson lets through.
    """
    try:
        header = orjson.loads(raw)  # 3x faster than json on a 1 TB target's 64 headers
    except orjson.JSONDecodeError as e:
        raise _fail(path, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")
    return header, len(orjson.dumps(header)) == len(raw.rstrip(b" "))


#: serde_json's nesting limit, as safetensors 0.8 applies it (127 levels parse, 128 do not)
_MAX_DEPTH = 127


def _depth(raw: bytes) -> int:
    depth = deepest = 0
    in_str = esc = False
    for c in raw:
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif c in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _slow_check(path: Path, raw: bytes) -> None:
    """Refuse what serde refuses and orjson takes: a duplicate field in an entry, a second
    ``__metadata__``, an entry overwritten by a later one of the same name that is itself
    malformed (serde reads every entry), ``-0`` (a float to serde), nesting past 127."""
    import json

    if _depth(raw) > _MAX_DEPTH:
        raise _fail(path, f"header nests deeper than {_MAX_DEPTH} levels")

    def parse_int(s: str) -> int:
        if s == "-0":
            raise _fail(path, "header has -0 where a non-negative integer belongs")
        return int(s)

    top = json.loads(raw.decode("utf-8"), object_pairs_hook=_Pairs, parse_int=parse_int)
    if not isinstance(top, _Pairs):
        return
    if sum(1 for k, _ in top if k == "__metadata__") > 1:
        raise _fail(path, "header has two __metadata__ entries")
    for name, entry in top:
        if name == "__metadata__" or not isinstance(entry, _Pairs):
            continue
        keys = [k for k, _ in entry]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup is not None:
            raise _fail(path, f"tensor {name!r} has the field {dup!r} twice", name)
    seen: set[str] = set()
    for name, entry in reversed(top):  # an entry overwritten by a later one: serde still reads it
        if name == "__metadata__":
            continue
        if name in seen:
            as_dict = dict(entry) if isinstance(entry, _Pairs) else entry
            try:
                ok = _entry_shape_ok(as_dict)
            except TypeError:
                ok = False
            if not ok:
                _explain_entry(path, name, as_dict)
        seen.add(name)


def _entry_shape_ok(e: object) -> bool:
    if not isinstance(e, dict) or not all(k in e for k in ("dtype", "shape", "data_offsets")):
        return False
    sh, off = e["shape"], e["data_offsets"]
    return (
        isinstance(e["dtype"], str)
        and e["dtype"] in DTYPE_BITS
        and isinstance(sh, list)
        and all(type(d) is int and 0 <= d <= _U64 for d in sh)
        and isinstance(off, list)
        and len(off) == 2
        and all(type(o) is int and 0 <= o <= _U64 for o in off)
    )


def _numel(path: Path, name: str, shape: list[int], dtype: str) -> int:
    """Elements, refusing what overflows 64 bits the way safetensors computes it (left to right)."""
    numel = 1
    for d in shape:
        numel *= d
        if numel > _U64:
            raise _fail(path, f"tensor {name!r}: shape {shape} overflows 64 bits", name)
    nbits = numel * DTYPE_BITS[dtype]
    if nbits > _U64:
        raise _fail(path, f"tensor {name!r}: shape {shape} overflows 64 bits", name)
    if nbits % 8:
        raise _fail(path, f"tensor {name!r}: {numel} elements of {dtype} do not end on a byte boundary", name)
    return numel


def _explain_entry(path: Path, name: str, entry: object, data_len: int | None = None) -> None:
    """Raise the precise error for an entry that failed the fast check."""
    if not isinstance(entry, dict):
        raise _fail(path, f"entry for tensor {name!r} is not an object", name)
    for key in ("dtype", "shape", "data_offsets"):
        if key not in entry:
            raise _fail(path, f"tensor {name!r} has no {key!r}", name)
    dtype, shape, offs = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise _fail(path, f"tensor {name!r} has unknown dtype {dtype!r}", name)
    if not (isinstance(shape, list) and all(type(d) is int and 0 <= d <= _U64 for d in shape)):
        raise _fail(path, f"tensor {name!r} has a bad shape {shape!r} (non-negative integers expected)", name)
    if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int and 0 <= o <= _U64 for o in offs)):
        raise _fail(path, f"tensor {name!r} has bad data_offsets {offs!r} (two non-negative integers expected)", name)
    if offs[0] > offs[1]:
        raise _fail(path, f"tensor {name!r} has data_offsets {offs!r} that run backwards", name)
    raise _fail(
        path,
        f"tensor {name!r} ends at data byte {offs[1]} but the file holds only {data_len} data bytes: "
        "truncated or bad offsets",
        name,
    )
