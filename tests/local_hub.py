"""A small local server that speaks the Hugging Face Hub's HTTP protocol as
huggingface_hub's client uses it, so tests exercise the real client without a network.

Endpoints (each as huggingface_hub 2.x calls it; checked by tests/test_local_hub.py
against hf_hub_download, snapshot_download, get_safetensors_metadata and HfFileSystem):

- ``GET /api/models/REPO[/revision/REV][?blobs=true]``: model info with ``sha`` and
  ``siblings`` (with ``blobs``: size, blobId, and ``lfs.sha256`` for LFS files);
- ``GET /api/models/REPO/tree/REV[/PATH]`` and ``POST /api/models/REPO/paths-info/REV``;
- ``HEAD``/``GET /REPO/resolve/REV/PATH``: small files answered directly; LFS files
  (``*.safetensors``) redirected (302) to ``/cdn/...`` on another origin (``localhost``
  instead of ``127.0.0.1``), as the Hub redirects to its CDN,
  with ``X-Repo-Commit``, ``X-Linked-Etag`` and ``X-Linked-Size`` on the redirect;
- ``Range: bytes=a-b`` answered with 206 and ``Content-Range``.

Errors as the Hub sends them: 404 with ``X-Error-Code`` RepoNotFound, RevisionNotFound or
EntryNotFound; 401 for a private repo without the right token; 403 with ``X-Error-Code:
GatedRepo`` for a gated one. ``delay`` makes every answer late (timeouts). The server
counts the bytes of every body it sends, and the requests.

A file may be bytes, or a Path served by positioned reads (the sparse 1 TB target). For a
Path, the advertised sha256 and blob id are stand-ins derived from the file's header and
size: hashing 64 sparse files of 16 GB would take minutes and tells the client nothing more.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from tests.fake_servers import QuietHTTPServer, hostile_reply


#: hostile modes of a repo: ``listing-*`` break the file list (/api/models), ``range-*`` every
#: range read of an LFS file, ``rows-*`` only range reads past the safetensors header (tensor
#: rows), ``small-*`` the download of config.json and the other small files, ``head-*`` their
#: metadata request (HEAD) and their download alike
TRANSPORT = ("trickle", "endless", "redirect-loop", "gzip", "html", "truncated")
MODES = (
    *(f"listing-{k}" for k in (*TRANSPORT, "malformed", "bad-sha", "bad-size", "not-object", "reset-once")),
    *(f"range-{k}" for k in (*TRANSPORT, "wrong-offset", "bad-header", "short", "ignored", "reset-once")),
    *(f"rows-{k}" for k in ("wrong-offset", "short", "bad-header", "trickle")),
    *(f"small-{k}" for k in ("trickle", "endless", "html", "truncated", "redirect-loop", "gzip")),
    "head-redirect-loop",
)


@dataclass
class Repo:
    files: dict[str, bytes | Path]
    commit: str = ""
    refs: tuple[str, ...] = ("main",)
    status: int = 200  # 401 (private) or 403 (gated) for every request
    token: str | None = None  # when set, a request without "Bearer <token>" gets 401
    missing: frozenset[str] = frozenset()  # listed by the API but answered 404 (deleted since)
    #: a hostile way to answer (see MODES); "" answers as the Hub does
    mode: str = ""
    _meta: dict[str, tuple[int, str, str]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for name in self.files:
            self._meta[name] = self._describe(name)
        if not self.commit:
            h = hashlib.sha1()
            for k in sorted(self.files):
                h.update(k.encode() + self._meta[k][1].encode())
            self.commit = h.hexdigest()

    def _describe(self, name: str) -> tuple[int, str, str]:
        """(size, sha256, git blob id) of a file."""
        d = self.files[name]
        if isinstance(d, bytes):
            blob = hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest()
            return len(d), hashlib.sha256(d).hexdigest(), blob
        size = d.stat().st_size
        with open(d, "rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else 0
            head += f.read(min(n, 200 << 20))
        stand_in = hashlib.sha256(head + str(size).encode()).hexdigest()
        return size, stand_in, hashlib.sha1(stand_in.encode()).hexdigest()

    def size(self, name: str) -> int:
        return self._meta[name][0]

    def sha256(self, name: str) -> str:
        return self._meta[name][1]

    def blob_id(self, name: str) -> str:
        return self._meta[name][2]

    def read(self, name: str, a: int, b: int) -> bytes:
        """Bytes [a, b] inclusive."""
        d = self.files[name]
        if isinstance(d, bytes):
            return d[a : b + 1]
        fd = os.open(d, os.O_RDONLY)
        try:
            return os.pread(fd, b + 1 - a, a)
        finally:
            os.close(fd)

    def is_lfs(self, name: str) -> bool:
        return name.endswith(".safetensors") or name.endswith(".bin")

    def entry(self, name: str, blobs: bool = True) -> dict[str, Any]:
        e: dict[str, Any] = {"type": "file", "path": name, "size": self.size(name), "oid": self.blob_id(name)}
        if self.is_lfs(name):
            e["lfs"] = {"oid": self.sha256(name), "size": self.size(name), "pointerSize": 134}
        return e

    @classmethod
    def from_dir(cls, root: Path, *, by_path: bool = False, **kw: Any) -> Repo:
        files: dict[str, bytes | Path] = {
            str(p.relative_to(root)): (p if by_path else p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()
        }
        return cls(files, **kw)


@dataclass
class LocalHub:
    repos: dict[str, Repo | list[Repo]] = field(default_factory=dict)
    delay: float = 0.0
    max_whole: int = 256 << 20  # a whole-file GET above this is refused (416): a client bug, in tests
    bytes_served: int = 0
    requests: list[str] = field(default_factory=list)
    #: every file body sent: (repo, path, first byte, length)
    reads: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: per-key state of the hostile modes (reset-once)
    seen: dict[str, int] = field(default_factory=dict)

    def reset_counts(self) -> None:
        self.bytes_served = 0
        self.requests.clear()
        self.reads.clear()

    def read_bytes(self, repo: str, path: str | None = None, *, from_byte: int = 0) -> int:
        """Bytes sent of a repo's files (one file's), counting reads that start at ``from_byte`` or later."""
        return sum(n for r, p, a, n in self.reads if r == repo and (path is None or p == path) and a >= from_byte)

    def _version(self, repo_id: str, rev: str | None) -> tuple[Repo | None, Repo | None]:
        """(any version of the repo, the version ``rev`` names)."""
        got = self.repos.get(repo_id)
        versions = got if isinstance(got, list) else [got] if got is not None else []
        if not versions:
            return None, None
        rev = rev or "main"
        for v in versions:
            if rev == v.commit or rev in v.refs:
                return versions[0], v
        return versions[0], None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.httpd = QuietHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # another origin for the CDN, as the Hub redirects LFS files off its host
        self.cdn_url = f"http://localhost:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(hub: LocalHub) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def _reply(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            head = self.command == "HEAD"
            self.send_response(code)
            hdrs = dict(headers or {})
            for k, v in hdrs.items():
                self.send_header(k, v)
            if "Content-Length" not in hdrs:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head and body:
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # a client that read what it needed
                    pass
                with hub._lock:
                    hub.bytes_served += len(body)

        def _json(self, obj: Any, code: int = 200) -> None:
            self._reply(code, json.dumps(obj).encode(), {"Content-Type": "application/json"})

        def _not_found(self, code: str, commit: str | None = None) -> None:
            hdr = {"X-Error-Code": code, "Content-Type": "application/json"}
            if commit:
                hdr["X-Repo-Commit"] = commit
            self._reply(404, json.dumps({"error": code}).encode(), hdr)

        def _allowed(self, repo: Repo) -> bool:
            if repo.token is not None and self.headers.get("Authorization") != f"Bearer {repo.token}":
                msg = b'{"error":"Invalid username or password."}'
                self._reply(401, msg, {"X-Error-Message": "Invalid username or password."})
                return False
            if repo.status == 401:
                self._reply(401, b'{"error":"Invalid username or password."}')
                return False
            if repo.status == 403:
                hdr = {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to model is restricted."}
                self._reply(403, b'{"error":"Access to model is restricted."}', hdr)
                return False
            return True

        def _route(self) -> None:
            with hub._lock:
                hub.requests.append(f"{self.command} {self.path}")
            if hub.delay:
                time.sleep(hub.delay)
            path, _, query = self.path.partition("?")
            path = unquote(path)
            for pattern, fn in (
                (r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", self._tree),
                (r"^/api/models/([^/]+/[^/]+)/paths-info/([^/]+)$", self._paths_info),
                (r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+?))?/?$", self._info),
                (r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", self._resolve),
                (r"^/cdn/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)$", self._cdn),
            ):
                m = re.match(pattern, path)
                if m:
                    return fn(m, parse_qs(query))
            self._reply(404, b"{}")

        def _repo(self, repo_id: str, rev: str | None) -> Repo | None:
            any_version, v = hub._version(repo_id, rev)
            if any_version is None:
                self._not_found("RepoNotFound")
                return None
            if not self._allowed(any_version):
                return None
            if v is None:
                self._not_found("RevisionNotFound")
                return None
            return v

        def _info(self, m: re.Match, q: dict[str, list[str]]) -> None:
            repo = self._repo(m[1], m[2])
            if repo is None:
                return
            if repo.mode.startswith("listing-") and self._listing_hostile(repo, repo.mode.removeprefix("listing-")):
                return
            blobs = q.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for f in sorted(repo.files):
                s: dict[str, Any] = {"rfilename": f}
                if blobs:
                    s |= {"size": repo.size(f), "blobId": repo.blob_id(f)}
                    if repo.is_lfs(f):
                        s["lfs"] = {"sha256": repo.sha256(f), "size": repo.size(f), "pointerSize": 134}
                siblings.append(s)
            self._json({"id": m[1], "modelId": m[1], "sha": repo.commit, "private": False, "siblings": siblings})

        def _listing_hostile(self, repo: Repo, kind: str) -> bool:
            if kind == "malformed":
                self._json({"id": "x", "sha": repo.commit, "siblings": "model.safetensors"})
            elif kind == "bad-sha":
                self._json({"id": "x", "sha": "main; rm -rf /", "siblings": []})
            elif kind == "bad-size":
                self._json({"sha": repo.commit, "siblings": [{"rfilename": "model.safetensors", "size": "big"}]})
            elif kind == "not-object":
                self._json([1, 2, 3])
            else:
                return hostile_reply(self, kind, hub.seen, f"listing {repo.commit}")
            return True

        def _tree(self, m: re.Match, q: dict[str, list[str]]) -> None:
            repo = self._repo(m[1], m[2])
            if repo is None:
                return
            prefix = (m[3] or "").strip("/")
            recursive = q.get("recursive", ["false"])[0].lower() == "true"
            out, dirs = [], set()
            for f in sorted(repo.files):
                if prefix and not f.startswith(prefix + "/"):
                    continue
                rest = f[len(prefix) + 1 :] if prefix else f
                if "/" in rest and not recursive:
                    d = (prefix + "/" if prefix else "") + rest.split("/")[0]
                    if d not in dirs:
                        dirs.add(d)
                        out.append({"type": "directory", "path": d, "size": 0, "oid": "0" * 40})
                    continue
                out.append(repo.entry(f))
            self._json(out)

        def _paths_info(self, m: re.Match, q: dict[str, list[str]]) -> None:
            repo = self._repo(m[1], m[2])
            if repo is None:
                return
            n = int(self.headers.get("Content-Length") or 0)
            paths = parse_qs(self.rfile.read(n).decode()).get("paths", []) if n else []  # a form, as the client posts
            out = []
            for p in paths:
                p = p.strip("/")
                if p in repo.files:
                    out.append(repo.entry(p))
                elif any(f.startswith(p + "/") for f in repo.files):
                    out.append({"type": "directory", "path": p, "size": 0, "oid": "0" * 40})
            self._json(out)

        def _resolve(self, m: re.Match, q: dict[str, list[str]]) -> None:
            repo = self._repo(m[1], m[2])
            if repo is None:
                return
            name = m[3]
            if name not in repo.files or name in repo.missing:
                return self._not_found("EntryNotFound", repo.commit)
            hdr = {
                "X-Repo-Commit": repo.commit,
                "ETag": f'"{repo.blob_id(name)}"',
                "Accept-Ranges": "bytes",
            }
            if repo.is_lfs(name):
                hdr |= {
                    "X-Linked-Etag": f'"{repo.sha256(name)}"',
                    "X-Linked-Size": str(repo.size(name)),
                    "Location": f"{hub.cdn_url}/cdn/{m[1]}/{repo.commit}/{name}",
                }
                return self._reply(302, b"", hdr)
            self._send_file(repo, name, hdr)

        def _cdn(self, m: re.Match, q: dict[str, list[str]]) -> None:
            any_version, _ = hub._version(m[1], None)
            got = hub.repos.get(m[1])
            versions = got if isinstance(got, list) else [got] if got is not None else []
            repo = next((v for v in versions if v.commit == m[2]), None)
            if any_version is None or repo is None or m[3] not in repo.files:
                return self._reply(404, b"")
            self._send_file(repo, m[3], {"ETag": f'"{repo.sha256(m[3])}"', "Accept-Ranges": "bytes"})

        def _send_file(self, repo: Repo, name: str, hdr: dict[str, str]) -> None:
            repo_id = re.sub(r"^/(?:cdn/)?([^/]+/[^/]+)/.*$", r"\1", self.path)
            size = repo.size(name)
            rng = self.headers.get("Range")
            r = re.match(r"bytes=(\d+)-(\d*)$", rng or "")
            if r and repo.mode and repo.is_lfs(name) and self.command == "GET" and self._range_hostile(repo, name, r):
                return None
            if repo.mode == "head-redirect-loop" and not repo.is_lfs(name):  # metadata and download alike
                return hostile_reply(self, "redirect-loop") and None
            if repo.mode.startswith("small-") and not repo.is_lfs(name) and self.command == "GET":
                if hostile_reply(self, repo.mode.removeprefix("small-"), hub.seen, f"small {self.path}"):
                    return None
            if r and int(r[1]) < size:
                a = int(r[1])
                b = min(int(r[2]) if r[2] else size - 1, size - 1)
                hdr = {**hdr, "Content-Range": f"bytes {a}-{b}/{size}"}
                body = repo.read(name, a, b) if self.command == "GET" else b""
                if body:
                    with hub._lock:
                        hub.reads.append((repo_id, name, a, len(body)))
                return self._reply(206, body, {**hdr, "Content-Length": str(b + 1 - a)})
            if self.command == "HEAD":
                return self._reply(200, b"", {**hdr, "Content-Length": str(size)})
            if size > hub.max_whole:  # never stream a huge sparse file whole: a client asking for it is a bug
                return self._reply(416, b"", hdr)
            with hub._lock:
                hub.reads.append((repo_id, name, 0, size))
            self._reply(200, repo.read(name, 0, size - 1), hdr)

        def _range_hostile(self, repo: Repo, name: str, r: re.Match) -> bool:
            """Answer a range read the hostile way the repo's mode says (False: answer it right)."""
            group, _, kind = repo.mode.partition("-")
            size = repo.size(name)
            a = int(r[1])
            b = min(int(r[2]) if r[2] else size - 1, size - 1)
            if group == "rows":
                head = repo.read(name, 0, 7)
                if a < 8 + int.from_bytes(head, "little"):
                    return False
            elif group != "range":
                return False
            if kind == "wrong-offset":  # an honest Content-Range for the wrong bytes
                a2, b2 = min(a + 16, size - 1), min(b + 16, size - 1)
                body = repo.read(name, a2, b2)
                return self._reply(206, body, {"Content-Range": f"bytes {a2}-{b2}/{size}"}) or True
            if kind == "bad-header":
                return self._reply(206, repo.read(name, a, b), {"Content-Range": f"bytes */{size}"}) or True
            if kind == "short":  # the right Content-Range, half the bytes
                body = repo.read(name, a, b)[: max(1, (b + 1 - a) // 2)]
                return self._reply(206, body, {"Content-Range": f"bytes {a}-{b}/{size}"}) or True
            if kind == "ignored":  # 200 with the whole file: allowed, read as far as needed
                return self._reply(200, repo.read(name, 0, size - 1)) or True
            return hostile_reply(self, kind, hub.seen, f"range {self.path}")

        def do_HEAD(self) -> None:
            self._route()

        def do_GET(self) -> None:
            self._route()

        def do_POST(self) -> None:
            self._route()

    return H
