"""A stand-in for ``python -m sglang.launch_server`` that a test points --engine-python at:
it answers /health and /server_info as SGLang 0.5.17 does, then dies as a server killed for
memory dies (SIGKILL) on the first /generate, after writing what such a log ends with."""

from __future__ import annotations

import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    print("[2026-12-01 10:00:00] server_args=ServerArgs(...)", flush=True)

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
