"""A small local server that speaks the Hugging Face Hub's HTTP protocol as
huggingface_hub's client uses it, so tests build real cache layouts without a network.

It serves ``/api/models/REPO[/revision/REV]`` (model info with sha and siblings) and
``HEAD``/``GET /REPO/resolve/REV/PATH`` with the headers the client reads
(X-Repo-Commit, ETag / X-Linked-Etag, X-Linked-Size, Content-Length) and byte ranges
(206). It counts the bytes it serves, and can answer 401/403 for chosen repos.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = ""
    status: int = 200  # 401 or 403 to play a gated/private repo

    def __post_init__(self) -> None:
        if not self.commit:
            h = hashlib.sha1()
            for k in sorted(self.files):
                h.update(k.encode() + hashlib.sha1(self.files[k]).digest())
            self.commit = h.hexdigest()

    @classmethod
    def from_dir(cls, root: Path, **kw: Any) -> Repo:
        files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
        return cls(files, **kw)


@dataclass
class LocalHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    bytes_served: int = 0
    requests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        hub = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _reply(
                self, code: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False
            ) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header(
                    "Content-Length",
                    str(len(body)) if not head else (headers or {}).get("X-Linked-Size", str(len(body))),
                )
                self.end_headers()
                if not head and body:
                    self.wfile.write(body)
                    hub.bytes_served += len(body)

            def _route(self, head: bool) -> None:
                hub.requests.append(f"{self.command} {self.path}")
                path = self.path.split("?")[0]
                m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)/?$", path)
                if m:
                    repo = hub.repos.get(m[1])
                    if repo is None or m[2] not in ("main", repo.commit):
                        return self._reply(404, b'{"error":"not found"}')
                    if repo.status != 200:
                        return self._reply(repo.status, b'{"error":"gated"}')
                    tree = [
                        {
                            "type": "file",
                            "path": f,
                            "size": len(d),
                            "oid": hashlib.sha1(d).hexdigest(),
                            **(
                                {"lfs": {"oid": hashlib.sha256(d).hexdigest(), "size": len(d), "pointerSize": 134}}
                                if f.endswith(".safetensors")
                                else {}
                            ),
                        }
                        for f, d in sorted(repo.files.items())
                    ]
                    return self._reply(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head)
                m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?/?$", path)
                if m:
                    repo = hub.repos.get(m[1])
                    if repo is None or (m[2] not in (None, "main", repo.commit)):
                        return self._reply(
                            404,
                            b'{"error":"Repository not found"}',
                            {"X-Error-Code": "RepoNotFound" if repo is None else "RevisionNotFound"},
                        )
                    if repo.status != 200:
                        return self._reply(repo.status, b'{"error":"gated"}')
                    info = {
                        "id": m[1],
                        "modelId": m[1],
                        "sha": repo.commit,
                        "private": False,
                        "siblings": [{"rfilename": f} for f in sorted(repo.files)],
                    }
                    return self._reply(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                if not m:
                    return self._reply(404, b"{}")
                repo = hub.repos.get(m[1])
                if repo is None:
                    return self._reply(404, b"", {"X-Error-Code": "RepoNotFound"}, head)
                if repo.status != 200:
                    return self._reply(repo.status, b"", {}, head)
                if m[2] not in ("main", repo.commit):
                    return self._reply(404, b"", {"X-Error-Code": "RevisionNotFound"}, head)
                data = repo.files.get(m[3])
                if data is None:
                    return self._reply(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": repo.commit}, head)
                etag = hashlib.sha256(data).hexdigest()
                hdr = {
                    "X-Repo-Commit": repo.commit,
                    "ETag": f'"{etag}"',
                    "Accept-Ranges": "bytes",
                    "X-Linked-Size": str(len(data)),
                }
                rng = self.headers.get("Range")
                if rng and not head:
                    r = re.match(r"bytes=(\d+)-(\d*)$", rng)
                    if r:
                        a = int(r[1])
                        b = min(int(r[2]) if r[2] else len(data) - 1, len(data) - 1)
                        hdr["Content-Range"] = f"bytes {a}-{b}/{len(data)}"
                        return self._reply(206, data[a : b + 1], hdr)
                return self._reply(200, data, hdr, head)

            def do_HEAD(self) -> None:
                self._route(head=True)

            def do_GET(self) -> None:
                self._route(head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
