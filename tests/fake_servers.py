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


#: how often a test server's loop looks for ``shutdown()``: socketserver's default, 0.5 s, made each
#: server's end wait out the rest of it, about 0.5 s after its last request (1.0 s of a 1.9 s test
#: with two servers, test_verify.py::test_recorded_0517_responses_give_exactly_4_and_1)
SHUTDOWN_POLL = 0.02


class QuietHTTPServer(ThreadingHTTPServer):
    """A test server that says a handler's error in one line, with no traceback.

    socketserver prints a traceback for every handler error, and the tests' clients hang up on
    purpose (deadlines, body caps): Python 3.11's traceback module parses each frame's source
    line with ``ast.parse`` to place its carets, in the handler's thread. CPython 3.11 keeps the
    AST converter's recursion depth in the interpreter's state, shared by its threads (CPython
    issue gh-106905 and its follow-ups), so a test that ran ``ast.parse`` meanwhile failed with
    "SystemError: AST constructor recursion depth mismatch" (seen on 3.11.7: test_engine_branches
    in a --quick run, 2026-12-05, beside a fake server's BrokenPipeError traceback).
    """

    daemon_threads = True

    def serve_forever(self, poll_interval: float = SHUTDOWN_POLL) -> None:
        """socketserver's loop, polling for ``shutdown()`` every SHUTDOWN_POLL seconds."""
        super().serve_forever(poll_interval)

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        e = sys.exc_info()[1]
        if isinstance(e, (BrokenPipeError, ConnectionResetError)):
            return  # the client hung up: what the test did on purpose
        tb = e.__traceback__ if e is not None else None
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
        sys.stderr.write(f"test server {self.server_address}: {type(e).__name__}: {e}{where}\n")


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
        version: str | None = None,
    ):
        self.meta_for, self.spec, self.old_info_path = meta_for, spec, old_info_path
        self.delay, self.status, self.raw, self.avg_accept = delay, status, raw, avg_accept
        self.version = version  # what /server_info says (sglang/srt/entrypoints/http_server.py:800)
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
                    if outer.version is not None:
                        info["version"] = outer.version
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

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), H)
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
    if verify:  # as SGLang counts them: each step once, in the bin of its correct drafts (spread evenly here)
        q, rem = divmod(correct, verify)
        hist[min(q, steps)] += verify - rem
        if rem:
            hist[min(q + 1, steps)] += rem
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


#: the transport misbehaviours a mode name can end with (``sg-trickle``, ``sg-info-gzip``, ...)
HOSTILE = ("trickle", "endless", "redirect-loop", "gzip", "html", "truncated", "reset-once")


def hostile_reply(h: Any, kind: str, state: dict[str, int] | None = None, key: str = "") -> bool:
    """Answer the request the hostile way ``kind`` names; False when ``kind`` is none of them.

    trickle: one byte per 0.5 s, for two minutes; endless: no Content-Length, bytes until the
    client hangs up; redirect-loop: 302 to itself; gzip: Content-Encoding gzip over garbage;
    html: a 200 login page; truncated: a Content-Length of 5000 and 40 bytes, then close;
    reset-once: the first request of this key is answered 503 (a retry then succeeds).
    """
    try:
        if kind == "trickle":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "1000000")
            h.end_headers()
            for _ in range(240):
                h.wfile.write(b" ")
                h.wfile.flush()
                time.sleep(0.5)
        elif kind == "endless":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(b'{"meta_info": [')
            chunk = b"1," * (32 << 10)
            for _ in range(1 << 16):  # 4 GiB at most
                h.wfile.write(chunk)
        elif kind == "redirect-loop":
            h.send_response(302)
            h.send_header("Location", h.path)
            h.send_header("Content-Length", "0")
            h.end_headers()
        elif kind == "gzip":
            body = b"\x1f\x8b\x08\x00 this is not gzip at all" * 4
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Encoding", "gzip")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        elif kind == "html":
            body = b"<!DOCTYPE html><html><body>Please log in to the proxy</body></html>"
            h.send_response(200)
            h.send_header("Content-Type", "text/html")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        elif kind == "truncated":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "5000")
            h.end_headers()
            h.wfile.write(b'{"meta_info": {"completion_tokens": 8, "sp')
            h.wfile.flush()
            h.close_connection = True
        elif kind == "reset-once" and state is not None and not state.get(key):
            state[key] = 1
            h.send_response(503)
            h.send_header("Content-Length", "0")
            h.end_headers()
        else:
            return False
    except (BrokenPipeError, ConnectionResetError):
        h.close_connection = True
    return True


def _hostile_kind(mode: str, where: str) -> str | None:
    """The hostile kind of ``mode`` for a request to ``where`` (``""``: the main request)."""
    prefix = f"{mode.split('-', 1)[0]}-{where + '-' if where else ''}"
    rest = mode.removeprefix(prefix) if mode.startswith(prefix) else None
    return rest if rest in HOSTILE else None


class MisbehavingServer:
    """One local server, many misbehaviours: the first path segment picks one.

    ``http://127.0.0.1:PORT/MODE`` is a server base URL whose answers are broken the
    way MODE says (SGLang modes start with ``sg-``, vLLM ones with ``vl-``).
    """

    GOOD_META = {
        "completion_tokens": 8,
        "spec_verify_ct": 4,
        "spec_num_correct_drafts": 4,
        "spec_accept_histogram": [1, 2, 1, 0],  # 4 steps, 4 correct drafts: as SGLang counts them
    }

    def __init__(self) -> None:
        self.counters: dict[str, float] = {}
        self.seen: dict[str, int] = {}
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
                if _hostile_kind(mode, "") == "redirect-loop" and path in ("/generate", "/v1/completions"):
                    hostile_reply(self, "redirect-loop")  # a redirected POST comes back as a GET
                    return None
                if mode.startswith("vl-"):
                    return outer.vllm_get(self, mode, path)
                kind = _hostile_kind(mode, "info")
                if (
                    path in ("/server_info", "/get_server_info")
                    and kind
                    and hostile_reply(self, kind, outer.seen, mode)
                ):
                    return None
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
                    elif mode == "sg-info-steps-huge":  # absurd draft steps (verify once sized a list by them)
                        info["speculative_num_steps"] = 10**15
                    elif mode.startswith("sg-nosteps-"):  # no steps to bound the histogram or figures by
                        del info["speculative_num_steps"]
                    return self._send(200, json.dumps(info))
                self._send(404, "{}")

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                mode, path = self._mode()
                if mode.startswith("vl-"):
                    return outer.vllm_post(self, mode, path)
                meta: Any = dict(outer.GOOD_META)
                kind = _hostile_kind(mode, "")
                if kind and kind != "reset-once" and hostile_reply(self, kind):
                    return None
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
                elif mode == "sg-steps-gt-tokens":  # 9 verify steps for 8 tokens (accept length 1.44: in range)
                    meta["spec_verify_ct"] = 9
                elif mode == "sg-hist-long":  # 7 bins for 3 draft steps
                    meta["spec_accept_histogram"] = [1, 2, 1, 0, 0, 0, 0]
                elif mode == "sg-acc-gt-prop":
                    meta["spec_num_proposed_drafts"] = 2
                elif mode == "sg-nosteps-hist-huge":  # 300,000 bins (summing them per position was quadratic)
                    meta["spec_accept_histogram"] = [1] * 300_000
                elif mode == "sg-hist-contradicts":  # bins for 1,000,100 steps beside spec_verify_ct 4
                    meta["spec_accept_histogram"] = [100, 0, 0, 1_000_000]
                elif mode == "sg-nosteps-acc-huge":  # 1001 tokens per step, and no steps named to refuse it by
                    meta.update(completion_tokens=10, spec_verify_ct=1, spec_num_correct_drafts=1000)
                    meta["spec_num_proposed_drafts"] = 1000
                    meta.pop("spec_accept_histogram", None)
                elif mode == "sg-counts-huge":  # counts past 2**53: no float counts them by one
                    meta.update(completion_tokens=2**60, spec_verify_ct=2**59, spec_num_correct_drafts=2**59)
                elif mode == "sg-zero-tokens":  # 4 verify steps that made no token
                    meta["completion_tokens"] = 0
                elif mode == "sg-nan":  # JSON has no infinity: 1e999 is refused as malformed
                    body = json.dumps({"output_ids": [1] * 8, "meta_info": meta}).replace(
                        '"spec_verify_ct": 4', '"spec_verify_ct": 1e999'
                    )
                    return self._send(200, body)
                self._send(200, json.dumps({"output_ids": [1] * 8, "meta_info": meta}))

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def vllm_get(self, h: Any, mode: str, path: str) -> None:
        if path == "/version" and mode.startswith("vl-version-"):  # vllm/entrypoints/serve/instrumentator/basic.py:53
            return h._send(200, json.dumps({"version": mode.removeprefix("vl-version-")}))
        for where, p in (("models", "/v1/models"), ("metrics", "/metrics")):
            kind = _hostile_kind(mode, where)
            if path == p and kind and hostile_reply(h, kind, self.seen, mode):
                return None
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
            if mode == "vl-metrics-pos-over":  # 10 accepted at position 0 per draft: no draft accepts twice there
                lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} {10 * c}')
            elif mode == "vl-metrics-pos-huge":  # a draft position no chain reaches
                lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{10**9}"}} {c}')
            elif mode == "vl-metrics-counter-huge":  # a counter past 2**53
                lines[0] = f"vllm:spec_decode_num_drafts_total {1e300 + c}"
            body = "\n".join(lines) + "\n"
            h.send_response(200)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body.encode())
            return None
        return h._send(404, "{}")

    def vllm_post(self, h: Any, mode: str, path: str) -> None:
        kind = _hostile_kind(mode, "")
        if kind and kind != "reset-once" and hostile_reply(h, kind):
            return None
        self.counters[mode] = self.counters.get(mode, 0.0) + 4
        usage: Any = {"completion_tokens": 12}
        spec = {"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 8}
        if path == "/collective_rpc" and mode == "vl-rpc-deep":  # a rank's answer nested 100,000 deep
            return h._send(200, json.dumps({"results": ["[" * 100_000 + "]" * 100_000]}))
        if mode in ("vl-steps-gt-tokens", "vl-acc-gt-prop", "vl-per-request-ok", "vl-hist-huge", "vl-acc-huge"):
            if mode == "vl-acc-huge":  # 1001 tokens per step, and vLLM names no steps to refuse it by
                usage["completion_tokens"] = 2000
                spec.update(num_spec_steps=1, num_draft_tokens=1000, num_accepted_draft_tokens=1000)
            elif mode == "vl-steps-gt-tokens":
                spec["num_spec_steps"] = 20
            elif mode == "vl-acc-gt-prop":
                spec["num_accepted_draft_tokens"] = 13
            elif mode == "vl-hist-huge":  # 300,000 bins, and vLLM names no steps to bound them by
                spec["acceptance_histogram"] = [1] * 300_000  # type: ignore[assignment]
            body = {"choices": [{"text": "x"}], "usage": usage, "metrics": {"speculative_decoding": spec}}
            return h._send(200, json.dumps(body))
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
