"""A streaming safetensors writer with bounded memory, and atomic checkpoint output.

The header of each file is known before any data is written (names, dtypes and shapes
are declared up front), so tensors go to disk one at a time, in order, straight from
wherever they come from: an array, a byte string, or a byte range of another file
(copied in the kernel with ``copy_file_range`` where the OS has it).

:class:`CheckpointWriter` writes a whole checkpoint directory into a temporary
directory beside the output and renames it into place only when everything succeeded,
so an interrupted run leaves nothing at the output path.
"""

from __future__ import annotations

import json
import math
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

from ckpttools.errors import CheckpointFormatError, OutputExistsError
from ckpttools.io.fsutil import (
    remove_entry,
    clean_stale_temporaries,
    kill_point,
    rename_exchange,
    rename_noreplace,
    temp_name,
)
from ckpttools.io.guard import check_output, json_bytes, open_new, run_inputs
from ckpttools.io.manifest import FOLLOW_CHUNK, MANIFEST_NAME
from ckpttools.io.safetensors_header import DTYPE_SIZES

__all__ = [
    "TensorSpec",
    "plan_shards",
    "shard_file_names",
    "SafetensorsFileWriter",
    "CheckpointWriter",
    "parse_size",
    "side_file_verdict",
    "side_file_name_verdict",
    "WEIGHT_FILE_SUFFIXES",
]

_COPY_CHUNK = 64 << 20
#: the most one copy_file_range call moves on Linux (MAX_RW_COUNT): a whole data section is one
#: copy, in calls of this size
_KERNEL_COPY_MAX = 0x7FFFF000
#: the largest shard size parse_size accepts (1 PB)
MAX_SHARD_SIZE = 10**15


@dataclass(frozen=True)
class TensorSpec:
    """A tensor to be written: name, safetensors dtype string, shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * DTYPE_SIZES[self.dtype]


def parse_size(text: str | int | None) -> int | None:
    """Parse ``5GB``, ``500MB``, ``2GiB`` or a plain byte count; None stays None.

    Raises:
        ValueError: not a finite, positive size of at most 1 PB.
    """
    if text is None:
        return None
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ValueError(f"not a size: {text!r} (use e.g. 5GB, 500MB, 2GiB)")
    if isinstance(text, int):
        value = text
    else:
        t = text.strip().upper().replace(" ", "")
        units = {
            "KIB": 1 << 10,
            "MIB": 1 << 20,
            "GIB": 1 << 30,
            "TIB": 1 << 40,
            "KB": 10**3,
            "MB": 10**6,
            "GB": 10**9,
            "TB": 10**12,
            "B": 1,
        }
        for u, mult in units.items():
            if t.endswith(u):
                num = t[: -len(u)]
                break
        else:
            num, mult = t, 1
        try:
            f = float(num)
        except ValueError:
            raise ValueError(f"not a size: {text!r} (use e.g. 5GB, 500MB, 2GiB)") from None
        if not math.isfinite(f):
            raise ValueError(f"not a size: {text!r} (use e.g. 5GB, 500MB, 2GiB)")
        value = int(f * mult)
    if value <= 0:
        raise ValueError(f"size must be positive: {text!r}")
    if value > MAX_SHARD_SIZE:
        raise ValueError(f"size {text!r} is larger than 1 PB; use e.g. 5GB")
    return value


def plan_shards(specs: Sequence[TensorSpec], max_shard_size: int | None) -> list[list[TensorSpec]]:
    """Split tensors, in order, into shards of at most ``max_shard_size`` data bytes.

    A tensor larger than the limit gets a shard of its own. Pure function.
    """
    if not max_shard_size:
        return [list(specs)]
    shards: list[list[TensorSpec]] = [[]]
    size = 0
    for s in specs:
        if shards[-1] and size + s.nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(s)
        size += s.nbytes
    return shards


def shard_file_names(n: int) -> list[str]:
    """The Hugging Face names for ``n`` shards."""
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]


#: the page size a data section is placed against (see SafetensorsFileWriter's ``page_offset``)
PAGE = 4096


def _header_bytes(
    specs: Sequence[TensorSpec], metadata: dict[str, str] | None, page_offset: int | None = None
) -> bytes:
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    for s in specs:
        if s.dtype not in DTYPE_SIZES:
            raise ValueError(f"unknown safetensors dtype {s.dtype!r} for {s.name!r}")
        header[s.name] = {"dtype": s.dtype, "shape": list(s.shape), "data_offsets": [off, off + s.nbytes]}
        off += s.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    if page_offset is None:
        raw += b" " * (-len(raw) % 8)  # keep the data 8-byte aligned, as safetensors does
    else:  # the data at ``page_offset`` within a page (a multiple of 8: still 8-byte aligned)
        raw += b" " * ((page_offset - 8 - len(raw)) % PAGE)
    return struct.pack("<Q", len(raw)) + raw


def _as_bytes(data: Any) -> memoryview:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return memoryview(data).cast("B")
    import numpy as np

    arr = np.ascontiguousarray(data)
    return memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy arrays are buffers


class SafetensorsFileWriter:
    """Write one .safetensors file: header first, then each declared tensor in order.

    Example:
        >>> specs = [TensorSpec("w", "F32", (2, 2))]
        >>> with SafetensorsFileWriter("x.safetensors", specs) as w:  # doctest: +SKIP
        ...     w.write("w", np.eye(2, dtype=np.float32))
    """

    def __init__(
        self,
        path: str | Path,
        specs: Sequence[TensorSpec],
        metadata: dict[str, str] | None = None,
        *,
        page_offset: int | None = None,
    ):
        """``page_offset`` (a multiple of 8 below :data:`PAGE`): pad the header so that the data
        section starts at that offset within a page. A kernel copy whose source and destination
        lie at the same offset within their pages moves whole pages (on ext4 a misaligned one of
        3.6 GB took ~1.35x as long)."""
        self.path = Path(path)
        self.specs = list(specs)
        self._next = 0
        self._src_fds: dict[str, int] = {}
        self._kernel_copy = True
        #: told (source, offset reached) after each step of a copy, which then moves in steps of
        #: ckpttools.io.manifest.FOLLOW_CHUNK (a digest of the source trails it: BackgroundDigests)
        self.on_copy: Callable[[str, int], None] | None = None
        #: called once, just before the first copy in the kernel (which leaves the interpreter free)
        self.before_copy: Callable[[], None] | None = None
        if page_offset is not None and not (0 <= page_offset < PAGE and page_offset % 8 == 0):
            raise ValueError(f"page_offset {page_offset}: a multiple of 8 in [0, {PAGE}) expected")
        self._f = open_new(self.path)
        self._f.write(_header_bytes(self.specs, metadata, page_offset))

    def _expect(self, name: str) -> TensorSpec:
        if self._next >= len(self.specs):
            raise ValueError(f"{self.path.name}: tensor {name!r} was not declared")
        spec = self.specs[self._next]
        if spec.name != name:
            raise ValueError(f"{self.path.name}: expected tensor {spec.name!r} next, got {name!r}")
        self._next += 1
        return spec

    def write(self, name: str, data: Any) -> None:
        """Write the next tensor from an array or bytes of exactly its declared size."""
        spec = self._expect(name)
        buf = _as_bytes(data)
        if buf.nbytes != spec.nbytes:
            raise ValueError(f"tensor {name!r}: got {buf.nbytes} bytes, declared {spec.nbytes}")
        self._f.write(buf)

    def write_chunks(self, name: str, chunks: Iterable[Any]) -> None:
        """Write the next tensor from an iterable of arrays or byte strings (streaming)."""
        spec = self._expect(name)
        n = 0
        for c in chunks:
            buf = _as_bytes(c)
            self._f.write(buf)
            n += buf.nbytes
        if n != spec.nbytes:
            raise ValueError(f"tensor {name!r}: got {n} bytes, declared {spec.nbytes}")

    def copy_range(self, name: str, src: str | Path, offset: int) -> None:
        """Write the next tensor by copying its bytes from ``src`` at ``offset``."""
        spec = self._expect(name)
        self._copy(src, offset, spec.nbytes, name)

    def copy_run(self, names: Sequence[str], src: str | Path, offset: int) -> int:
        """Write the next tensors, ``names`` in order, whose bytes lie one after another in ``src``
        from ``offset``: one kernel copy for all of them (a shard whose tensors keep their dtype,
        bytes and order is its new header and one copy of the source's data section). Returns
        the bytes copied."""
        ends = list(accumulate(self._expect(n).nbytes for n in names))
        if ends and ends[-1]:
            # a short source is reported with the tensor whose bytes it lacks
            self._copy(src, offset, ends[-1], lambda done: names[bisect_right(ends, done)])
        return ends[-1] if ends else 0

    def _copy(self, src: str | Path, offset: int, length: int, name: str | Callable[[int], str]) -> None:
        self._f.flush()
        left = length
        fd = self._src_fds.get(str(src))
        if fd is None:
            fd = self._src_fds[str(src)] = os.open(src, os.O_RDONLY)
        dfd = self._f.fileno()
        pos = offset
        told = self.on_copy
        step = _KERNEL_COPY_MAX if told is None else FOLLOW_CHUNK
        if hasattr(os, "copy_file_range") and self._kernel_copy:
            if self.before_copy is not None:
                self.before_copy()
                self.before_copy = None
            try:
                while left:
                    n = os.copy_file_range(fd, dfd, min(left, step), pos)
                    if n == 0:
                        break
                    pos += n
                    left -= n
                    if told is not None:
                        told(str(src), pos)
            except OSError:
                self._kernel_copy = False  # e.g. a file system that refuses it: plain reads from now on
        self._f.seek(0, os.SEEK_END)
        while left:
            chunk = os.pread(fd, min(left, _COPY_CHUNK), pos)
            if not chunk:
                which = name if isinstance(name, str) else name(pos - offset)
                raise CheckpointFormatError(f"{src}: ended early while copying {which!r}", path=src, tensor=which)
            self._f.write(chunk)
            pos += len(chunk)
            left -= len(chunk)
            if told is not None:
                told(str(src), pos)

    def write_segments(self, name: str, segments: Iterable[tuple[str, Any, int, int] | Any]) -> None:
        """Write the next tensor from segments, in order: ``("copy", src, offset, length)``
        copies a byte range of another file in the kernel; anything else is data (an
        array or bytes) written as is. Used to move runs of lm_head rows without
        bringing them into memory."""
        spec = self._expect(name)
        n = 0
        for seg in segments:
            if isinstance(seg, tuple) and seg and seg[0] == "copy":
                _, src, offset, length = seg
                self._copy(src, offset, length, name)
                n += length
            else:
                buf = _as_bytes(seg)
                self._f.write(buf)
                n += buf.nbytes
        if n != spec.nbytes:
            raise ValueError(f"tensor {name!r}: got {n} bytes, declared {spec.nbytes}")

    def skip(self, name: str) -> None:
        """Leave the next tensor's bytes as a hole (sparse file; reads as zeros)."""
        spec = self._expect(name)
        self._f.seek(spec.nbytes, os.SEEK_CUR)

    def close(self) -> None:
        if self._f.closed:
            return
        try:
            if self._next != len(self.specs):
                raise ValueError(
                    f"{self.path.name}: {len(self.specs) - self._next} declared tensor(s) never written, "
                    f"starting with {self.specs[self._next].name!r}"
                )
            self._f.truncate(self._f.tell())
        finally:
            self._close_files()

    def _close_files(self) -> None:
        self._f.close()
        for fd in self._src_fds.values():
            os.close(fd)
        self._src_fds.clear()

    def abort(self) -> None:
        self._close_files()

    def __enter__(self) -> SafetensorsFileWriter:
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class CheckpointWriter:
    """Write a checkpoint directory atomically, streaming tensors into planned shards.

    Tensors are written in the declared order. Side files (config.json, manifest,
    tokenizer files) go in with :meth:`add_json` and :meth:`add_file`. On success the
    temporary directory beside ``out`` is renamed to ``out``; on any error it is removed
    and ``out`` is untouched.

    Example:
        >>> with CheckpointWriter("out", specs, max_shard_size=5 * 10**9) as w:  # doctest: +SKIP
        ...     for s in specs:
        ...         w.write(s.name, arrays[s.name])
        ...     w.add_json("config.json", config)
    """

    def __init__(
        self,
        out: str | Path,
        specs: Sequence[TensorSpec],
        *,
        max_shard_size: int | None = None,
        metadata: dict[str, str] | None = None,
        force: bool = False,
        plan: list[list[TensorSpec]] | None = None,
        fsync: bool = False,
        inputs: Sequence[str | Path] = (),
        in_place: bool = False,
        backup: Path | None = None,
    ) -> None:
        self.out = Path(out)
        check_output(self.out, list(inputs), replacing=self.out if in_place else None)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(self.out, [*inputs, *run_inputs()])
        if os.path.lexists(self.out) and not (force or in_place):
            raise OutputExistsError(f"{self.out} already exists", path=self.out)
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError("duplicate tensor names in the output")
        self.force = force
        self.fsync = fsync
        self.metadata = {"format": "pt", **(metadata or {})}
        self.plan = plan if plan is not None else plan_shards(specs, max_shard_size)
        if [s.name for shard in self.plan for s in shard] != names:
            raise ValueError("the shard plan must hold the declared tensors, in order")
        self.files = shard_file_names(len(self.plan))
        self.backup = backup
        # in place: the temporary's name records the original's inode, so that a run killed
        # after the swap leaves the original recoverable (see fsutil.clean_stale_temporaries)
        ino = os.stat(self.out).st_ino if in_place else None
        self.in_place = in_place
        self.tmp = temp_name(self.out, "fix" if in_place else "write", ino)
        if os.path.lexists(self.tmp):  # this process's own, from an earlier failed call
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)
        os.mkdir(self.tmp)
        self._shard_of = {s.name: i for i, shard in enumerate(self.plan) for s in shard}
        #: shard index -> where in a page its data section starts (SafetensorsFileWriter's page_offset)
        self.page_offsets: dict[int, int] = {}
        self._cur: SafetensorsFileWriter | None = None
        self._cur_i = -1
        #: given to each shard's writer (SafetensorsFileWriter.on_copy, .before_copy)
        self.on_copy: Callable[[str, int], None] | None = None
        self.before_copy: Callable[[], None] | None = None
        self._sealed = False

    def _writer_for(self, name: str) -> SafetensorsFileWriter:
        if name not in self._shard_of:
            raise ValueError(f"tensor {name!r} was not declared")
        i = self._shard_of[name]
        if i != self._cur_i:
            if i < self._cur_i:
                raise ValueError(f"tensor {name!r} written out of order")
            while self._cur_i < i:
                if self._cur is not None:
                    self._cur.close()
                self._cur_i += 1
                self._cur = SafetensorsFileWriter(
                    self.tmp / self.files[self._cur_i],
                    self.plan[self._cur_i],
                    self.metadata,
                    page_offset=self.page_offsets.get(self._cur_i),
                )
                self._cur.on_copy = self.on_copy
                self._cur.before_copy, self.before_copy = self.before_copy, None  # once in all
        assert self._cur is not None
        return self._cur

    def write(self, name: str, data: Any) -> None:
        self._writer_for(name).write(name, data)

    def write_chunks(self, name: str, chunks: Iterable[Any]) -> None:
        self._writer_for(name).write_chunks(name, chunks)
        kill_point("mid-write")

    def copy_range(self, name: str, src: str | Path, offset: int) -> None:
        self._writer_for(name).copy_range(name, src, offset)
        kill_point("mid-write")

    def copy_run(self, names: Sequence[str], src: str | Path, offset: int) -> None:
        """Tensors ``names`` (in order) from consecutive bytes of ``src`` at ``offset``: one kernel
        copy per output shard the run spans (:meth:`SafetensorsFileWriter.copy_run`)."""
        i = 0
        while i < len(names):
            shard = self._shard_of.get(names[i])
            j = i + 1
            while j < len(names) and self._shard_of.get(names[j]) == shard:
                j += 1
            offset += self._writer_for(names[i]).copy_run(names[i:j], src, offset)
            i = j
        kill_point("mid-write")

    def write_segments(self, name: str, segments: Iterable[Any]) -> None:
        self._writer_for(name).write_segments(name, segments)

    def skip(self, name: str) -> None:
        self._writer_for(name).skip(name)

    def add_json(self, relname: str, obj: Any) -> None:
        self.add_bytes(relname, json_bytes(obj))

    def add_bytes(self, relname: str, data: bytes) -> None:
        with open_new(self.tmp / relname) as f:
            f.write(data)

    def add_file(self, relname: str, src: str | Path) -> None:
        import shutil

        with open(src, "rb") as s, open_new(self.tmp / relname) as f:
            shutil.copyfileobj(s, f)

    def seal(self) -> Path:
        """Close every shard and write the index, leaving the output in the temporary
        directory (returned) so it can be checked before the rename. Idempotent."""
        if self._sealed:
            return self.tmp
        self._seal()
        self._sealed = True
        return self.tmp

    def _finish(self) -> None:
        self.seal()
        self._commit()

    def _seal(self) -> None:
        if self._cur is None and self.plan and self.plan[0]:
            self._writer_for(self.plan[0][0].name)  # surfaces "never written"
        if self._cur is not None:
            self._cur.close()
        if self._cur_i != len(self.plan) - 1 and any(self.plan[self._cur_i + 1 :]):
            raise ValueError("some declared shards were never written")
        if not self.plan[0]:  # no tensors at all: still write a valid empty file
            SafetensorsFileWriter(self.tmp / self.files[0], [], self.metadata).close()
        if len(self.plan) > 1:
            total = sum(s.nbytes for shard in self.plan for s in shard)
            wm = {s.name: self.files[i] for i, shard in enumerate(self.plan) for s in shard}
            self.add_json("model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": wm})

    def _commit(self) -> None:
        if self.fsync:  # durability across power loss; the rename below is atomic either way
            for p in [*self.tmp.iterdir(), self.tmp]:
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        kill_point("before-rename")
        if not os.path.lexists(self.out):
            rename_noreplace(self.tmp, self.out)
            kill_point("after-rename")
            return
        if not (self.force or self.in_place):
            raise OutputExistsError(f"{self.out} appeared while writing", path=self.out)
        # swap in one step where the OS can: OUT always holds a complete tree, old or new
        if rename_exchange(self.tmp, self.out):
            kill_point("after-exchange")
            if self.in_place:
                assert self.backup is not None
                rename_noreplace(self.tmp, self.backup)  # the original, kept
            else:
                remove_entry(self.tmp)  # the old output (a link to one is removed, never followed)
            kill_point("after-rename")
            return
        # no rename-exchange here: the old tree steps aside first (a kill between the two
        # renames leaves OUT missing, with the old tree kept beside it)
        aside = self.backup if self.in_place else temp_name(self.out, "old")
        assert aside is not None
        os.rename(self.out, aside)
        kill_point("after-exchange")
        os.rename(self.tmp, self.out)
        if not self.in_place:
            remove_entry(aside)
        kill_point("after-rename")

    def abort(self) -> None:
        if self._cur is not None:
            self._cur.abort()
        import shutil  # (on an error only: shutil brings the compression modules)

        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is not None:
            self.abort()
            return
        try:
            kill_point("sealing")
            self._finish()
        except BaseException:
            self.abort()
            raise


def side_file_name_verdict(name: str) -> str | None:
    """The part of :func:`side_file_verdict` its name decides (a Hub repo's file list has only
    names): the config, index and manifest are written anew; hidden files, weights and pickles
    are never copied. None: the name alone does not stop it."""
    if name in ("config.json", MANIFEST_NAME) or name.endswith(".index.json"):
        return "written anew"
    if name.startswith("."):
        return "hidden"
    if name.lower().endswith(WEIGHT_FILE_SUFFIXES):
        return "weights or a pickle"
    return None


#: files that hold weights or pickles (never copied as side files: an output is weights in
#: safetensors plus what an engine reads beside them, and nothing that unpickles)
WEIGHT_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".msgpack", ".h5")


def side_file_verdict(p: Path, root: Path) -> str | None:
    """Why a file beside a checkpoint's weights is not copied into an output (None: it is copied).

    The one rule for every writing operation: regular files only; not the config, index or
    manifest (written anew); no weights or pickles (by suffix); no hidden files; and no link
    that leads outside the checkpoint (a link the user made may point anywhere)."""
    by_name = side_file_name_verdict(p.name)
    if by_name is not None:
        return by_name
    if p.is_symlink():
        real, top = Path(os.path.realpath(p)), Path(os.path.realpath(root))
        blobs = top.parent.parent / "blobs" if top.parent.name == "snapshots" else None  # the Hub cache's layout
        if not real.is_relative_to(top) and not (blobs is not None and real.is_relative_to(blobs)):
            return "a link that leads outside the checkpoint"
    if not p.is_file():
        return "not a regular file"
    return None
