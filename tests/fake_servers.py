"""Local HTTP servers that answer as SGLang releases do, for verify's unit tests.

The 0.5.17 answers are the recorded responses in shared/data/sglang-0.5.17-responses
(their meta_info field names and values), replayed per request.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class FakeSGLang:
    """A real HTTP server on 127.0.0.1. ``meta_for(i, body)`` gives request i's meta_info."""

    def __init__(
        self,
        meta_for: Callable[[int, dict], dict],
        *,
        spec: bool = True,
        old_info_path: bool = False,
        delay: float = 0.0,
        status: int = 200,
        raw: bytes | None = None,
        avg_accept: float | None = None,
    ):
        self.meta_for, self.spec, self.old_info_path = meta_for, spec, old_info_path
        self.delay, self.status, self.raw, self.avg_accept = delay, status, raw, avg_accept
        self.requests: list[dict] = []
        self.flushed = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                info_path = "/get_server_info" if outer.old_info_path else "/server_info"
                if self.path == info_path:
                    info = {
                        "model_path": "/models/target",
                        "skip_tokenizer_init": True,
                        "speculative_algorithm": "EAGLE3" if outer.spec else None,
                        "speculative_num_steps": 3,
                        "speculative_eagle_topk": 1,
                        "speculative_num_draft_tokens": 4,
                        "speculative_draft_model_path": "/models/drafter",
                        "internal_states": [{"avg_spec_accept_length": outer.avg_accept}],
                    }
                    self._send(200, json.dumps(info).encode())
                elif self.path == "/health":
                    self._send(200, b"")
                else:
                    self._send(404, b'{"detail":"Not Found"}')

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path == "/flush_cache":
                    outer.flushed += 1
                    self._send(200, b"Cache flushed.")
                    return
                if self.path != "/generate":
                    self._send(404, b"{}")
                    return
                i = len(outer.requests)
                outer.requests.append(body)
                if outer.delay:
                    time.sleep(outer.delay)
                if outer.raw is not None:
                    self._send(outer.status, outer.raw)
                    return
                if outer.status != 200:
                    self._send(outer.status, b'{"error": "internal"}')
                    return
                meta = outer.meta_for(i, body)
                if meta is None:  # this request fails
                    self._send(500, b'{"error": "request failed"}')
                    return
                self._send(
                    200, json.dumps({"output_ids": [20] * meta.get("completion_tokens", 0), "meta_info": meta}).encode()
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeSGLang:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def meta_0517(completion: int, verify: int, correct: int, steps: int = 3) -> dict:
    """meta_info with the 0.5.17 field set (as in generate-*.json), for given counts."""
    hist = [0] * (steps + 1)
    return {
        "completion_tokens": completion,
        "prompt_tokens": 8,
        "spec_verify_ct": verify,
        "spec_num_correct_drafts": correct,
        "spec_accepted_drafts": correct,
        "spec_num_proposed_drafts": verify * steps,
        "spec_proposed_drafts": verify * steps,
        "spec_accept_rate": correct / (verify * steps),
        "spec_accept_length": completion / verify,
        "spec_accept_histogram": hist,
        "spec_correct_drafts_histogram": hist,
        "finish_reason": {"type": "length", "length": completion},
    }


class MisbehavingServer:
    """One local server, many misbehaviours: the first path segment picks one.

    ``http://127.0.0.1:PORT/MODE`` is a server base URL whose answers are broken the
    way MODE says (SGLang modes start with ``sg-``, vLLM ones with ``vl-``).
    """

    GOOD_META = {
        "completion_tokens": 8,
        "spec_verify_ct": 4,
        "spec_num_correct_drafts": 4,
        "spec_accept_histogram": [1, 1, 1, 1],
    }

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, body: bytes | str) -> None:
                b = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

            def _mode(self) -> tuple[str, str]:
                parts = self.path.split("/", 2)
                return parts[1], "/" + (parts[2] if len(parts) > 2 else "")

            def do_GET(self) -> None:
                mode, path = self._mode()
                if mode.startswith("vl-"):
                    return outer.vllm_get(self, mode, path)
                if path in ("/server_info", "/get_server_info"):
                    info: Any = {
                        "speculative_algorithm": "EAGLE3",
                        "speculative_num_steps": 3,
                        "speculative_eagle_topk": 1,
                        "speculative_num_draft_tokens": 4,
                    }
                    if mode == "sg-specoff":
                        info["speculative_algorithm"] = None
                    elif mode == "sg-info-list":
                        info = []
                    elif mode == "sg-info-empty":
                        info = {}
                    elif mode == "sg-info-steps-string":
                        info["speculative_num_steps"] = "three"
                    return self._send(200, json.dumps(info))
                self._send(404, "{}")

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                mode, path = self._mode()
                if mode.startswith("vl-"):
                    return outer.vllm_post(self, mode, path)
                meta: Any = dict(outer.GOOD_META)
                if mode == "sg-500":
                    return self._send(500, '{"error": "boom"}')
                if mode == "sg-timeout":
                    time.sleep(2.0)
                if mode == "sg-close":
                    self.send_response(200)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"meta_info": {')
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if mode == "sg-not-json":
                    return self._send(200, "<html>")
                if mode == "sg-empty-list":
                    return self._send(200, "[]")
                if mode == "sg-meta-string":
                    return self._send(200, '{"meta_info": "x"}')
                if mode == "sg-nospec-fields":
                    meta = {"completion_tokens": 8}
                elif mode == "sg-types":
                    meta["completion_tokens"] = "eight"
                elif mode == "sg-1001":
                    meta["spec_num_correct_drafts"] = 4000
                elif mode == "sg-negative":
                    meta["spec_verify_ct"] = -4
                elif mode == "sg-hist-bad":
                    meta["spec_accept_histogram"] = "x"
                elif mode == "sg-bool":
                    meta["spec_verify_ct"] = True
                self._send(200, json.dumps({"output_ids": [1] * 8, "meta_info": meta}))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def vllm_get(self, h: Any, mode: str, path: str) -> None:
        if path == "/v1/models":
            return h._send(200, '{"data": []}' if mode == "vl-no-model" else '{"data": [{"id": "target"}]}')
        if path == "/metrics":
            c = self.counters.setdefault(mode, 0.0)
            if mode == "vl-static":
                c = 0.0
            elif mode == "vl-decreasing":
                c = 1000.0 - c
            elif mode == "vl-negative":
                c = -5.0
            lines = [
                f"vllm:spec_decode_num_drafts_total {c}",
                f"vllm:spec_decode_num_draft_tokens_total {3 * c}",
                f"vllm:spec_decode_num_accepted_tokens_total {2 * c if mode != 'vl-more-accepted' else 9 * c}",
            ]
            body = "\n".join(lines) + "\n"
            h.send_response(200)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body.encode())
            return None
        return h._send(404, "{}")

    def vllm_post(self, h: Any, mode: str, path: str) -> None:
        self.counters[mode] = self.counters.get(mode, 0.0) + 4
        usage: Any = {"completion_tokens": 12}
        if mode == "vl-usage-string":
            usage = {"completion_tokens": "twelve"}
        elif mode == "vl-usage-list":
            usage = [12]
        h._send(200, json.dumps({"choices": [{"text": "x"}], "usage": usage}))

    def __enter__(self) -> MisbehavingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
