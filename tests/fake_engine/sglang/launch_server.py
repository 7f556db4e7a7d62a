"""A stand-in for ``python -m sglang.launch_server`` that a test points --engine-python at.

With ``CKPT_FAKE_ENGINE`` unset it answers /health and /server_info as SGLang 0.5.17 does, then
dies as a server killed for memory dies (SIGKILL) on the first request, after writing what such
a log ends with.

With ``CKPT_FAKE_ENGINE=MODE`` it serves as a 0.5.17 server started by ``ckpt verify --launch``
with several drafters does: the custom weight loader's swap route (``/update_weights_from_tensor``,
each rank's answer written where the request says), the target digest (the loader's ``target_digest`` op), ``/flush_cache``
and ``/generate`` (0.5.17's meta_info fields, accept length 2.0); fake_swap.py lists the modes.
"""

from __future__ import annotations

import base64
import json
import os
import pickletools
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import fake_swap
from fake_swap import at


def _request(b64: str) -> dict[str, Any]:
    """The swap request inside the payload, read from its pickle opcodes (nothing is unpickled)."""
    ints = [arg for op, arg, _ in pickletools.genops(base64.b64decode(b64)) if op.name.startswith("BININT")]
    return json.loads(bytes(ints).decode())


def _answer(req: dict[str, Any], a: dict[str, Any]) -> None:
    """One rank's answer written where the request says, as ckpt_swap.py writes it (whole, by rename)."""
    dest = req["answer"].replace("{rank}", str(a["rank"]))
    with open(dest + ".tmp", "w") as f:
        json.dump(a, f)
    os.replace(dest + ".tmp", dest)


def serve(port: int, swap_route: bool) -> None:
    state = {"swaps": 0, "armed": False}
    if "own-fails" in fake_swap.MODES and not swap_route:
        print("ValueError: the fake engine refuses to start this drafter's own server", flush=True)
        sys.exit(1)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                return self._send(200, b"")
            if self.path in ("/server_info", "/get_server_info"):
                info = {
                    "speculative_algorithm": "EAGLE3",
                    "speculative_num_steps": 3,
                    "speculative_eagle_topk": 1,
                    "speculative_num_draft_tokens": 4,
                    "version": "0.5.17",
                }
                return self._send(200, json.dumps(info).encode())
            self._send(404, b"{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/update_weights_from_tensor":
                return self._swap(body)
            if self.path == "/flush_cache":
                return self._send(200, b"Cache flushed.")
            if self.path == "/generate":
                if state["armed"]:
                    fake_swap.kill("[2026-12-01 10:00:05] Prefill batch, #new-seq: 1")
                meta = {  # 0.5.17's field set (tests/fake_servers.py meta_0517(8, 4, 4))
                    "completion_tokens": 8,
                    "prompt_tokens": 3,
                    "spec_verify_ct": 4,
                    "spec_num_correct_drafts": 4,
                    "spec_accepted_drafts": 4,
                    "spec_num_proposed_drafts": 12,
                    "spec_proposed_drafts": 12,
                    "spec_accept_rate": 4 / 12,
                    "spec_accept_length": 2.0,
                    "spec_accept_histogram": [0, 4, 0, 0],  # 4 steps of 1 correct draft each, as SGLang counts
                    "spec_correct_drafts_histogram": [0, 4, 0, 0],
                    "finish_reason": {"type": "length", "length": 8},
                }
                return self._send(200, json.dumps({"output_ids": [20] * 8, "meta_info": meta}).encode())
            self._send(404, b"{}")

        def _swap(self, body: dict[str, Any]) -> None:
            req = _request(body["serialized_named_tensors"][0])
            if req.get("op") == "target_digest":  # the custom loader's call for the target model
                _answer(req, fake_swap.target_answer(state["swaps"]))
                return self._send(200, b'{"success": true, "message": "Success"}')
            state["swaps"] += 1
            n = state["swaps"]
            if at("die-in-swap") == n:
                fake_swap.kill("[2026-12-01 10:00:04] Update weights from tensor begin")
            if at("stall-swap") == n:
                time.sleep(30.0)
            state["armed"] = at("die-in-measure") == n
            for a in fake_swap.answers(req["path"], n, custom_loader=True):
                _answer(req, a)
            self._send(200, b'{"success": true, "message": "Success"}')

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


def main() -> None:
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    print("[2026-12-01 10:00:00] server_args=ServerArgs(...)", flush=True)
    if fake_swap.MODES:
        return serve(port, "--custom-weight-loader" in args)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                return self._send(200, b"")
            if self.path in ("/server_info", "/get_server_info"):
                info = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1}
                return self._send(200, json.dumps(info).encode())
            self._send(404, b"{}")

        def do_POST(self) -> None:
            print("[2026-12-01 10:00:05] Prefill batch, #new-seq: 1", flush=True)
            print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 79.00 GiB", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


if __name__ == "__main__":
    main()
