"""One way to find and read a checkpoint: a directory, a .safetensors file, a sharded
index, or a Hugging Face Hub repo id (through huggingface_hub's local cache).

Opening a checkpoint reads config.json and the safetensors headers only. Tensor data is
read on request through a memory map, one map per shard, opened once.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator, KeysView
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any


from ckpttools.errors import (
    CheckpointFormatError,
    CheckpointNotFoundError,
    CkptError,
    ConfigError,
    NoWeightsError,
    PickleRefusedError,
    UnsafePathError,
)
from ckpttools.io.refs import REPO_REF
from ckpttools.io.safetensors_header import ShardHeader, TensorInfo, read_header

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "Checkpoint",
    "open_checkpoint",
    "numpy_dtype",
    "load_config",
    "hub_config",
    "PICKLE_SUFFIXES",
    "leads_inside",
]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
INDEX_NAME = "model.safetensors.index.json"


def numpy_dtype(st_dtype: str) -> np.dtype:
    """The numpy dtype for a safetensors dtype (bf16 and fp8 through ml_dtypes)."""
    import numpy as np

    plain = {
        "F64": np.float64,
        "F32": np.float32,
        "F16": np.float16,
        "I64": np.int64,
        "I32": np.int32,
        "I16": np.int16,
        "I8": np.int8,
        "U64": np.uint64,
        "U32": np.uint32,
        "U16": np.uint16,
        "U8": np.uint8,
        "BOOL": np.bool_,
    }
    if st_dtype in plain:
        return np.dtype(plain[st_dtype])
    if st_dtype == "C64":
        return np.dtype(np.complex64)
    special = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}
    if st_dtype not in special:
        raise CheckpointFormatError(
            f"tensors of dtype {st_dtype} cannot be read or converted by ckpttools",
            hint="this dtype is valid safetensors but has no numpy equivalent",
        )
    import ml_dtypes

    dt = getattr(ml_dtypes, special[st_dtype], None)
    if dt is None:  # an ml_dtypes older than the one pyproject asks for (float8_e8m0fnu is newer)
        raise CkptError(
            f"tensors of dtype {st_dtype} are read as ml_dtypes.{special[st_dtype]}, which the installed "
            f"ml_dtypes {getattr(ml_dtypes, '__version__', '(version unknown)')} does not have",
            hint="pip install 'ml_dtypes>=0.5,<0.7' (the versions ckpttools asks for)",
        )
    return np.dtype(dt)


def load_config(path: Path) -> dict[str, Any]:
    """Read a config.json, raising ConfigError (exit 2) when it is not a JSON object."""
    from ckpttools.io.inputs import read_json

    try:
        cfg = read_json(path, "config")
    except FileNotFoundError:  # listed, yet gone on open: a link to nothing (or removed meanwhile)
        to = f" to {os.readlink(path)}" if os.path.islink(path) else ""
        raise ConfigError(
            f"{path}: a link{to} that leads to no file" if to else f"{path}: removed while it was read",
            path=path,
            hint="point config.json at the real file (or copy it in place of the link)",
        ) from None
    except PermissionError:
        raise ConfigError(
            f"{path}: not readable (permission denied)", path=path, hint="make config.json readable"
        ) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: not a JSON object", path=path)
    return cfg


def local_config_path(source: Any) -> Path | None:
    """The config.json on disk that ``source`` (a Checkpoint, a config.json, a directory holding one, or
    anything with the one it names as ``target``) is read from; None: none on disk (a Hub repo read
    remotely, or no config)."""
    source = getattr(source, "target", source)
    if isinstance(source, Checkpoint):
        return source.config_path
    if not isinstance(source, (str, Path)):
        return None
    p = Path(source)
    if p.suffix == ".json" and p.is_file():
        return p
    return p / "config.json" if p.is_dir() and (p / "config.json").is_file() else None


def starts_with_bom(path: Path) -> bool:
    """Whether the file starts with a UTF-8 byte-order mark, which ckpttools' JSON reader skips and
    transformers' does not (engines/claim_texts.py: ``config.bom``). A file that cannot be read: False
    (whoever reads it says why)."""
    from ckpttools.io.fsutil import starts_with

    try:
        return starts_with(path, b"\xef\xbb\xbf")
    except (OSError, CkptError):
        return False


def hub_config(repo: Any) -> dict[str, Any]:
    """A Hub commit's config.json (:meth:`ckpttools.io.hub.HubRepo.read_json`: nothing is downloaded
    into a cache during a dry run), raising ConfigError when it is not a JSON object."""
    cfg = repo.read_json("config.json", "config")
    if not isinstance(cfg, dict):
        where = f"{repo.repo_id}/config.json"
        raise ConfigError(f"{where}: not a JSON object", path=where)
    return cfg


def hub_blobs(root: Path) -> Path | None:
    """The ``blobs/`` folder of a Hugging Face cache snapshot (``REPO/snapshots/REV``), else None."""
    real = Path(os.path.realpath(root))
    if real.parent.name == "snapshots" and (real.parent.parent / "blobs").is_dir():
        return real.parent.parent / "blobs"
    return None


def _inside(root: Path, rel: str) -> tuple[str, Path]:
    """Check a shard name from an index and return (its normalized name, its path).

    The name must stay inside the checkpoint (no absolute path, no ``..`` out of it). A shard
    that is a symbolic link is followed wherever it leads: the links in a checkpoint directory
    are the user's (a directory of links to a 1 TB target's shards is how one reuses them), and
    reading follows them. Only what the index itself names is held to the directory. In a
    Hugging Face cache snapshot the links are huggingface_hub's, and lead into the cache's own
    ``blobs/``: one that leads elsewhere is a tampered cache, and refused.
    """
    norm = os.path.normpath(rel) if rel else ""
    if not rel or "\0" in rel or os.path.isabs(rel) or norm == ".." or norm.startswith("../") or norm == ".":
        raise UnsafePathError(
            f"index names shard {rel!r}, which is outside {root}",
            path=rel,
            hint="an index names its shards by file names inside the checkpoint directory; fix or regenerate it",
        )
    p = root / norm
    _held_to_cache(root, p, f"index names shard {rel!r}, which", rel)
    return norm, p


def _held_to_cache(root: Path, p: Path, what: str, path: str) -> None:
    """In a Hugging Face cache snapshot, refuse a weights file (``what``: how the error names it)
    whose link leads anywhere but inside the snapshot or the cache's own ``blobs/``."""
    if hub_blobs(root) is not None and not leads_inside(root, p):
        raise UnsafePathError(
            f"{what} is a link to {os.path.realpath(p)}, outside the Hugging Face cache snapshot {root} and its blobs/",
            path=path,
            hint="the cache's links lead into its blobs/ folder: download the repo again",
        )


def leads_inside(root: Path, p: Path) -> bool:
    """Whether ``p`` (a link or not) resolves inside ``root``, or into the Hugging Face cache's own
    ``blobs/`` folder, where a snapshot's files point."""
    real = Path(os.path.realpath(p))
    if real.is_relative_to(Path(os.path.realpath(root))):
        return True
    blobs = hub_blobs(root)
    return blobs is not None and real.is_relative_to(blobs)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a block that only builds acyclic data.

    Parsing a 1 TB target's headers makes ~100,000 dicts, lists and tuples; each
    allocation burst triggers collections that walk all of them, which doubled the
    parse time. Reference counting still frees everything as usual.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class Checkpoint:
    """A resolved checkpoint: its files, config, and header-level tensor table.

    Use :func:`open_checkpoint` (or ``Checkpoint.open``) to make one. It is a context
    manager; closing drops the memory maps.
    """

    def __init__(
        self,
        source: str,
        root: Path,
        shards: list[tuple[str, Path]],
        config: dict[str, Any] | None,
        config_path: Path | None,
        index_path: Path | None = None,
        revision: str | None = None,
        headers: dict[str, ShardHeader] | None = None,
    ) -> None:
        self.source = source
        self.root = root
        self.config = config
        self.config_path = config_path
        self.index_path = index_path
        self.revision = revision
        self.headers: dict[str, ShardHeader] = {}
        #: tensor name -> its shard, in checkpoint order (shards in order, each in header order)
        self._shard_of: dict[str, str] = {}
        self._tensors: dict[str, TensorInfo] | None = None
        self._shard_paths: dict[str, Path] = {}
        self._maps: dict[str, Any] = {}
        self._fds: dict[str, int] = {}
        #: the Hub repo and commit this checkpoint was read from (None: a local one)
        self.hub: Any = None
        with _gc_paused():  # tens of thousands of acyclic objects: no garbage to find, only time to lose
            self._read_headers(shards, headers or {})

    def _read_headers(self, shards: list[tuple[str, Path]], given: dict[str, ShardHeader]) -> None:
        for name, p in shards:
            hdr = given.get(name) or read_header(p, name)
            self.headers[name] = hdr
            self._shard_paths[name] = p
            mine = dict.fromkeys(hdr.names, name)
            before = len(self._shard_of)
            self._shard_of.update(mine)
            if len(self._shard_of) != before + len(mine):  # a name an earlier shard has too
                earlier: dict[str, str] = {}
                for other in list(self.headers)[:-1]:
                    earlier.update(dict.fromkeys(self.headers[other].names, other))
                dup = min(mine.keys() & earlier.keys())
                raise CheckpointFormatError(
                    f"tensor {dup!r} appears in both {earlier[dup]} and {name}", path=p, tensor=dup
                )

    @property
    def tensors(self) -> dict[str, TensorInfo]:
        """Every tensor's :class:`TensorInfo`, by name, in checkpoint order (made on first use:
        what needs only names and counts, as ``inspect --no-tensors`` does, never makes them)."""
        t = self._tensors
        if t is None:
            with _gc_paused():
                t = {}
                for h in self.headers.values():
                    t.update(h.tensors)
            self._tensors = t
        return t

    @property
    def tensor_names(self) -> KeysView[str]:
        """The tensor names, in checkpoint order (no :class:`TensorInfo` made)."""
        return self._shard_of.keys()

    @property
    def num_tensors(self) -> int:
        return len(self._shard_of)

    # -- construction -------------------------------------------------------------------
    @classmethod
    def open(cls, source: str | Path, revision: str | None = None) -> Checkpoint:
        return open_checkpoint(source, revision)

    # -- data access --------------------------------------------------------------------
    @property
    def shard_paths(self) -> dict[str, Path]:
        return dict(self._shard_paths)

    def files(self) -> list[Path]:
        """Every file that makes up the checkpoint (config, index, shards)."""
        out = [p for p in (self.config_path, self.index_path) if p is not None]
        return out + list(self._shard_paths.values())

    def _map(self, shard: str):
        m = self._maps.get(shard)
        if m is None:
            import numpy as np

            path = self._shard_paths[shard]
            m = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else None
            self._maps[shard] = m
        return m

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise CheckpointFormatError(
                f"{self.source}: no tensor named {name!r}", path=self.source, tensor=name
            ) from None

    def read(self, name: str) -> np.ndarray:
        """The whole tensor as a read-only array backed by the memory map (no copy)."""
        t = self.info(name)
        return self._view(t, t.start, t.end, t.shape)

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of a tensor (first dimension), reading only those bytes."""
        t = self.info(name)
        if not t.shape:
            raise CheckpointFormatError(f"tensor {name!r} is a scalar: it has no rows", tensor=name)
        rows = t.shape[0]
        start, stop = max(0, start), min(rows, stop)
        stop = max(start, stop)
        row_bytes = t.nbytes // rows if rows else 0
        return self._view(t, t.start + start * row_bytes, t.start + stop * row_bytes, (stop - start, *t.shape[1:]))

    def iter_chunks(self, name: str, chunk_bytes: int = 32 << 20):
        """Yield a tensor as arrays of whole rows, at most ~``chunk_bytes`` each.

        Reads with ``os.pread`` into fresh buffers rather than through the memory map,
        so the resident memory of a scan stays bounded by the chunk size.
        """
        import numpy as np

        t = self.info(name)
        dt = numpy_dtype(t.dtype)
        rows = t.shape[0] if t.shape else 1
        row_shape = t.shape[1:] if t.shape else ()
        row_bytes = t.nbytes // rows if rows else 0
        if not row_bytes:
            yield np.zeros(t.shape, dtype=dt)
            return
        step = max(1, chunk_bytes // row_bytes)
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            buf = self._pread(t.shard, (r1 - r0) * row_bytes, t.start + r0 * row_bytes)
            if len(buf) != (r1 - r0) * row_bytes:
                raise CheckpointFormatError(f"{t.shard}: short read in {name!r}", tensor=name)
            a = np.frombuffer(buf, dtype=dt).reshape((r1 - r0, *row_shape))
            yield a if t.shape else a.reshape(())

    def read_rows_pread(self, name: str, rows: Any) -> np.ndarray:
        """Gather the given row indices (any order) with positioned reads, no memory map."""
        import numpy as np

        t = self.info(name)
        n = t.shape[0]
        row_bytes = t.nbytes // n if n else 0
        idx = np.asarray(rows, dtype=np.int64)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise CheckpointFormatError(
                f"{self.source}: row {bad} of {name!r} does not exist (it has {n} rows)", path=self.source, tensor=name
            )
        out = np.empty((len(idx), *t.shape[1:]), dtype=numpy_dtype(t.dtype))
        if not len(idx):
            return out
        flat = out.reshape(len(idx), -1).view(np.uint8).reshape(len(idx), row_bytes)
        # coalesce runs of consecutive rows into one read each
        brk = np.flatnonzero(idx[1:] != idx[:-1] + 1) + 1
        starts, ends = np.concatenate([[0], brk]).tolist(), np.concatenate([brk, [len(idx)]]).tolist()
        reads = [((j - i) * row_bytes, t.start + int(idx[i]) * row_bytes) for i, j in zip(starts, ends)]
        for i, j, buf in zip(starts, ends, self._pread_many(t.shard, reads)):
            if len(buf) != (j - i) * row_bytes:
                raise CheckpointFormatError(f"{t.shard}: short read in {name!r} (the file shrank?)", tensor=name)
            flat[i:j] = np.frombuffer(buf, dtype=np.uint8).reshape(j - i, row_bytes)
        return out

    def _pread(self, shard: str, n: int, offset: int) -> bytes:
        """``n`` bytes of a shard at ``offset``: the one primitive every positioned read goes through."""
        return os.pread(self._fd(shard), n, offset)

    def _pread_many(self, shard: str, reads: list[tuple[int, int]]) -> Iterator[bytes]:
        """Several positioned reads of one shard, in order."""
        return (self._pread(shard, n, off) for n, off in reads)

    def _fd(self, shard: str) -> int:
        fd = self._fds.get(shard)
        if fd is None:
            from ckpttools.io.fsutil import open_regular

            fd = self._fds[shard] = open_regular(self._shard_paths[shard])
        return fd

    def read_bytes(self, name: str) -> memoryview:
        """The raw bytes of a tensor, as stored."""
        t = self.info(name)
        m = self._map(t.shard)
        return memoryview(m[t.start : t.end]) if m is not None else memoryview(b"")

    def _view(self, t: TensorInfo, a: int, b: int, shape: tuple[int, ...]):
        import numpy as np

        dt = numpy_dtype(t.dtype)
        m = self._map(t.shard)
        if m is None or a == b:
            return np.zeros(shape, dtype=dt)
        return m[a:b].view(dt).reshape(shape)

    def hub_record(self) -> dict[str, Any] | None:
        """For a checkpoint read from the Hub: the repo, commit and sha256 of its files (for manifests)."""
        if self.hub is None:
            return None
        return self.hub.record(self.hub_files())

    def hub_files(self) -> list[str]:
        """The repo paths this checkpoint is made of (config, index, shards)."""
        names = ["config.json"] if self.config is not None else []
        names += [self.index_path.name] if self.index_path is not None else []
        return names + list(self.headers)

    def close(self) -> None:
        self._maps.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def load_source(self) -> tuple[str, str | None]:
        """What a loader that reads a directory or a Hub repo id (transformers' ``from_pretrained``)
        is handed, and the revision: the local directory this was opened in (a Hub repo found in
        huggingface_hub's cache: its snapshot), else the repo id and the revision apart
        (``org/name@rev`` is no repo id to such a loader)."""
        if self.hub is None and self.root.is_dir():
            return str(self.root), None
        from ckpttools.io.refs import split_ref

        return split_ref(self.source, self.revision if self.hub is None else None)

    def __repr__(self) -> str:
        return f"Checkpoint({self.source!r}, {self.num_tensors} tensors in {len(self.headers)} files)"


def _refuse_pickle(p: Path) -> PickleRefusedError:
    return PickleRefusedError(f"{p}: pickle-based weights are refused: ckpttools never unpickles", path=p)


def _open_dir(source: str, root: Path, revision: str | None = None) -> Checkpoint:
    cfg_path = root / "config.json"
    config = load_config(cfg_path) if os.path.lexists(cfg_path) else None
    index_path = root / INDEX_NAME
    if not os.path.lexists(index_path):
        others = sorted(root.glob("*.safetensors.index.json"))
        index_path = others[0] if others else index_path
    if os.path.lexists(index_path):
        weight_map = _read_index(index_path)
        shards: list[tuple[str, Path]] = []
        for rel in dict.fromkeys(weight_map.values()):
            name, p = _inside(root, rel)
            if not p.exists():
                from ckpttools.io.fsutil import absent_words

                link = os.path.islink(p)
                raise CheckpointFormatError(
                    f"{index_path.name} names shard {rel!r}, which is "
                    + (f"{absent_words(p)}, in" if link else "missing from")
                    + f" {root}",
                    path=p,
                    hint="point the link at the real shard (a Hub cache: download it again)"
                    if link
                    else "download the missing shard, or fix the index",
                )
            shards.append((name, p))
        ck = Checkpoint(source, root, shards, config, cfg_path if config else None, index_path, revision)
        _check_index(ck, weight_map, index_path.name, index_path)
        return ck
    files = sorted(root.glob("*.safetensors"))
    if not files:
        pickles = [p for p in sorted(root.iterdir()) if p.suffix in PICKLE_SUFFIXES]
        if pickles:
            raise _refuse_pickle(pickles[0])
        raise NoWeightsError(f"{root}: no .safetensors weights in this directory", path=root)
    for p in files:  # no index: each file held to the cache as an indexed shard is
        _held_to_cache(root, p, p.name, str(p))
    return Checkpoint(source, root, [(p.name, p) for p in files], config, cfg_path if config else None, None, revision)


def _check_index(ck: Checkpoint, weight_map: dict[str, str], index_name: str, where: str | Path) -> None:
    """Every tensor the index names is in the shard it names, and no other tensor exists."""
    norm = {rel: os.path.normpath(rel) for rel in set(weight_map.values())}
    if all(k == v for k, v in norm.items()) and len(weight_map) == ck.num_tensors:
        # the usual case, compared in C: every tensor in the shard the index names
        if weight_map == ck._shard_of:
            return
    for tname, rel in weight_map.items():
        shard = ck._shard_of.get(tname)
        if shard is None or shard != norm[rel]:
            where_t = "no shard holds it" if shard is None else f"it is in {shard}"
            raise CheckpointFormatError(
                f"{index_name} maps tensor {tname!r} to {rel}, but {where_t}",
                path=where,
                tensor=tname,
                hint="the index is stale or damaged: fix or regenerate it",
            )


def _read_index(index_path: Path) -> dict[str, str]:
    """The weight_map of a sharded checkpoint's index: tensor name -> shard file name."""
    from ckpttools.io.inputs import read_json

    index = read_json(
        index_path, "index", error=CheckpointFormatError, hint="the index is damaged: fix or regenerate it"
    )
    return _weight_map(index, index_path)


def _weight_map(index: Any, index_path: str | Path) -> dict[str, str]:
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not set(map(type, weight_map.values())) <= {str}:
        raise CheckpointFormatError(
            f"{index_path}: not a safetensors index (needs a JSON object with a weight_map of file names)",
            path=index_path,
            hint="the index is damaged: fix or regenerate it",
        )
    return weight_map


class RemoteCheckpoint(Checkpoint):
    """A checkpoint on the Hub: headers read by range request, tensor bytes fetched on demand.

    Nothing but headers is transferred until a tensor is read; a read fetches exactly
    its bytes (rows: one request per run of consecutive rows, several in flight).
    """

    def _pread(self, shard: str, n: int, offset: int) -> bytes:
        return self.hub.fetch(shard, offset, offset + n)

    def _pread_many(self, shard: str, reads: list[tuple[int, int]]) -> Iterator[bytes]:
        return iter(self.hub.fetch_many(shard, [(off, off + n) for n, off in reads]))

    def read_bytes(self, name: str) -> memoryview:
        t = self.info(name)
        return memoryview(self._pread(t.shard, t.end - t.start, t.start))

    def _view(self, t: TensorInfo, a: int, b: int, shape: tuple[int, ...]):
        import numpy as np

        dt = numpy_dtype(t.dtype)
        if a == b:
            return np.zeros(shape, dtype=dt)
        return np.frombuffer(self._pread(t.shard, b - a, a), dtype=dt).reshape(shape)

    def files(self) -> list[Path]:
        return []  # nothing local: the manifest records the Hub's sha256 instead


def _open_hub(source: str, repo_id: str, revision: str | None) -> Checkpoint:
    """Config through huggingface_hub's cache, headers by range request: no tensor data."""
    from ckpttools.io.hub import HubRepo

    repo = HubRepo.resolve(repo_id, revision)
    config = hub_config(repo) if "config.json" in repo.files else None
    indexes = sorted(p for p in repo.files if p.endswith(".safetensors.index.json") and "/" not in p)
    index_name = INDEX_NAME if INDEX_NAME in repo.files else (indexes[0] if indexes else None)
    weight_map = None
    if index_name is not None:
        hint = "the index is damaged: fix or regenerate it"
        index = repo.read_json(index_name, "index", error=CheckpointFormatError, hint=hint)
        weight_map = _weight_map(index, f"{repo_id}/{index_name}")
        shards = [_inside_repo(repo, index_name, rel) for rel in dict.fromkeys(weight_map.values())]
    else:
        shards = sorted(p for p in repo.files if p.endswith(".safetensors") and "/" not in p)
    if not shards:
        pickles = sorted(p for p in repo.files if Path(p).suffix in PICKLE_SUFFIXES)
        if pickles:
            raise PickleRefusedError(
                f"{repo_id}: only pickle-based weights ({pickles[0]}): ckpttools never unpickles", path=repo_id
            )
        raise NoWeightsError(f"{repo_id}@{repo.commit[:12]}: no .safetensors weights in this repo", path=repo_id)
    root = Path(f"{repo_id}@{repo.commit}")
    headers = repo.headers(shards)
    ck = RemoteCheckpoint(
        source,
        root,
        [(s, root / s) for s in shards],
        config,
        root / "config.json" if config is not None else None,
        root / index_name if index_name else None,
        repo.commit,
        headers=headers,
    )
    ck.hub = repo
    if weight_map is not None and index_name is not None:
        _check_index(ck, weight_map, index_name, f"{repo_id}/{index_name}")
    return ck


def _inside_repo(repo: Any, index_name: str, rel: str) -> str:
    """A shard the index names: a plain path inside the repo, and one the repo has."""
    norm = os.path.normpath(rel) if rel else ""
    if not rel or "\0" in rel or os.path.isabs(rel) or norm in ("..", ".") or norm.startswith("../"):
        raise UnsafePathError(f"{index_name} names shard {rel!r}, which is outside {repo.repo_id}", path=rel)
    if norm not in repo.files:
        raise CheckpointFormatError(
            f"{index_name} names shard {rel!r}, which {repo.repo_id}@{repo.commit[:12]} does not have",
            path=f"{repo.repo_id}/{index_name}",
            hint="the repo's index is stale or damaged",
        )
    return norm


def _offline_snapshot(repo_id: str, revision: str | None) -> Path | None:
    from ckpttools.io.env import hub_constants
    from ckpttools.io.hub import cached_snapshot

    return cached_snapshot(repo_id, revision) if hub_constants().HF_HUB_OFFLINE else None


def _hub_snapshot(repo_id: str, revision: str | None) -> tuple[Path, Any]:
    """The whole repo's weights and side files in huggingface_hub's cache (progress bars on)."""
    from ckpttools.io.fsutil import note
    from ckpttools.io.hub import SNAPSHOT_PATTERNS, HubRepo
    from ckpttools.io.units import human_bytes

    repo = HubRepo.resolve(repo_id, revision)
    patterns = list(SNAPSHOT_PATTERNS)
    size = repo.size_of(patterns)
    note(f"{repo_id}@{repo.commit[:12]}: fetching {human_bytes(size)} into the Hugging Face cache (once)")
    return repo.snapshot(patterns), repo


def open_checkpoint(source: str | Path, revision: str | None = None, *, download: bool = False) -> Checkpoint:
    """Resolve and open a checkpoint, reading config and headers only.

    Args:
        source: a directory, a ``.safetensors`` file, or a Hub repo id ``org/name`` (a
            revision may follow as ``org/name@rev``).
        revision: a Hub revision (overrides one given after ``@``).
        download: for a Hub repo, fetch its weights into huggingface_hub's cache and open
            them there (for operations that copy every byte). Otherwise a Hub repo is read
            remotely: config and headers now, tensor bytes by range request when read.

    Returns:
        a :class:`Checkpoint`.

    Raises:
        CheckpointNotFoundError, NoWeightsError, CheckpointFormatError, ConfigError,
        PickleRefusedError, UnsafePathError, HubError.

    Example:
        >>> with open_checkpoint("./my-drafter") as ck:  # doctest: +SKIP
        ...     ck.tensors["lm_head.weight"].shape
    """
    text = str(source)
    if not text or "\0" in text:
        raise CheckpointNotFoundError(f"{text!r}: not a path or a Hub repo id", path=text)
    p = Path(text).expanduser()
    if os.path.islink(p) and not p.exists():  # a path the user gave, never read as a Hub repo id
        from ckpttools.io.fsutil import absent_words

        raise CheckpointNotFoundError(
            f"{text}: {absent_words(p)}", path=text, hint="point the link at the real file or directory"
        )
    if p.exists() and not (p.is_dir() or p.is_file()):
        from ckpttools.io.fsutil import ensure_regular

        ensure_regular(p)  # raises: a FIFO, socket or device is never opened
    if p.is_dir():
        return _open_dir(text, p, revision)
    if p.is_file():
        if p.suffix in PICKLE_SUFFIXES:
            raise _refuse_pickle(p)
        if p.name.endswith(".index.json"):
            return _open_dir(text, p.parent, revision)
        if p.name == "config.json":
            raise NoWeightsError(f"{p}: a config.json alone holds no weights", path=p)
        return Checkpoint(text, p.parent, [(p.name, p)], None, None)
    if REPO_REF.match(text) and not text.startswith((".", "/", "~")):
        from ckpttools.errors import HubError

        try:
            return _open_ref(text, revision, download)
        except (HubError, CheckpointNotFoundError) as e:
            raise local_typo(text, e) or e
    from ckpttools.io.fsutil import absent_words

    raise CheckpointNotFoundError(f"{text}: {absent_words(text, 'file or directory')}", path=text)


def _open_ref(text: str, revision: str | None, download: bool) -> Checkpoint:
    from ckpttools.io.refs import split_ref

    repo_id, rev = split_ref(text, revision)
    offline_snap = _offline_snapshot(repo_id, rev)
    if offline_snap is not None:  # HF_HUB_OFFLINE=1 and the weights are in huggingface_hub's cache
        return _open_dir(text, offline_snap, offline_snap.name)
    if not download:
        return _open_hub(text, repo_id, rev)
    snap, repo = _hub_snapshot(repo_id, rev)
    ck = _open_dir(text, snap, repo.commit)
    ck.hub = repo
    return ck


def local_typo(text: str, err: Exception) -> CheckpointNotFoundError | None:
    """A repo-id-shaped path that failed as a Hub repo id while its first part is a directory here
    (``ckpt inspect drafters/v2`` with drafters/ present, v2 misspelt): said as the missing local
    path it most likely is, the Hub's answer after it. None for any other."""
    first = text.split("/", 1)[0]
    if not os.path.isdir(first):
        return None
    why = str(err).removeprefix(f"{text}: ")
    return CheckpointNotFoundError(
        f"{text}: no such file or directory ({first}/ is a directory here; as a Hub repo id: {why})",
        path=text,
        hint=f"check the path (see what {first}/ holds); ./{text} names a local path only",
    )
