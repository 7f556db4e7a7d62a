"""Hub repos read the Hub's way: configs through huggingface_hub's cache, safetensors
headers and the few tensors a command needs by HTTP range request, whole repos only
when a command copies every byte (and then through huggingface_hub's cache too).

What is honoured, as huggingface_hub itself does: ``HF_ENDPOINT``, ``HF_TOKEN`` and the
stored login, ``HF_HUB_OFFLINE=1`` (only the caches), ``HF_HUB_DOWNLOAD_TIMEOUT``.

Every request ckpttools itself makes (the file list, range reads) goes through
:mod:`ckpttools.io.net`: each read waits at most ``HF_HUB_DOWNLOAD_TIMEOUT``, each request
at most ``CKPT_HUB_DEADLINE`` seconds in all (default: ten times the read timeout), and a
wrong Content-Range, a trickle, an endless or HTML body is one error (exit 2).

Headers fetched once are kept in ckpttools' own cache (``$HF_HOME/ckpttools``, or
``CKPT_CACHE``), keyed by repo, commit, path and each file's sha256 as the Hub states it,
so a second run and an offline run read no header twice; the file list of each commit is
kept beside them.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.errors import CheckpointFormatError, CheckpointNotFoundError, CkptError, HubError
from ckpttools.io.env import env_seconds, hub_constants
from ckpttools.io.refs import REPO_REF, split_ref
from ckpttools.io.safetensors_header import ShardHeader, check_header_length, parse_header

__all__ = ["HubFile", "HubRepo", "REPO_REF", "split_ref", "cache_dir", "SNAPSHOT_PATTERNS", "in_snapshot"]

#: the files an operation that copies every byte fetches of a Hub repo (weights, configs, tokenizers)
SNAPSHOT_PATTERNS = ("*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt")

_FIRST_READ = 64 << 10  # bytes asked for a first header read; most drafters' headers fit
_WORKERS = 8  # range requests in flight at once
_WHOLE_READ_LIMIT = 64 << 20  # a server that ignores Range is read this far at most
_LISTING_LIMIT = 64 << 20  # the largest file list read from the Hub
_HEADER_CACHE_LIMIT = 256 << 20  # the largest cached header read back (safetensors caps headers at 100 MB)


_READ_ONLY_CACHE = contextvars.ContextVar("ckpt_read_only_cache", default=False)


@contextmanager
def read_only_cache() -> Iterator[None]:
    """Within it, ckpttools' cache is read but never written (``--dry-run`` writes nothing)."""
    token = _READ_ONLY_CACHE.set(True)
    try:
        yield
    finally:
        _READ_ONLY_CACHE.reset(token)


def cache_dir() -> Path:
    """Where ckpttools keeps header bytes and commit file lists (never tensor data)."""
    env = os.environ.get("CKPT_CACHE")
    if env:
        return Path(env)
    constants = hub_constants()

    return Path(constants.HF_HOME) / "ckpttools"


@dataclass(frozen=True)
class HubFile:
    """One file of a commit, as the Hub lists it."""

    path: str
    size: int | None
    sha256: str | None  # the LFS object id: the sha256 of the content (LFS files only)
    blob_id: str | None  # the git blob id (every file)


@dataclass
class HubRepo:
    """A repo pinned to one commit, with its file list; reads count the bytes they move."""

    repo_id: str
    revision: str | None
    commit: str
    files: dict[str, HubFile]
    bytes_fetched: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- resolving --------------------------------------------------------------------
    @classmethod
    def resolve(cls, repo_id: str, revision: str | None = None) -> HubRepo:
        """The commit a revision names, and its files: from the Hub (one listing request through
        :mod:`ckpttools.io.net`, with a total deadline), or offline from the cache."""
        constants = hub_constants()
        from huggingface_hub.utils import build_hf_headers

        from ckpttools.io.net import quote_segment

        if constants.HF_HUB_OFFLINE:
            return cls._from_cache(repo_id, revision)
        what = f"{repo_id}{'@' + revision if revision else ''}"
        url = f"{constants.ENDPOINT}/api/models/{repo_id}"
        if revision:
            url += f"/revision/{quote_segment(revision)}"
        with hub_errors(repo_id, revision):
            resp = _client().get(
                url + "?blobs=true",
                headers=build_hf_headers(),
                deadline=_deadline(),
                max_bytes=_LISTING_LIMIT,
                what="the file list",
                where=what,
                wording=_wording(),
            )
        if resp.status >= 400:
            raise _status_error(resp, what, repo_id, revision)
        commit, files = _parse_listing(resp.json(), what, repo_id)
        repo = cls(repo_id, revision, commit, files)
        repo._remember()
        return repo

    def _record_dir(self) -> Path:
        return cache_dir() / "repos" / self.repo_id.replace("/", "--")

    def _remember(self) -> None:
        """Keep the commit's file list, and which commit the revision named, for offline runs."""
        from ckpttools.io.guard import write_text

        if _READ_ONLY_CACHE.get():
            return
        d = self._record_dir()
        try:
            listing = {p: [f.size, f.sha256, f.blob_id] for p, f in self.files.items()}
            write_text(d / f"{self.commit}.json", json.dumps(listing))
            write_text(d / "refs" / _ref_name(self.revision), self.commit)
        except (OSError, CkptError):  # a read-only cache (or one inside an input) costs only the offline reuse
            pass

    @classmethod
    def _from_cache(cls, repo_id: str, revision: str | None) -> HubRepo:
        d = cache_dir() / "repos" / repo_id.replace("/", "--")
        commit = revision if revision and re.fullmatch(r"[0-9a-f]{40}", revision) else None
        from ckpttools.io.inputs import read_json

        try:
            if commit is None:
                commit = (d / "refs" / _ref_name(revision)).read_text().strip()
            listing = _cached_listing(read_json(d / f"{commit}.json", "cache"))
        except (OSError, ValueError, CkptError):
            from_hf = cls._from_hf_cache(repo_id, revision)
            if from_hf is not None:
                return from_hf
            raise CheckpointNotFoundError(
                f"{repo_id}{'@' + revision if revision else ''}: not in the local cache, and HF_HUB_OFFLINE=1 "
                "forbids asking the Hub",
                path=repo_id,
                hint="run the command once online (it caches configs and headers), or unset HF_HUB_OFFLINE",
            ) from None
        return cls(repo_id, revision, commit, listing)

    @classmethod
    def _from_hf_cache(cls, repo_id: str, revision: str | None) -> HubRepo | None:
        """huggingface_hub's own cache of the revision: the commit from its refs, the files
        from its snapshot folder (what was downloaded, with sizes; no sha256)."""
        snap = _hf_snapshot_dir(repo_id, revision)
        if snap is None:
            return None
        commit = snap.name
        files = {
            str(p.relative_to(snap)): HubFile(str(p.relative_to(snap)), p.stat().st_size, None, None)
            for p in snap.rglob("*")
            if p.is_file()
        }
        return cls(repo_id, revision, commit, files)

    # -- whole files through huggingface_hub's cache ------------------------------------
    def download(self, path: str) -> Path:
        """One small file (config.json, the index), through huggingface_hub's cache (a second call
        transfers nothing), within the same total deadline as every other Hub request: a Hub
        that trickles the file is an error at the deadline, not a hang."""
        hub_constants()
        from huggingface_hub import hf_hub_download

        f = self.files.get(path)
        limit = _deadline(f.size or 0 if f is not None else 0)
        with hub_errors(self.repo_id, self.revision, path):
            got = _within(limit, lambda: hf_hub_download(self.repo_id, path, revision=self.commit))
        if got is None:
            raise HubError(
                f"{self.repo_id}: {path} did not arrive within {limit:g} s",
                url=self.repo_id,
                hint=_OFFLINE_HINT + " (or raise CKPT_HUB_DEADLINE)",
            )
        return Path(got)

    def read_json(self, path: str, kind: str, *, error: type[Exception] | None = None, hint: str | None = None) -> Any:
        """A small JSON file of the commit (config.json, the index), parsed with the limits of
        :mod:`ckpttools.io.inputs`: through huggingface_hub's cache (:meth:`download`), or, while
        the cache is read-only (``--dry-run``), from the cache when it holds the file and else by
        one range request into memory: a dry run downloads nothing into a cache."""
        from ckpttools.errors import ConfigError
        from ckpttools.io.inputs import JSON_LIMITS, loads_json, read_json

        err = error or ConfigError
        if not _READ_ONLY_CACHE.get():
            return read_json(self.download(path), kind, error=err, hint=hint)
        cached = self._hf_cached(path)
        if cached is not None:
            return read_json(cached, kind, error=err, hint=hint)
        f = self.files.get(path)
        if f is None or f.size is None:
            raise HubError(f"{self.repo_id}: the Hub gave no size for {path}", url=self.repo_id)
        limit = JSON_LIMITS.get(kind, JSON_LIMITS["json"])
        if f.size > limit:
            raise CheckpointFormatError(
                f"{self.repo_id}/{path}: {f.size} bytes is too large for this kind of file (limit {limit})",
                path=f"{self.repo_id}/{path}",
                hint="is this the right file?",
            )
        return loads_json(self.fetch(path, 0, f.size), f"{self.repo_id}/{path}", error=err, hint=hint)

    def _hf_cached(self, path: str) -> Path | None:
        """huggingface_hub's cached copy of one file of this commit, read from disk only."""
        from huggingface_hub import try_to_load_from_cache

        try:
            got = try_to_load_from_cache(self.repo_id, path, revision=self.commit)
        except (OSError, ValueError):
            return None
        return Path(got) if isinstance(got, str) and os.path.isfile(got) else None

    def snapshot(self, patterns: list[str]) -> Path:
        """The files matching ``patterns``, with huggingface_hub's progress bars, into its cache."""
        hub_constants()
        from huggingface_hub import snapshot_download

        with hub_errors(self.repo_id, self.revision):
            return Path(snapshot_download(self.repo_id, revision=self.commit, allow_patterns=patterns))

    def size_of(self, patterns: list[str]) -> int:
        from fnmatch import fnmatch

        return sum(f.size or 0 for p, f in self.files.items() if any(fnmatch(p, pat) for pat in patterns))

    # -- byte ranges --------------------------------------------------------------------
    def fetch(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a file by one range request through :mod:`ckpttools.io.net`
        (206 expected, its Content-Range and length checked; a server that ignores the range
        is read only as far as needed, then the connection is closed)."""
        constants = hub_constants()
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        if end <= start:
            return b""
        if constants.HF_HUB_OFFLINE:
            raise HubError(
                f"{self.repo_id}: {path} bytes {start}-{end - 1} are not cached and HF_HUB_OFFLINE=1",
                url=self.repo_id,
                hint="run the command once online, or unset HF_HUB_OFFLINE",
            )
        url = hf_hub_url(self.repo_id, path, revision=self.commit)
        label = f"{self.repo_id}{'@' + self.revision if self.revision else ''}"
        with hub_errors(self.repo_id, self.revision, path):
            resp = _client().range_get(
                url,
                start,
                end,
                headers=build_hf_headers(),
                deadline=_deadline(end - start),
                whole_limit=_WHOLE_READ_LIMIT,
                what=f"{path} bytes {start}-{end - 1}",
                where=label,
                wording=_wording(),
            )
        if resp.status >= 400:
            raise _status_error(resp, label, self.repo_id, self.revision, path)
        with self._lock:
            self.bytes_fetched += resp.transferred
            self.requests += 1
        if len(resp.body) != end - start:
            raise CheckpointFormatError(
                f"{self.repo_id}/{path}: asked for bytes {start}-{end - 1}, got {len(resp.body)} bytes",
                path=f"{self.repo_id}/{path}",
                hint="the file on the Hub is shorter than its header says: it is damaged",
            )
        return resp.body

    def fetch_many(self, path: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Several ranges of one file, ``_WORKERS`` requests in flight."""
        if len(ranges) <= 1:
            return [self.fetch(path, a, b) for a, b in ranges]
        return _in_threads(lambda r: self.fetch(path, *r), ranges)

    # -- safetensors headers ------------------------------------------------------------
    def headers(self, shards: list[str]) -> dict[str, ShardHeader]:
        """Each shard's header: from the header cache, else by range request (the first
        read sized from the previous header, a second read only when a header is longer)."""
        out: dict[str, ShardHeader] = {}
        todo = []
        for s in shards:
            cached = self._cached_header(s)
            if cached is not None:
                out[s] = cached
            else:
                todo.append(s)
        if todo:
            first = self._fetch_header(todo[0], _FIRST_READ)
            out[todo[0]] = first
            guess = max(_FIRST_READ, int((first.header_len + 8) * 1.1))  # shards of one checkpoint are alike
            if len(todo) > 1:
                for s, h in zip(todo[1:], _in_threads(lambda s: self._fetch_header(s, guess), todo[1:])):
                    out[s] = h
        return {s: out[s] for s in shards}

    def _label(self, shard: str) -> str:
        return f"{self.repo_id}@{self.commit[:12]}/{shard}"

    def _fetch_header(self, shard: str, guess: int) -> ShardHeader:
        f = self.files.get(shard)
        size = f.size if f is not None and f.size is not None else None
        want = guess if size is None else min(guess, size)
        head = self.fetch(shard, 0, want) if want >= 8 else b""
        if size is None:
            raise HubError(f"{self.repo_id}: the Hub gave no size for {shard}", url=self.repo_id)
        n = check_header_length(self._label(shard), head[:8], size)
        raw = head[8 : 8 + n]
        if len(raw) < n:
            raw += self.fetch(shard, 8 + len(raw), 8 + n)
        h = parse_header(raw, size, self._label(shard), shard)
        self._store_header(shard, raw, size)
        return h

    def _header_key(self, shard: str) -> Path | None:
        """Where a shard's header is cached: keyed by repo, commit, path and the file's sha256
        (its git blob id when the Hub gives no sha256), so no two files ever share an entry."""
        import hashlib

        f = self.files.get(shard)
        if f is None or not (f.sha256 or f.blob_id):
            return None
        content = f.sha256 or f"blob-{f.blob_id}"
        key = hashlib.sha256(json.dumps([self.repo_id, self.commit, shard, content]).encode()).hexdigest()
        return cache_dir() / "headers" / key[:2] / key

    def _cached_header(self, shard: str) -> ShardHeader | None:
        from ckpttools.io.fsutil import read_regular_bytes

        key = self._header_key(shard)
        f = self.files.get(shard)
        if key is None or f is None or f.size is None:
            return None
        try:
            raw = read_regular_bytes(key, _HEADER_CACHE_LIMIT)
        except (OSError, CkptError):
            return None
        try:
            return parse_header(raw, f.size, self._label(shard), shard)
        except CheckpointFormatError:  # a damaged cache entry: read the header again
            return None

    def _store_header(self, shard: str, raw: bytes, size: int) -> None:
        from ckpttools.io.guard import write_bytes

        key = self._header_key(shard)
        if key is None or _READ_ONLY_CACHE.get():
            return
        try:
            write_bytes(key, raw)
        except (OSError, CkptError):
            pass

    def describe(self) -> dict[str, Any]:
        """What a report names: the repo, the revision asked for, the commit read, and the bytes read
        by range request (headers and tensor rows; config and index come through huggingface_hub's cache)."""
        return {
            "repo": self.repo_id,
            "revision": self.revision,
            "commit": self.commit,
            "range_bytes": self.bytes_fetched,
            "range_requests": self.requests,
        }

    def record(self, paths: list[str]) -> dict[str, Any]:
        """What a manifest keeps of a repo it read: id, commit, and the Hub's sha256 of each file read."""
        return {"repo": self.repo_id, "revision": self.revision, "commit": self.commit, "sha256": self.sha256_of(paths)}

    def sha256_of(self, paths: list[str]) -> dict[str, str | None]:
        """The Hub's sha256 of each file (LFS files), else its git blob id, as ``git:<id>``."""
        out: dict[str, str | None] = {}
        for p in paths:
            f = self.files.get(p)
            out[p] = None if f is None else (f.sha256 or (f"git:{f.blob_id}" if f.blob_id else None))
        return out


def in_snapshot(path: str) -> bool:
    """Whether :data:`SNAPSHOT_PATTERNS` fetch this file of a repo (as huggingface_hub matches them)."""
    from fnmatch import fnmatch

    return any(fnmatch(path, pat) for pat in SNAPSHOT_PATTERNS)


def _in_threads(fn: Any, items: list[Any]) -> list[Any]:
    """``[fn(x) for x in items]``, ``_WORKERS`` at a time, each in a copy of the caller's context: a
    read-only cache (``--dry-run``, :func:`read_only_cache`) stays read-only in every thread."""
    from concurrent.futures import ThreadPoolExecutor

    ctx = contextvars.copy_context()
    with ThreadPoolExecutor(_WORKERS) as pool:
        return list(pool.map(lambda x: ctx.copy().run(fn, x), items))


def _hf_snapshot_dir(repo_id: str, revision: str | None) -> Path | None:
    """The snapshot folder huggingface_hub's cache holds for the revision (its refs name the commit)."""
    constants = hub_constants()

    repo_dir = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}"
    commit = revision if revision and re.fullmatch(r"[0-9a-f]{40}", revision) else None
    try:
        commit = commit or (repo_dir / "refs" / (revision or "main")).read_text().strip()
    except OSError:
        return None
    snap = repo_dir / "snapshots" / commit
    return snap if re.fullmatch(r"[0-9a-f]{40}", commit) and snap.is_dir() else None


def cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    """huggingface_hub's own cached snapshot of the revision, when it holds the weights
    (every shard its index names, or a top-level .safetensors file); read from disk only."""
    snap = _hf_snapshot_dir(repo_id, revision)
    if snap is None:
        return None
    index = snap / "model.safetensors.index.json"
    if index.is_file():
        from ckpttools.io.inputs import read_json

        try:
            shards = set(read_json(index, "index").get("weight_map", {}).values())
        except (OSError, ValueError, AttributeError, TypeError, CkptError):
            return None
        return snap if shards and all((snap / s).is_file() for s in shards) else None
    return snap if any(snap.glob("*.safetensors")) else None


def _ref_name(revision: str | None) -> str:
    return (revision or "main").replace("/", "%2F")


@contextmanager
def hub_errors(repo_id: str, revision: str | None = None, path: str | None = None) -> Iterator[None]:
    """huggingface_hub's and its HTTP client's exceptions as ckpttools errors (exit 2), each with what to do."""
    hub_constants()
    from huggingface_hub import errors as e

    from ckpttools.io.net import transport_exceptions

    t, tr = transport_exceptions()
    timeouts: tuple[type[BaseException], ...] = (*t, TimeoutError)
    transport: tuple[type[BaseException], ...] = (*tr, ConnectionError)
    what = f"{repo_id}{'@' + revision if revision else ''}"
    try:
        yield
    except CkptError:
        raise
    except e.GatedRepoError:
        raise _denied(what, repo_id) from None
    except e.RevisionNotFoundError:
        raise CheckpointNotFoundError(
            f"{what}: the Hub has no revision {revision!r} in {repo_id}",
            path=repo_id,
            hint="check the branch, tag or commit after @",
        ) from None
    except e.RemoteEntryNotFoundError:
        raise CheckpointNotFoundError(f"{what}: no file {path!r} in the repo", path=repo_id) from None
    except e.RepositoryNotFoundError as err:
        if err.response is not None and err.response.status_code == 401:
            raise _login(what, repo_id) from None
        raise CheckpointNotFoundError(
            f"{what}: no such repo on the Hub", path=repo_id, hint="check the repo id (org/name)"
        ) from None
    except e.OfflineModeIsEnabled:
        raise CheckpointNotFoundError(
            f"{what}: not in the local cache, and HF_HUB_OFFLINE=1 forbids asking the Hub",
            path=repo_id,
            hint="run the command once online, or unset HF_HUB_OFFLINE",
        ) from None
    except e.HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else None
        if status == 403:
            raise _denied(what, repo_id) from None
        if status == 401:
            raise _login(what, repo_id) from None
        first = (str(err).splitlines() or [err.__class__.__name__])[0]
        raise HubError(f"{what}: the Hub answered {status}: {first}", url=repo_id) from None
    except timeouts:
        raise HubError(
            f"{what}: the Hub did not answer in time",
            url=repo_id,
            hint=_OFFLINE_HINT + " (or raise HF_HUB_DOWNLOAD_TIMEOUT)",
        ) from None
    except transport as err:
        raise _transport_error(what, repo_id, path, err) from None
    except OSError as err:  # huggingface_hub's own checks (size, checksum) on a damaged download
        first = (str(err).strip().splitlines() or [err.__class__.__name__])[0]
        raise HubError(f"{what}: {path or 'a file'} did not download whole ({first[:200]})", url=repo_id) from None


def _transport_error(what: str, repo_id: str, path: str | None, err: BaseException) -> HubError:
    """A failure of huggingface_hub's HTTP client: the Hub out of reach, or a broken answer
    (a redirect loop, a body that does not decode)."""
    from ckpttools.io.net import failure_detail

    detail, connection = failure_detail(err)
    if connection:
        return HubError(f"{what}: cannot reach the Hub ({detail})", url=repo_id, hint=_OFFLINE_HINT)
    return HubError(
        f"{what}: {path or 'the Hub'} {detail}",
        url=repo_id,
        hint="check HF_ENDPOINT: a proxy or mirror in between may be mangling the Hub's answers",
    )


_OFFLINE_HINT = "check the network and HF_ENDPOINT; to work from the local cache only, set HF_HUB_OFFLINE=1"

_net_lock = threading.Lock()
_nets: dict[float, Any] = {}


def _client() -> Any:
    """The process's network client for the Hub (one per read timeout: threads share its connections)."""
    constants = hub_constants()

    from ckpttools.io.net import NetClient

    read = float(constants.HF_HUB_DOWNLOAD_TIMEOUT)
    with _net_lock:
        if read not in _nets:
            _nets[read] = NetClient(timeout=_deadline(), connect=read, read_timeout=read, wording=_wording())
        return _nets[read]


def _within(seconds: float, fn: Any) -> Any:
    """``fn()``'s result, or None when it has not returned in ``seconds`` (it runs on in a daemon
    thread, which the process does not wait for); its exception is raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["ok"] = fn()
        except BaseException as e:  # handed to the caller below
            box["err"] = e

    t = threading.Thread(target=contextvars.copy_context().run, args=(run,), daemon=True)  # the caller's context
    t.start()
    t.join(seconds)
    if "err" in box:
        raise box["err"]
    return box.get("ok")


def _deadline(nbytes: int = 0) -> float:
    """The total deadline of one Hub request for ``nbytes``: ``CKPT_HUB_DEADLINE`` seconds, else
    three times ``HF_HUB_DOWNLOAD_TIMEOUT`` (which bounds each read; at least 30 s) plus a second
    per megabyte asked for, so that a trickling server cannot hold a command while a large range
    on a slow link still has its time."""
    v = env_seconds("CKPT_HUB_DEADLINE")
    if v is not None:
        return v
    return max(30.0, 3 * float(hub_constants().HF_HUB_DOWNLOAD_TIMEOUT)) + nbytes / 1e6


def _wording() -> Any:
    from ckpttools.io.net import Wording

    return Wording(
        error=HubError,
        connect="{where}: cannot reach the Hub ({detail})",
        connect_hint=_OFFLINE_HINT,
        timeout="{where}: the Hub did not answer in time",
        timeout_hint=_OFFLINE_HINT + " (or raise HF_HUB_DOWNLOAD_TIMEOUT, CKPT_HUB_DEADLINE)",
        failed="{where}: {what}: {detail}",
        failed_hint="check HF_ENDPOINT: a proxy or mirror in between may be mangling the Hub's answers",
    )


def _status_error(resp: Any, what: str, repo_id: str, revision: str | None, path: str | None = None) -> CkptError:
    """An error answer of the Hub (401, 403, 404 with its X-Error-Code, ...) as one ckpttools error."""
    status, code = resp.status, resp.headers.get("x-error-code", "")
    if status == 401:
        return _login(what, repo_id)
    if status == 403:
        return _denied(what, repo_id)
    if status == 404 and code == "RevisionNotFound":
        return CheckpointNotFoundError(
            f"{what}: the Hub has no revision {revision!r} in {repo_id}",
            path=repo_id,
            hint="check the branch, tag or commit after @",
        )
    if status == 404 and (code == "EntryNotFound" or (path is not None and code != "RepoNotFound")):
        return CheckpointNotFoundError(f"{what}: no file {path!r} in the repo", path=repo_id)
    if status == 404:
        return CheckpointNotFoundError(
            f"{what}: no such repo on the Hub", path=repo_id, hint="check the repo id (org/name)"
        )
    lines = resp.text.strip().splitlines()
    msg = resp.headers.get("x-error-message") or (lines[0][:160] if lines else "")
    return HubError(f"{what}: the Hub answered {status}{': ' + msg if msg else ''}", url=repo_id)


def _parse_listing(obj: Any, what: str, repo_id: str) -> tuple[str, dict[str, HubFile]]:
    """The commit and the files of the Hub's model info (``?blobs=true``), every field checked."""

    def bad(why: str) -> HubError:
        return HubError(
            f"{what}: the Hub's file list is malformed ({why})",
            url=repo_id,
            hint="check HF_ENDPOINT: it should be the Hub or a mirror that speaks its API",
        )

    if not isinstance(obj, dict):
        raise bad(f"a {type(obj).__name__}, not an object")
    sha, siblings = obj.get("sha"), obj.get("siblings")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise bad(f"the commit is {str(sha)[:60]!r}, not 40 hex digits")
    if not isinstance(siblings, list):
        raise bad("no list of files")
    files: dict[str, HubFile] = {}
    for s in siblings:
        name = s.get("rfilename") if isinstance(s, dict) else None
        if not isinstance(name, str) or not name:
            raise bad(f"an entry without a file name: {str(s)[:60]!r}")
        size, blob, lfs = s.get("size"), s.get("blobId"), s.get("lfs")
        if size is not None and (type(size) is not int or size < 0):
            raise bad(f"{name} has size {size!r}")
        if blob is not None and not isinstance(blob, str):
            raise bad(f"{name} has blob id {blob!r}")
        sha256 = lfs.get("sha256") if isinstance(lfs, dict) else None
        if lfs is not None and not (isinstance(sha256, str) and re.fullmatch(r"[0-9a-f]{64}", sha256)):
            raise bad(f"{name} has LFS entry {str(lfs)[:60]!r}")
        files[name] = HubFile(name, size, sha256, blob)
    return sha, files


def _cached_listing(obj: Any) -> dict[str, HubFile]:
    """A commit's file list as cached by :meth:`HubRepo._remember`; ValueError when damaged."""
    if not isinstance(obj, dict):
        raise ValueError("not an object")
    out = {}
    for p, v in obj.items():
        if not (isinstance(v, list) and len(v) == 3):
            raise ValueError(f"entry {p!r}")
        size, sha, blob = v
        if (size is not None and type(size) is not int) or not all(
            x is None or isinstance(x, str) for x in (sha, blob)
        ):
            raise ValueError(f"entry {p!r}")
        out[p] = HubFile(p, size, sha, blob)
    return out


def _login(what: str, repo_id: str) -> HubError:
    return HubError(
        f"{what}: the Hub wants a login for this repo (401): it is private or gated, or does not exist",
        url=repo_id,
        hint="log in with `hf auth login` or set HF_TOKEN; if the repo is gated, request access on its page",
    )


def _denied(what: str, repo_id: str) -> HubError:
    constants = hub_constants()

    return HubError(
        f"{what}: access denied (403): the repo is gated or private and this token may not read it",
        url=repo_id,
        hint=f"request access at {constants.ENDPOINT}/{repo_id}, then log in with a token that has it "
        "(`hf auth login` or HF_TOKEN)",
    )
