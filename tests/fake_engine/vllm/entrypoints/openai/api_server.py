"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` (vLLM 0.32) that a test points
--engine-python at, with ``CKPT_FAKE_ENGINE=MODE`` set (fake_swap.py lists the modes).

It serves as a server started by ``ckpt verify --launch`` with several drafters does: /health,
/version, /v1/models, /metrics, /v1/completions (with ``metrics.speculative_decoding``, accept
length 2.0), the worker extension's ``/collective_rpc`` (``ckpt_swap``: each worker's answer as
ckpttools/engines/serverside/ckpt_swap.py gives it; ``ckpt_target_digest``) and
``/reset_prefix_cache``; one worker (TP 1).
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import fake_swap
from fake_swap import at

_METRICS = b"""vllm:spec_decode_num_drafts_total 4.0
vllm:spec_decode_num_draft_tokens_total 12.0
vllm:spec_decode_num_accepted_tokens_total 4.0
"""


def main() -> None:
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    swap_route = "--worker-extension-cls" in args
    print("INFO 12-01 10:00:00 [api_server.py] vLLM API server version 0.32.0", flush=True)
    if "own-fails" in fake_swap.MODES and not swap_route:
        print("ValueError: the fake engine refuses to start this drafter's own server", flush=True)
        sys.exit(1)
    state = {"swaps": 0, "armed": False}

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                return self._send(200, b"")
            if self.path == "/version":
                return self._send(200, b'{"version": "0.32.0"}')
            if self.path == "/v1/models":
                return self._send(200, b'{"data": [{"id": "t"}]}')
            if self.path == "/metrics":
                return self._send(200, _METRICS, "text/plain")
            self._send(404, b"{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/collective_rpc":
                return self._rpc(body)
            if self.path == "/reset_prefix_cache":
                return self._send(200, b"")
            if self.path == "/v1/completions":
                if state["armed"]:
                    fake_swap.kill("INFO 12-01 10:00:05 [engine.py] Added request cmpl-1")
                spec = {"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 4}
                out = {"choices": [{"text": "x"}], "usage": {"completion_tokens": 8}}
                return self._send(200, json.dumps({**out, "metrics": {"speculative_decoding": spec}}).encode())
            self._send(404, b"{}")

        def _rpc(self, body: dict[str, Any]) -> None:
            if body.get("method") == "ckpt_target_digest":
                one = fake_swap.target_answer(state["swaps"])
                return self._send(200, json.dumps({"results": [json.dumps(one)]}).encode())
            if body.get("method") == "ckpt_state":  # the hook's state read: no swap (the swaps are counted)
                one = {"rank": 0, "world": 1, "path": None, "digest": None, "source": "unknown", "generation": 0}
                return self._send(200, json.dumps({"results": [json.dumps(one)]}).encode())
            state["swaps"] += 1
            n = state["swaps"]
            if at("die-in-swap") == n:
                fake_swap.kill("INFO 12-01 10:00:04 [worker.py] ckpt_swap begins")
            if at("stall-swap") == n:
                time.sleep(30.0)
            state["armed"] = at("die-in-measure") == n
            answers = [json.dumps(a) for a in fake_swap.answers(body["args"][0], n, custom_loader=False)]
            self._send(200, json.dumps(answers if at("rpc-list") == n else {"results": answers}).encode())

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


if __name__ == "__main__":
    main()
