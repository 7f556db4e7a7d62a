"""The swap's client (ckpttools.engines.swap) against servers that answer as a multi-rank engine
would, and as a broken one would: a swap that reaches fewer ranks than the server has, is refused
on one, replaces no cached map, reads back other bytes, or gets a non-answer, is a failed swap.

The servers here answer for ranks the way engines/serverside/ckpt_swap.py does (its own digest of
the drafter's parameters), so these tests hold the client's checks to what a real rank says; the
real engines run in tests/test_vllm_swap.py (CPU) and tests/test_gpu_sglang_swap.py (GPU)."""

from __future__ import annotations

import hashlib
import json
import pickletools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ckpttools.demo.tiny import build_drafter
from ckpttools.engines.releases import SGLANG_0_5_17, VLLM_0_32
from ckpttools.engines.swap import _server_module, byte_tensor_payload, server_spec, swap_in
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.io.net import NetClient

TORCH = {"BF16": "torch.bfloat16", "F32": "torch.float32", "I64": "torch.int64"}


def _honest(drafter: Path, spec: dict[str, Any], rank: int) -> dict[str, Any]:
    """What a rank answers after loading ``drafter`` (TP 1: whole parameters)."""
    mod = _server_module()
    with open_checkpoint(drafter) as ck:
        names = [n for n in ck.tensors if not any(s in n for s in spec.get("never_loaded", []))]
        if spec.get("mechanism") == "custom_loader":
            names = [n for n in names if n != "d2t"]
        expected = mod._expected(names, spec, set())
        digests, dtypes, numel = {}, {}, {}
        for p, parts in expected.items():
            h = hashlib.sha256()
            for n, _ in parts:
                h.update(bytes(ck.read_bytes(n)))
            digests[p], dtypes[p] = h.hexdigest(), TORCH[ck.tensors[parts[0][0]].dtype]
            numel[p] = sum(
                int(ck.tensors[n].nbytes // {"BF16": 2, "F32": 4, "I64": 8}[ck.tensors[n].dtype]) for n, _ in parts
            )
    return {"rank": rank, "refused": None, "maps_replaced": 1, "digests": digests, "dtypes": dtypes, "numel": numel}


def _payload_json(b64: str) -> dict[str, Any]:
    """The request inside SGLang's payload, read from its pickle opcodes (nothing is unpickled)."""
    import base64

    ints = [arg for op, arg, _ in pickletools.genops(base64.b64decode(b64)) if op.name.startswith("BININT")]
    return json.loads(bytes(ints).decode())


class FakeRanks:
    """A server of ``ranks`` ranks; ``mode`` says how it misbehaves."""

    def __init__(self, drafter: Path, spec: dict[str, Any], ranks: int, mode: str = "honest") -> None:
        self.drafter, self.spec, self.ranks, self.mode = drafter, spec, ranks, mode
        self.payloads: list[str] = []
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

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"null")
                self._send(*outer.answer(self.path, body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def _rank_answers(self) -> list[dict[str, Any]]:
        answers = [_honest(self.drafter, self.spec, r) for r in range(self.ranks)]
        if self.mode == "skip-rank-1":
            answers = answers[:1]
        elif self.mode == "refused-on-1":
            answers[-1] = {"rank": 1, "refused": "the running map has 100 slots, this drafter 256"}
        elif self.mode == "no-map":
            answers[-1]["maps_replaced"] = 0
        elif self.mode == "lying-digest":
            first = next(iter(answers[0]["digests"]))
            answers[0]["digests"][first] = "0" * 64
        return answers

    def answer(self, path: str, body: Any) -> tuple[int, bytes] | tuple[int, bytes, str]:
        if self.mode == "http-500":
            return 500, b'{"detail": "Worker failed"}'
        if self.mode == "html":
            return 200, b"<!DOCTYPE html><html>log in</html>", "text/html"
        if path == "/collective_rpc":
            if self.mode == "not-a-list":
                return 200, b'{"results": "done"}'
            lies = {
                "digests-list": json.dumps({"rank": 0, "digests": ["x"], "maps_replaced": 1}),
                "maps-string": json.dumps({"rank": 0, "digests": {}, "maps_replaced": "1"}),
                "rank-not-object": json.dumps([1, 2]),
                "rank-deep": "[" * 5000 + "]" * 5000,
                "rank-not-json": "Traceback (most recent call last):",
            }
            if self.mode in lies:
                return 200, json.dumps({"results": [lies[self.mode]]}).encode()
            return 200, json.dumps({"results": [json.dumps(a) for a in self._rank_answers()]}).encode()
        if path == "/update_weights_from_tensor":
            self.payloads = body["serialized_named_tensors"]
            req = _payload_json(self.payloads[0])
            for a in self._rank_answers():
                text = {"answer-list": "[1]", "answer-damaged": '{"rank": 0, "dig'}.get(self.mode, json.dumps(a))
                Path(req["answer"].replace("{rank}", str(a["rank"]))).write_text(text)
            return 200, b'{"success": true, "message": "Success"}'
        return 200, b"{}"

    def __enter__(self) -> FakeRanks:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()


@pytest.fixture(scope="module")
def drafter(tmp_path_factory) -> Path:
    return build_drafter(tmp_path_factory.mktemp("swap") / "d")


def _swap(engine: str, drafter: Path, ranks: int, mode: str) -> Any:
    release = VLLM_0_32 if engine == "vllm" else SGLANG_0_5_17
    spec = server_spec(release, drafter)
    with FakeRanks(drafter, spec, ranks, mode) as srv, NetClient(timeout=10.0) as net:
        return swap_in(engine, net, srv.url, drafter, spec, ranks=ranks), srv


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_honest_swap_is_read_back_against_the_file(drafter: Path, engine: str) -> None:
    res, _ = _swap(engine, drafter, 1, "honest")
    assert res.ok, res.why
    assert res.checked.startswith("read back: ") and "parameters equal the file's bytes" in res.checked
    assert res.ranks == 1 and res.maps_replaced == 1


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(
    "mode, why",
    [
        ("skip-rank-1", "the swap reached 1 of the server's 2 ranks"),
        ("refused-on-1", "rank 1: the running map has 100 slots"),
        ("no-map", "no rank replaced the cached draft-to-target map"),
    ],
)
def test_a_swap_that_misses_a_rank_fails(drafter: Path, engine: str, mode: str, why: str) -> None:
    res, srv = _swap(engine, drafter, 2, mode)
    assert not res.ok and res.why is not None and why in res.why, res.why
    if engine == "sglang":  # one payload per rank, each carrying the same request
        assert len(srv.payloads) == 2 and _payload_json(srv.payloads[1])["path"] == str(drafter.resolve())


def test_two_honest_ranks_are_a_swap_whose_shards_are_not_held_against_the_file(drafter: Path) -> None:
    res, _ = _swap("sglang", drafter, 2, "honest")
    assert res.ok and res.ranks == 2 and res.maps_replaced == 2
    assert "read back on 2 ranks" in res.checked


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_rank_that_reads_back_other_bytes_fails_the_swap(drafter: Path, engine: str) -> None:
    res, _ = _swap(engine, drafter, 1, "lying-digest")
    assert not res.ok and "does not hold the file's bytes" in (res.why or "")


@pytest.mark.parametrize(
    "mode",
    ["http-500", "html", "not-a-list", "digests-list", "maps-string", "rank-not-object", "rank-deep", "rank-not-json"],
)
def test_a_non_answer_is_a_failed_swap_in_one_line(drafter: Path, mode: str) -> None:
    res, _ = _swap("vllm", drafter, 1, mode)
    assert not res.ok and res.why and "\n" not in res.why


def test_the_payload_is_a_byte_tensor_and_nothing_else() -> None:
    """Only torch.ByteTensor is named in the pickle: it passes SGLang's SafeUnpickler allowlist
    (sglang/srt/utils/common.py:2797-2869), and no code of ckpttools' needs importing there."""
    import base64

    raw = base64.b64decode(byte_tensor_payload('{"path": "/x"}'))
    globals_named = [arg for op, arg, _ in pickletools.genops(raw) if op.name == "GLOBAL"]
    assert globals_named == ["torch ByteTensor"]


@pytest.mark.parametrize("mode", ["answer-list", "answer-damaged"])
def test_a_damaged_answer_file_is_a_failed_swap_in_one_line(drafter: Path, mode: str) -> None:
    res, _ = _swap("sglang", drafter, 1, mode)
    assert not res.ok and res.why and "\n" not in res.why
