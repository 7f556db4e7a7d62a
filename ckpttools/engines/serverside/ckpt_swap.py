"""Runs inside a serving engine's own process (its interpreter, not ckpttools'): puts another
drafter, read from disk, in place of the running one, and reads weights back.

ckpttools puts this folder on the server's PYTHONPATH and names these entry points in its launch
flags (``ckpttools.engines.swap`` takes which from the engine-release table); what to reach inside
the engine comes in ``CKPT_SWAP_SPEC`` (JSON), from the same table. It imports only the standard
library, torch and safetensors, which every engine ships, and it reads safetensors only.

- vLLM: :class:`VllmDrafterSwap`, a worker extension (``--worker-extension-cls ckpt_swap.VllmDrafterSwap``),
  its methods called through ``POST /collective_rpc`` in every worker.
- SGLang: :func:`sglang_load_drafter`, a custom weight loader (``--custom-weight-loader
  ckpt_swap.sglang_load_drafter``), called through ``POST /update_weights_from_tensor`` with one
  (name, JSON string) pair per rank in place of tensors.

Every answer is a JSON string: what was loaded, what was skipped and why, how each touched
parameter was held against the file on the device (ckpt_digest.check_param), where the seconds
went, and on which rank. ``ckpt_target_digest`` (vLLM) and the payload op ``target_digest``
(SGLang) answer ckpt_digest.model_digest of the target model, taken in the process that holds it.

The guard (every swap, whoever started the server): the drafter is a folder of regular, non-empty
safetensors files, read through one descriptor each (a FIFO, a device, a 0-byte file, anything
``safetensors`` cannot parse is refused); with ``CKPT_SWAP_ROOT`` set (``ckpt serve`` sets it) its
real path and every file's lie under that root (a link leading out is refused); with
``CKPT_SWAP_KEY_SHA256`` set, the request's key must hash to it. A refusal is an answer with
``refused`` and why; nothing is written. One swap at a time per process (a lock); the new weights
are read and planned whole before the first write (staged), then written in one step, the old
values kept until it ends and put back if a write fails, so a rank serves the old drafter or the
new one. Each process remembers what it loaded (``ckpt_state``: path, digest, generation) and
prints one line per committed swap::

    ckpttools swap: drafter="<path, JSON-escaped>" digest=<16 hex> rank=<r> world=<n> maps=<replaced|none>

The drafter's digest (:class:`Digest`): sha256 over its ``*.safetensors`` files in the byte
order of their names, each as ``NAME``, a NUL, its size in decimal, a NUL, then the sha256 (32 raw
bytes) of each consecutive 64 MiB piece of its bytes (the last one shorter). The pieces are hashed on
threads while the file is read (hashlib lets go of the GIL), so a 2 GiB drafter's digest costs about
its read, not a sequential sha256 of it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import struct
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

#: the name a swap request carries in place of a tensor's (SGLang's payload)
SWAP_TAG = "__ckpttools_swap__"


#: the swap root, the key's sha256 (hex) and what ckpt serve launched with (JSON: path, digest)
ROOT_ENV, KEY_ENV, INITIAL_ENV = "CKPT_SWAP_ROOT", "CKPT_SWAP_KEY_SHA256", "CKPT_SWAP_INITIAL"
#: the largest safetensors file a swap reads (a drafter is far smaller)
MAX_FILE = 256 << 30
_LOCK = threading.Lock()
#: where the guard's settings are read (the process's environment; a test host gives its own)
ENVIRON: Any = os.environ
#: what this process has loaded: path, digest, generation (swaps committed here), since
_STATE: dict[str, Any] = {}


class Refused(Exception):
    """A swap the guard refuses: nothing was written; the message is the answer's ``refused``."""


def _spec() -> dict[str, Any]:
    return json.loads(ENVIRON.get("CKPT_SWAP_SPEC") or "{}")


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def weight_files(path: str) -> list[str]:
    """The names of a drafter folder's ``*.safetensors`` files, in byte order (as ``glob`` finds them)."""
    return sorted(n for n in os.listdir(path) if n.endswith(".safetensors") and not n.startswith("."))


#: the digest's piece: each is hashed on its own (one thread each), then the pieces' digests in order
PIECE = 64 << 20
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 2) - 1)), thread_name_prefix="ckpt-dg")
    return _POOL


def _piece(data: Any) -> bytes:
    return hashlib.sha256(data).digest()


class Digest:
    """The drafter digest, fed file by file: ``NAME\\0SIZE\\0`` then the sha256 of each 64 MiB piece of
    the file's bytes, in order; :meth:`piece` hashes one piece on a thread (its buffer must stay
    unchanged until :meth:`hexdigest`)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.pending: list[Future[bytes] | bytes] = []

    def file(self, name: str, size: int) -> None:
        self.pending.append(name.encode() + b"\0" + str(size).encode() + b"\0")

    def add(self, piece_digest: bytes) -> None:
        """The next piece's sha256, computed by the caller."""
        self.pending.append(piece_digest)

    def piece(self, data: Any) -> None:
        self.pending.append(_pool().submit(_piece, data) if len(data) > 1 << 20 else _piece(data))

    def stream(self, f: Any, size: int) -> int:
        """A file's bytes read from ``f`` piece by piece, few pieces held at once (for a reader that
        keeps no copy); returns how many bytes were read."""
        got, window = 0, 2 * (_pool()._max_workers or 1)
        while got < size:
            data = f.read(min(PIECE, size - got))
            if not data:
                break
            self.piece(data)
            got += len(data)
            while sum(isinstance(p, Future) and not p.done() for p in self.pending) > window:
                next(p for p in self.pending if isinstance(p, Future) and not p.done()).result()
        return got

    def hexdigest(self) -> str:
        for p in self.pending:
            self.h.update(p if isinstance(p, bytes) else p.result())
        self.pending = []
        return self.h.hexdigest()


def _inside(real: str, root: str) -> bool:
    return os.path.commonpath([real, root]) == root


def check_key(given: Any, env: Any = None) -> None:
    """Refuse a request whose key does not hash to the launch's (no key set at launch: any passes)."""
    want = (env if env is not None else ENVIRON).get(KEY_ENV, "")
    if not want:
        return
    if not isinstance(given, str) or not given:
        raise Refused("no key given: this server's swaps need the key it was started with")
    got = hashlib.sha256(given.encode()).hexdigest()
    if not hmac.compare_digest(got, want.lower()):
        raise Refused("wrong key: this server's swaps need the key it was started with")


def guarded_files(path: Any, env: Any = None) -> list[tuple[str, str]]:
    """(name, real path) of each weight file of the drafter at ``path``, after the guard: an absolute
    path to a folder, inside the swap root (when one is set) with every file, each a regular file."""
    env = env if env is not None else ENVIRON
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        raise Refused(f"{path!r}: not an absolute path")
    root = env.get(ROOT_ENV, "")
    rroot = os.path.realpath(root) if root else ""
    real = os.path.realpath(path)
    if rroot and not _inside(real, rroot):
        how = "a link leads out of it" if _inside(os.path.abspath(path), rroot) else "it lies outside it"
        raise Refused(f"{path}: not under the swap root {root} ({how})")
    try:
        st = os.stat(real)
    except OSError as e:
        raise Refused(f"{path}: cannot be read ({e.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Refused(f"{path}: not a folder of safetensors files")
    names = weight_files(real)
    if not names:
        raise Refused(f"{path}: no .safetensors files")
    out = []
    for n in names:
        rp = os.path.realpath(os.path.join(real, n))
        if rroot and not _inside(rp, rroot):
            raise Refused(f"{path}/{n}: a link leading out of the swap root {root}")
        out.append((n, rp))
    return out


#: safetensors' dtypes as torch names them (safetensors/src/tensor.rs Dtype; torch.uint16/32/64 from 2.3)
_DTYPES = {
    "BOOL": ("bool", 1), "U8": ("uint8", 1), "I8": ("int8", 1), "I16": ("int16", 2), "U16": ("uint16", 2),
    "F16": ("float16", 2), "BF16": ("bfloat16", 2), "I32": ("int32", 4), "U32": ("uint32", 4),
    "F32": ("float32", 4), "I64": ("int64", 8), "U64": ("uint64", 8), "F64": ("float64", 8),
    "F8_E4M3": ("float8_e4m3fn", 1), "F8_E5M2": ("float8_e5m2", 1), "C64": ("complex64", 8),
}  # fmt: skip
#: the largest header safetensors reads (safetensors/src/tensor.rs MAX_HEADER_SIZE)
MAX_HEADER = 100_000_000


def _entries(raw: memoryview, size: int) -> list[tuple[str, str, list[int], int, int]]:
    """(name, dtype, shape, start, end) of each tensor, the data offsets made absolute, read from a
    header that safetensors has accepted (:func:`_safetensors_accepts`; a name given twice: the last,
    as serde keeps it; fields it does not know: ignored). Checked again here (tensor.rs
    Metadata::validate: known dtypes, each tensor's byte length its shape's, the data packed from
    the header's end to the file's end), so a header read wrongly is refused, never viewed wrongly.
    Raises ValueError saying what is wrong."""
    if size < 8:
        raise ValueError(f"{size} bytes, shorter than a header")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER or 8 + n > size:
        raise ValueError(f"header of {n} bytes in a file of {size}")
    try:
        head = json.loads(bytes(raw[8 : 8 + n]))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"header is not JSON ({str(e)[:80]})") from None
    if not isinstance(head, dict):
        raise ValueError("header is not a JSON object")
    head.pop("__metadata__", None)
    out = []
    for name, entry in head.items():
        try:
            dt, shape, (a, b) = entry["dtype"], entry["shape"], entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise ValueError(f"{name}: not a tensor entry") from None
        ok = isinstance(shape, list) and all(type(x) is int and x >= 0 for x in shape)
        if not isinstance(dt, str) or dt not in _DTYPES or not ok or type(a) is not int or type(b) is not int:
            raise ValueError(f"{name}: dtype, shape or data_offsets is not one safetensors has")
        numel, stride = 1, 1
        for i, x in enumerate(reversed(shape)):
            numel *= x
            if x >= 1 << 63 or stride >= 1 << 63:  # torch's sizes and strides are int64 (an empty tensor's too)
                raise ValueError(f"{name}: shape {shape} is past what a tensor can index")
            stride *= max(x, 1) if i < len(shape) - 1 else 1
        if not 0 <= a <= b or numel * _DTYPES[dt][1] != b - a:
            raise ValueError(f"{name}: {b - a} bytes at {a} for shape {shape} in {dt}")
        out.append((name, dt, shape, 8 + n + a, 8 + n + b))
    at = 8 + n
    for name, _, _, a, b in sorted(out, key=lambda x: (x[3], x[4])):
        if a != at:
            raise ValueError(f"{name}: starts at {a - 8 - n}, not where the tensor before it ends")
        at = b
    if at != size:
        raise ValueError(f"the tensors end at byte {at - 8 - n} of the {size - 8 - n} after the header")
    return out


def _safetensors_accepts(fd: int) -> str | None:
    """Why safetensors itself refuses the open file ``fd`` (None: it reads its header). It reads the
    header through ``/proc/self/fd``, the very file open here, not a path someone could swap."""
    where = f"/proc/self/fd/{fd}"
    if not os.path.exists(where):
        return None  # no /proc (not Linux): the checks of _entries alone
    from safetensors import safe_open

    try:
        with safe_open(where, framework="pt") as f:
            f.keys()
    except Exception as e:  # safetensors' own errors: not one of its files
        return str(e)[:120] or type(e).__name__
    return None


def _read_piece(fd: int, mv: memoryview, at: int, dev: Any, cpu: Any) -> bytes:
    """Bytes ``at`` to ``at + len(mv)`` of the file read into ``mv`` (a short read: the file shrank),
    then their sha256, then (``dev``) their copy on the device: one piece, on a thread of its own."""
    got = 0
    while got < len(mv):
        n = os.preadv(fd, [mv[got:]], at + got)
        if n <= 0:
            raise Refused("changed while it was read")
        got += n
    h = hashlib.sha256(mv).digest()
    if dev is not None:
        dev[at : at + len(mv)].copy_(cpu[at : at + len(mv)])
    return h


def _read_one(
    name: str, rp: str, dg: Digest, device: Any = None, times: dict[str, float] | None = None
) -> dict[str, Any]:
    """One weight file through one descriptor (no blocking open, no link followed at the end): a
    regular, non-empty file whose header passes safetensors' checks. Its bytes are read once into
    one buffer, in 64 MiB pieces on threads, each piece hashed and (on ``device``) copied to the
    device by the thread that read it; every tensor is then a view of the device's copy (on the
    CPU, of the buffer)."""
    import mmap

    import torch

    times = times if times is not None else {}
    try:
        fd = os.open(rp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise Refused(f"{name}: cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
            raise Refused(f"{name}: {kind}, not a safetensors file")
        if st.st_size == 0:
            raise Refused(f"{name}: 0 bytes, not a safetensors file")
        if st.st_size > MAX_FILE:
            raise Refused(f"{name}: {st.st_size} bytes, more than a swap reads ({MAX_FILE >> 30} GiB)")
        why = _safetensors_accepts(fd)
        if why is not None:
            raise Refused(f"{name}: not a safetensors file ({why})")
        t0 = time.monotonic()
        size = st.st_size
        buf = mmap.mmap(-1, size)  # anonymous: its pages are made as the reads fill them, never zeroed first
        if hasattr(mmap, "MADV_HUGEPAGE"):
            buf.madvise(mmap.MADV_HUGEPAGE)
        mv = memoryview(buf)
        cpu = torch.frombuffer(buf, dtype=torch.uint8)
        dev = None if device is None or str(device) == "cpu" else torch.empty(size, dtype=torch.uint8, device=device)
        dg.file(name, size)
        futures = [_pool().submit(_read_piece, fd, mv[at : at + PIECE], at, dev, cpu) for at in range(0, size, PIECE)]
        try:
            for f in futures:
                dg.add(f.result())
        except Refused:
            raise Refused(f"{name}: changed while it was read") from None
        finally:  # no piece may still read from fd once it is closed (its number could name another file)
            for f in futures:
                f.cancel()
            wait(futures)
        if dev is not None:
            torch.cuda.synchronize(dev.device)  # the pieces went on the threads' own streams
        more = os.pread(fd, 1, size)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    same = (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    if more or not same:
        raise Refused(f"{name}: changed while it was read")
    t1 = time.monotonic()
    out = _views(name, mv, dev if dev is not None else cpu)
    times["file"] = times.get("file", 0.0) + t1 - t0
    times["device"] = times.get("device", 0.0) + time.monotonic() - t1
    return out


def _views(name: str, mv: memoryview, whole: Any) -> dict[str, Any]:
    """Each tensor of the file whose bytes are ``mv`` (the header read from them), a view of ``whole``
    (those bytes as a uint8 tensor, on the device or the CPU)."""
    import torch

    try:
        entries = _entries(mv, len(mv))
    except ValueError as e:
        raise Refused(f"{name}: not a safetensors file ({str(e)[:120]})") from None
    out = {}
    for k, dt, shape, a, b in entries:
        tdt = getattr(torch, _DTYPES[dt][0], None)
        if tdt is None:
            raise Refused(f"{name}: {k} is {dt}, which this torch has no dtype for")
        part = whole[a:b]
        if a % _DTYPES[dt][1]:  # not aligned to its dtype: viewed from a copy of its own
            part = part.clone()
        out[k] = part.view(tdt).view(shape)
    return out


def read_guarded(
    path: Any, env: Any = None, device: Any = None, times: dict[str, float] | None = None
) -> tuple[dict[str, Any], str]:
    """Every tensor of the drafter (on ``device``, or the device a callable gives once the guard has
    passed; else the CPU) and its digest, after the guard;
    raises Refused. ``times`` gains the seconds spent reading (``file``), moving and viewing
    (``device``) and waiting for the digest's last pieces (``digest``)."""
    out: dict[str, Any] = {}
    times = times if times is not None else {}
    dg = Digest()
    files = guarded_files(path, env)
    device = device() if callable(device) else device  # asked only once the guard has passed
    for name, rp in files:
        for k, t in _read_one(name, rp, dg, device, times).items():
            if k in out:
                raise Refused(f"{name}: tensor {k} is in two files")
            out[k] = t
    t0 = time.monotonic()
    hexdigest = dg.hexdigest()
    times["digest"] = time.monotonic() - t0
    return out, hexdigest


def _parts(out: dict[str, Any], parts: dict[str, float]) -> dict[str, Any]:
    """The read's own phases in the answer's timings (``read_file``, ``read_device``, ``read_digest``):
    where a swap's read goes."""
    if isinstance(out.get("timings"), dict):
        out["timings"].update({f"read_{k}": v for k, v in parts.items()})
    return out


def _initial(env: Any) -> dict[str, Any]:
    """What ckpt serve says it launched with (not read back: the launch's word)."""
    try:
        got = json.loads(env.get(INITIAL_ENV) or "{}")
    except ValueError:
        got = {}
    ok = isinstance(got, dict) and isinstance(got.get("path"), str) and isinstance(got.get("digest"), str)
    return {"path": got["path"], "digest": got["digest"], "source": "launch"} if ok else {}


def state(env: Any = None) -> dict[str, Any]:
    """What this process serves: the last committed swap's drafter, else the launch's, and how many swaps."""
    env = env if env is not None else ENVIRON
    base = {"path": None, "digest": None, "source": "unknown", "generation": 0, "since": None}
    return {**base, **_initial(env), **_STATE, "rank": _rank(), "world": _world()}


def commit_state(path: str, dg: str, maps: int) -> dict[str, Any]:
    """Remember the drafter just written and say so in one line (the logs read it)."""
    prev = state()
    _STATE.update(path=path, digest=dg, source="swap", generation=prev["generation"] + 1, since=time.time())
    line = (
        f"ckpttools swap: drafter={json.dumps(path)} digest={dg[:16]} rank={_rank()} world={_world()} "
        f"maps={'replaced' if maps else 'none'}"
    )
    print(line, file=sys.stderr, flush=True)
    return prev


def _locked() -> Any:
    """The swap lock of this process: a second swap waits for the first (at most CKPT_SWAP_LOCK_WAIT s)."""
    wait = float(ENVIRON.get("CKPT_SWAP_LOCK_WAIT") or 600)
    if not _LOCK.acquire(timeout=wait):
        raise Refused(f"another swap held this rank for {wait:g} s")
    return _LOCK


def _backup(model: Any, names: Any) -> dict[str, Any]:
    params = dict(model.named_parameters(remove_duplicate=False))
    return {n: params[n].detach().clone() for n in names if n in params}


def _restore(model: Any, backup: dict[str, Any]) -> str:
    """Put the old values back after a failed write; says whether it could."""
    import torch

    params = dict(model.named_parameters(remove_duplicate=False))
    try:
        with torch.no_grad():
            for n, old in backup.items():
                params[n].data.copy_(old)
    except Exception as e:
        return f"the old weights could not be put back ({type(e).__name__}: {e}): restart the server"
    return "the old weights were put back"


def _sync(device: Any) -> float:
    """The time, once the device has finished what it was given (the phases' seconds are real)."""
    import torch

    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)
    return time.monotonic()


def _param_name(name: str, spec: dict[str, Any]) -> tuple[str, str | None]:
    """The parameter name a file tensor lands in before the prefix, and its shard id in a stacked
    parameter (the release table's loader rules)."""
    if name == "d2t":
        return spec.get("d2t_to", "d2t"), None
    for old, new in spec.get("renames", []):
        if old in name:
            name = name.replace(old, new)
    for stacked, part, shard in spec.get("stacked", []):
        if part in name:
            return name.replace(part, stacked), shard
    return name, None


def _expected(files: Any, spec: dict[str, Any], params: set[str]) -> dict[str, list[tuple[str, str | None]]]:
    """Each parameter the file fills, and its file tensors in shard order. A name is looked up as it
    is, else with the loader's prefix (lm_head never takes one)."""
    order = {str(shard): i for i, (_, _, shard) in enumerate(spec.get("stacked", []))}
    out: dict[str, list[tuple[str, str | None]]] = {}
    for name in files:
        p, shard = _param_name(name, spec)
        if p not in params and not p.startswith(tuple(spec.get("no_prefix", []))):
            p = spec.get("prefix", "") + p
        out.setdefault(p, []).append((name, shard))
    for parts in out.values():
        parts.sort(key=lambda x: order.get(str(x[1]), -1))
    return out


def _never(name: str, spec: dict[str, Any]) -> bool:
    return any(s in name for s in spec.get("never_loaded", []))


def _shared(draft: Any, target: Any) -> set[str]:
    """The draft model's parameters that are the target's own tensor objects (vLLM puts the target's
    embed_tokens or lm_head module in the drafter's place when it shares them)."""
    theirs = {id(p) for p in target.parameters()}
    return {n for n, p in draft.named_parameters(remove_duplicate=False) if id(p) in theirs}


def _plan(files: dict[str, Any], draft: Any, target: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Which file tensors to load. A parameter the draft model shares with the target is never
    written: a file whose values differ there refuses the swap (the target is never touched)."""
    import torch

    params = dict(draft.named_parameters(remove_duplicate=False))
    shared = _shared(draft, target) if target is not None else set()
    expected = _expected(files, spec, set(params))
    skip: list[str] = []
    refused = None
    for pname, parts in expected.items():
        names = [n for n, _ in parts]
        if any(_never(n, spec) for n in names):
            skip += names
        elif pname in shared:
            got = torch.cat([files[n].reshape(-1) for n in names]).to(params[pname].dtype)
            if torch.equal(got.cpu(), params[pname].detach().reshape(-1).cpu()):
                skip += names  # the target's own values: nothing to load
            else:
                refused = f"{pname} is the target's own tensor in the running drafter, and this drafter's differs"
        elif pname not in params:
            refused = f"{names[0]}: the running drafter has no parameter {pname}"
    return {"skip": skip, "refused": refused, "expected": expected}


def _read_back(
    draft: Any, files: dict[str, Any], expected: dict[str, list[tuple[str, str | None]]], skip: list[str]
) -> dict[str, Any]:
    """Each loaded parameter held against the file's tensors on the device (ckpt_digest.check_param):
    ``checks`` is {parameter: [how, holds]}, ``numel`` its size as held."""
    from ckpt_digest import check_param  # type: ignore[import-not-found]

    params = dict(draft.named_parameters(remove_duplicate=False))
    modules = dict(draft.named_modules())
    world = _world()
    checks: dict[str, list[Any]] = {}
    numel: dict[str, int] = {}
    for p, parts in expected.items():
        if p not in params or parts[0][0] in skip or not all(n in files for n, _ in parts):
            continue
        mod = modules.get(p.rsplit(".", 1)[0]) if "." in p else None
        sharded = world > 1 and int(getattr(mod, "tp_size", 1) or 1) > 1
        dev = params[p].device
        how, ok = check_param(params[p], [files[n].to(dev) for n, _ in parts], mod, sharded)
        checks[p] = [how, ok]
        numel[p] = int(params[p].numel())
    return {"checks": checks, "numel": numel}


class VllmDrafterSwap:
    """vLLM worker extension: ``ckpt_swap(path)`` loads a drafter into the running draft model and
    holds it against the file; ``ckpt_target_digest()`` digests the target model's weights."""

    def _models(self) -> tuple[Any, Any]:
        runner: Any = getattr(self, "model_runner", self)
        return runner.get_draft_model(), runner.get_model()

    def ckpt_swap(self, path: str, key: str = "") -> str:
        """Swap in the drafter at ``path`` (the guard first: key, root, files), staged, then written
        in one step; a write that fails puts the old values back."""
        spec = _spec()
        out: dict[str, Any] = {"rank": _rank(), "path": path}
        try:
            lock = _locked()
        except Refused as e:
            return json.dumps({**out, "refused": str(e), "skipped": []})
        try:
            check_key(key)
            r0 = time.monotonic()
            parts: dict[str, float] = {}
            files, dg = read_guarded(path, device=lambda: next(self._models()[0].parameters()).device, times=parts)
            read_s = time.monotonic() - r0
        except Refused as e:
            lock.release()
            return json.dumps({**out, "refused": str(e), "skipped": [], "state": state()})
        try:
            return json.dumps(_parts(self._commit(path, files, dg, spec, out, read_s), parts))
        except Exception as e:  # the answer says what failed; the worker keeps serving
            return json.dumps(
                {**out, "refused": f"{type(e).__name__}: {str(e)[:300]}", "skipped": [], "state": state()}
            )
        finally:
            lock.release()

    def _commit(
        self, path: str, files: dict[str, Any], dg: str, spec: dict[str, Any], out: dict[str, Any], read_s: float
    ) -> Any:
        draft, target = self._models()
        device = next(draft.parameters()).device
        t0 = _sync(device)
        files = {k: t.to(device) for k, t in files.items()}  # moved once: loaded and held against
        t1 = _sync(device)
        plan = _plan(files, draft, target, spec)
        out |= {"skipped": plan["skip"], "refused": plan["refused"], "digest": dg}
        if plan["refused"] is not None:
            return {**out, "state": state()}
        weights = [(n, t) for n, t in files.items() if n not in plan["skip"]]
        backup = _backup(draft, plan["expected"])
        try:
            self._load(draft, weights, spec)
        except Exception as e:  # nothing half-written stays: the old values go back
            out["refused"] = f"the write failed ({type(e).__name__}: {str(e)[:200]}); {_restore(draft, backup)}"
            return {**out, "state": state()}
        t2 = _sync(device)
        out["loaded"] = [n for n, _ in weights]
        out["maps_replaced"] = int("d2t" in out["loaded"])  # draft_id_to_target_id is read at every step
        out["previous"] = commit_state(path, dg, out["maps_replaced"])  # written: remembered before anything else
        out |= _read_back(draft, files, plan["expected"], plan["skip"])
        t3 = _sync(device)
        out["timings"] = {"read": read_s + t1 - t0, "update": t2 - t1, "check": t3 - t2}
        out["bytes"] = sum(int(t.numel() * t.element_size()) for t in files.values())
        out["state"] = state()
        return out

    def ckpt_state(self) -> str:
        """What this worker serves (no key: it changes nothing)."""
        return json.dumps(state())

    def _load(self, draft: Any, weights: list[tuple[str, Any]], spec: dict[str, Any]) -> None:
        """load_weights as at start-up: a layer whose weights were processed into a kernel format
        after loading (vLLM's CPU linear layers are) is restored first and processed again after
        (the table's ``reload``: vLLM's own layerwise in-place reload)."""
        import importlib

        r = spec.get("reload")
        if not r:
            draft.load_weights(weights)
            return
        mod = importlib.import_module(r["module"])
        cfg: Any = getattr(self, "model_runner", self)
        for attr in r["config"]:
            cfg = getattr(cfg, attr)
        getattr(mod, r["begin"])(draft)
        try:
            draft.load_weights(weights)
        finally:
            getattr(mod, r["end"])(draft, cfg)

    def ckpt_target_digest(self) -> str:
        """ckpt_digest.model_digest of the target model, with this worker's rank and the seconds it took."""
        from ckpt_digest import model_digest  # type: ignore[import-not-found]

        _, target = self._models()
        device = next(target.parameters()).device
        t0 = _sync(device)
        got = model_digest(target)
        return json.dumps({"rank": _rank(), "class": type(target).__name__, **got, "seconds": _sync(device) - t0})


def sglang_load_drafter(model: Any, named_tensors: list) -> None:
    """SGLang custom weight loader: called for the draft model and then for the target with the same
    payload. The payload is one (SWAP_TAG, JSON) pair: the op (``swap``, the default, ``state`` or
    ``target_digest``), the drafter's path and the key for a swap, and where to write this rank's
    answer (a file in a folder private to the server's user). A swap or a state is answered on the
    draft model's call (the target's returns at once); a target digest on the target's call (the
    draft model's returns at once)."""
    spec = _spec()
    (tag, raw), *_ = named_tensors
    if tag != SWAP_TAG:
        return
    req = json.loads(raw if isinstance(raw, str) else bytes(raw.cpu().tolist()).decode())
    is_draft = type(model).__name__ in spec.get("draft_classes", [])
    op = req.get("op", "swap")
    rank = _rank()
    if (op == "target_digest") == is_draft:
        return  # the other model's call
    dest = _answer_dest(str(req.get("answer", "")), rank)
    if dest is None:
        print(
            f"ckpttools swap: refused: answer path {str(req.get('answer'))[:200]!r} is no private answer file",
            file=sys.stderr,
            flush=True,
        )
        return
    out: dict[str, Any]
    if op == "target_digest":
        out = _sglang_target_digest(model)
    elif op == "state":
        out = state()  # its path is the loaded drafter's
    else:
        out = _sglang_guarded(model, req, spec) | {"path": req.get("path")}
    out |= {"rank": rank}
    tmp = f"{dest}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(out, f)
    os.replace(tmp, dest)


def _sglang_target_digest(model: Any) -> dict[str, Any]:
    from ckpt_digest import model_digest  # type: ignore[import-not-found]

    device = next(model.parameters()).device
    t0 = _sync(device)
    try:
        got = model_digest(model)
    except Exception as e:  # said in the answer: the check reads "not checked" and why
        return {"op": "target_digest", "refused": f"{type(e).__name__}: {e}"}
    return {"op": "target_digest", "class": type(model).__name__, **got, "seconds": _sync(device) - t0}


def _answer_dest(dest: str, rank: int) -> str | None:
    """Where this rank's answer goes, or None: only ``rankN.json`` in a folder (no link) that is this
    user's own and open to no one else (as the client's mkdtemp makes it)."""
    import re

    dest = dest.replace("{rank}", str(rank))
    parent, name = os.path.split(dest)
    if not os.path.isabs(dest) or not re.fullmatch(r"rank[0-9]{1,6}\.json", name):
        return None
    try:
        st = os.lstat(parent)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return dest


def _sglang_guarded(model: Any, req: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """One swap on this rank: the lock, the guard, then the staged write (answers, never raises)."""
    try:
        lock = _locked()
    except Refused as e:
        return {"refused": str(e), "skipped": []}
    try:
        check_key(req.get("key", ""))
        r0 = time.monotonic()
        parts: dict[str, float] = {}
        files, dg = read_guarded(req.get("path"), device=lambda: next(model.parameters()).device, times=parts)
        read_s = time.monotonic() - r0
        out = _sglang_swap(model, files, spec, lambda maps: commit_state(str(req["path"]), dg, maps))
        out["digest"] = dg
        if "timings" in out:
            out["timings"]["read"] += read_s  # the file's bytes read, digested and moved to the device
            _parts(out, parts)
    except Refused as e:
        out = {"refused": str(e), "skipped": []}
    except Exception as e:  # the answer says what failed; the server keeps running
        out = {"refused": f"{type(e).__name__}: {e}", "skipped": []}
    finally:
        lock.release()
    out["state"] = state()
    return out


def _sglang_workers(model: Any, spec: dict[str, Any]) -> list[Any]:
    """The draft workers that hold this model (found among live objects, by the table's class names)."""
    import gc

    classes = set(spec.get("worker_classes", []))
    found = []
    for obj in gc.get_objects():
        if type(obj).__name__ in classes:
            holder: Any = obj
            for attr in spec.get("worker_model_path", []):
                holder = getattr(holder, attr, None)
            if holder is model:
                found.append(obj)
    return found


def _sglang_swap(model: Any, files: dict[str, Any], spec: dict[str, Any], commit: Any) -> dict[str, Any]:
    """Stage (plan, map shapes, old values kept), then write the weights and the cached maps; a
    write that fails puts the old weights and maps back."""
    import torch

    device = next(model.parameters()).device
    t0 = _sync(device)
    files = {k: t.to(device) for k, t in files.items()}  # moved once: loaded and held against
    t1 = _sync(device)
    d2t = files.pop("d2t", None)
    files.pop("t2d", None)
    plan = _plan(files, model, None, spec)  # SGLang shares embed_tokens with the target: never_loaded
    out: dict[str, Any] = {"skipped": plan["skip"], "refused": plan["refused"], "maps_replaced": 0}
    if plan["refused"] is not None:
        return out
    maps: list[Any] = []
    hot = None
    workers = 0
    if d2t is not None:
        hot = d2t.to(device=device, dtype=torch.long) + torch.arange(len(d2t), device=device)
        maps = [getattr(w, spec["worker_map_attr"]) for w in _sglang_workers(model, spec)]
        own = getattr(model, spec.get("model_map_attr", ""), None)
        for cached in maps + ([own] if own is not None else []):
            if cached.shape != hot.shape:
                out["refused"] = f"the running map has {cached.shape[0]} slots, this drafter {hot.shape[0]}"
                return out
        workers = len(maps)
        maps += [own] if own is not None else []
    loaded = [(n, t) for n, t in files.items() if n not in plan["skip"]]
    backup = _backup(model, plan["expected"])
    old_maps = [m.clone() for m in maps]
    try:
        model.load_weights(iter(loaded))
        for m in maps:
            m.copy_(hot.to(m.device))  # type: ignore[union-attr]
    except Exception as e:
        why = _restore(model, backup)
        for m, old in zip(maps, old_maps):
            m.copy_(old)
        out["refused"] = f"the write failed ({type(e).__name__}: {str(e)[:200]}); {why}"
        return out
    t2 = _sync(device)
    out["maps_replaced"] = workers
    out["previous"] = commit(workers)  # written: remembered before anything else
    out["loaded"] = [n for n, _ in loaded]
    out |= _read_back(model, files, plan["expected"], plan["skip"])
    t3 = _sync(device)
    out["timings"] = {"read": t1 - t0, "update": t2 - t1, "check": t3 - t2}
    out["bytes"] = sum(int(t.numel() * t.element_size()) for t in files.values()) + (
        int(d2t.numel() * d2t.element_size()) if d2t is not None else 0
    )
    return out
