"""The swap's client (ckpttools.engines.swap) against servers that answer as a multi-rank engine
would, and as a broken one would: a swap that reaches fewer ranks than the server has, is refused
on one, replaces no cached map, reads back other bytes, or gets a non-answer, is a failed swap.

The servers here answer for ranks the way engines/serverside/ckpt_swap.py does (its own digest of
the drafter's parameters), so these tests hold the client's checks to what a real rank says; the
real engines run in tests/test_vllm_swap.py (CPU) and tests/test_gpu_sglang_swap.py (GPU)."""

from __future__ import annotations

import hashlib
import json
import os
import pickletools
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.fake_servers import QuietHTTPServer

from ckpttools.demo.tiny import build_drafter
from ckpttools.engines.releases import SGLANG_0_5_17, VLLM_0_32
from ckpttools.engines.swap import _server_module, byte_tensor_payload, server_spec, swap_in, target_digest
from ckpttools.errors import ServerError
from ckpttools.io.checkpoint import open_checkpoint
from ckpttools.io.net import NetClient

TORCH = {"BF16": "torch.bfloat16", "F32": "torch.float32", "I64": "torch.int64"}


def _honest(drafter: Path, spec: dict[str, Any], rank: int, ranks: int = 1, path: str | None = None) -> dict[str, Any]:
    """What a rank answers after loading ``drafter``, as ckpt_swap.py writes it. At TP 1 every
    parameter is whole; at TP > 1 the matrices are shards (their rows split over the ranks) and
    the norms and d2t are whole, as the engines replicate them."""
    mod = _server_module()
    with open_checkpoint(drafter) as ck:
        skipped = [n for n in ck.tensors if any(s in n for s in spec.get("never_loaded", []))]
        loaded = [n for n in ck.tensors if n not in skipped]
        if spec.get("mechanism") == "custom_loader":
            loaded = [n for n in loaded if n not in ("d2t", "t2d")]  # the loader pops both before loading
        expected = mod._expected(loaded, spec, set())
        digests, dtypes, numel = {}, {}, {}
        for p, parts in expected.items():
            data = b"".join(bytes(ck.read_bytes(n)) for n, _ in parts)
            whole = sum(
                int(ck.tensors[n].nbytes // {"BF16": 2, "F32": 4, "I64": 8, "BOOL": 1}[ck.tensors[n].dtype])
                for n, _ in parts
            )
            if ranks > 1 and len(ck.tensors[parts[0][0]].shape) > 1:
                step = len(data) // ranks
                data, whole = data[rank * step : (rank + 1) * step], whole // ranks
            digests[p], dtypes[p], numel[p] = (
                hashlib.sha256(data).hexdigest(),
                TORCH[ck.tensors[parts[0][0]].dtype],
                whole,
            )
    return {
        "rank": rank,
        "path": path if path is not None else os.path.realpath(drafter),
        "skipped": skipped,
        "refused": None,
        "loaded": loaded,
        "maps_replaced": 1,
        "digests": digests,
        "dtypes": dtypes,
        "numel": numel,
    }


def _payload_json(b64: str) -> dict[str, Any]:
    """The request inside SGLang's payload, read from its pickle opcodes (nothing is unpickled)."""
    import base64

    ints = [arg for op, arg, _ in pickletools.genops(base64.b64decode(b64)) if op.name.startswith("BININT")]
    return json.loads(bytes(ints).decode())


def _lie(answers: list[dict[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The answers as a broken or hostile server gives them (``mode``)."""
    first = next(iter(answers[0]["digests"]))
    norm = next(p for p in answers[0]["digests"] if p.endswith("norm.weight"))
    if mode == "skip-rank-1":
        return answers[:1]
    if mode == "refused-on-1":
        answers[-1] = {
            "rank": 1,
            "path": answers[-1]["path"],
            "refused": "the running map has 100 slots, this drafter 256",
        }
    elif mode == "no-map":
        answers[-1]["maps_replaced"] = 0
    elif mode == "lying-digest":
        answers[0]["digests"][first] = "0" * 64
    elif mode == "lying-norm-on-1":  # a norm is whole on every rank: its bytes are the file's at any TP
        answers[-1]["digests"][norm] = "0" * 64
    elif mode in ("extra-rank", "extra-rank-lying"):  # a TP-1 server that answers for 2 ranks
        extra = json.loads(json.dumps(answers[0]))
        extra["rank"] = 1
        answers.append(extra)
        if mode == "extra-rank-lying":
            for a in answers:
                a["digests"] = {p: "0" * 64 for p in a["digests"]}
    elif mode == "duplicate-rank":
        answers[-1]["rank"] = 0
    elif mode == "rank-out-of-range":
        answers[0]["rank"] = 7
    elif mode == "rank-bool":
        answers[0]["rank"] = False
    elif mode == "other-path":
        answers[0]["path"] = "/elsewhere/another-drafter"
    elif mode == "numel-negative":
        answers[0]["numel"][first] = -1
    elif mode == "digest-not-hex":
        answers[0]["digests"][first] = "Z" * 64
    elif mode == "maps-bool":
        answers[0]["maps_replaced"] = True
    elif mode == "loaded-stray":
        answers[0]["loaded"].append("layers.9.no_such.weight")
    elif mode == "refused-empty":
        answers[0]["refused"] = ""
    elif mode == "dtypes-missing":
        del answers[0]["dtypes"]
    elif mode.startswith("device"):  # ckpt_swap.py's own answer: each parameter held against the file on the device
        for a in answers:
            hows = ["bytes", "cast", "applied"]
            a["checks"] = {p: [hows[i % 3], True] for i, p in enumerate(sorted(a.pop("digests")))}
            del a["dtypes"]
            a["timings"] = {"read": 0.25, "update": 0.5, "check": 0.125}
            a["bytes"] = 4096
        c = answers[0]["checks"]
        if mode == "device-differs":
            c[first][1] = False
        elif mode == "device-missing":
            del c[first], answers[0]["numel"][first]
        elif mode == "device-bad-how":
            c[first] = ["looked", True]
        elif mode == "device-bad-timings":
            answers[0]["timings"] = {"read": "fast"}
    elif mode == "digest-of-no-tensor":
        answers[0]["digests"]["model.no_such.weight"] = "0" * 64
        answers[0]["dtypes"]["model.no_such.weight"] = "torch.bfloat16"
        answers[0]["numel"]["model.no_such.weight"] = 4
    return answers


class FakeRanks:
    """A server of ``ranks`` ranks; ``mode`` says how it misbehaves. Each rank answers for the path
    the request names, as a real one does."""

    def __init__(self, drafter: Path, spec: dict[str, Any], ranks: int, mode: str = "honest") -> None:
        self.drafter, self.spec, self.ranks, self.mode = drafter, spec, ranks, mode
        self.payloads: list[str] = []
        self.answer_dir_mode: int | None = None
        #: the files the answer-link mode planted outside the answer directory (removed at the end)
        self.planted: list[Path] = []
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
                try:
                    self._send(*outer.answer(self.path, body))
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = QuietHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def _digests(self) -> list[dict[str, Any]]:
        """Each rank's target digest, as ckpt_digest.model_digest gives it, as the mode bends it."""
        one = {"class": "LlamaForCausalLM", "parameters": 12, "buffers": 0, "packed": 0, "bytes": 4096}
        one |= {"digest": hashlib.sha256(b"t").hexdigest(), "sums": {"model.norm.weight": "0" * 16}, "seconds": 0.01}
        sums = [{"rank": r, **one} for r in range(self.ranks)]
        bent = {
            "target-none": [],
            "target-extra": sums * 2,
            "target-no-sum": [{"rank": 0}],
            "target-empty": [{**sums[0], "parameters": 0}],
            "target-refused": [{"rank": 0, "refused": "AttributeError: no parameters"}],
            "target-bad-sums": [{**sums[0], "sums": {"x": "not hex"}}],
        }
        return bent.get(self.mode, sums)

    def _rank_answers(self, path: str) -> list[dict[str, Any]]:
        answers = [_honest(self.drafter, self.spec, r, self.ranks, path) for r in range(self.ranks)]
        return _lie(answers, self.mode)

    def answer(self, path: str, body: Any) -> tuple[int, bytes] | tuple[int, bytes, str]:
        if self.mode == "http-500":
            return 500, b'{"detail": "Worker failed"}'
        if self.mode == "html":
            return 200, b"<!DOCTYPE html><html>log in</html>", "text/html"
        if self.mode == "stall":  # past the client's deadline: it has given up by the time this answers
            time.sleep(5.0)
            return 200, b"{}"
        if path == "/collective_rpc" and body.get("method") == "ckpt_target_digest" and self.mode != "rpc-list":
            return 200, json.dumps({"results": [json.dumps(a) for a in self._digests()]}).encode()
        if path == "/collective_rpc":
            if self.mode == "not-a-list":
                return 200, b'{"results": "done"}'
            if self.mode == "rpc-list":  # the answer itself a list, not {"results": [...]}
                return 200, b'["done"]'
            lies = {
                "digests-list": json.dumps({"rank": 0, "digests": ["x"], "maps_replaced": 1}),
                "maps-string": json.dumps({"rank": 0, "digests": {}, "maps_replaced": "1"}),
                "rank-not-object": json.dumps([1, 2]),
                "rank-deep": "[" * 5000 + "]" * 5000,
                "rank-not-json": "Traceback (most recent call last):",
            }
            if self.mode in lies:
                return 200, json.dumps({"results": [lies[self.mode]]}).encode()
            return 200, json.dumps({"results": [json.dumps(a) for a in self._rank_answers(body["args"][0])]}).encode()
        if path == "/update_weights_from_tensor":
            self.payloads = body["serialized_named_tensors"]
            req = _payload_json(self.payloads[0])
            if req.get("op") == "target_digest":
                for i, a in enumerate(self._digests()):  # the i-th answer as rank i's file
                    Path(req["answer"].replace("{rank}", str(i))).write_text(json.dumps(a))
                return 200, b'{"success": true, "message": "Success"}'
            self.answer_dir_mode = os.stat(os.path.dirname(req["answer"])).st_mode & 0o7777
            if self.mode == "success-false":
                return 200, b'{"success": false, "message": "Failed to update weights: no"}'
            for i, a in enumerate(self._rank_answers(req["path"])):  # rank i writes rank{i}.json
                text = {"answer-list": "[1]", "answer-damaged": '{"rank": 0, "dig'}.get(self.mode, json.dumps(a))
                dest = Path(req["answer"].replace("{rank}", str(i)))
                if self.mode == "answer-link":  # the answer a link to a file elsewhere
                    real = dest.parent.parent / f"{dest.parent.name}-planted.json"
                    real.write_text(text)
                    self.planted.append(real)
                    dest.symlink_to(real)
                    continue
                dest.write_text(text)
                if self.mode == "answer-other-owner":  # as another user's planted file would be
                    os.chown(dest, 65534, 65534)
            if self.mode == "stray-file":
                Path(req["answer"].replace("{rank}", "0")).with_name("rank0.json.tmp-99").write_text("{}")
            return 200, b'{"success": true, "message": "Success"}'
        return 200, b"{}"

    def __enter__(self) -> FakeRanks:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()  # polls every SHUTDOWN_POLL
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        for p in self.planted:  # in the system's temporary directory, beside ckpt's answer directory
            p.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def drafter(tmp_path_factory) -> Path:
    return build_drafter(tmp_path_factory.mktemp("swap") / "d")


def _swap(engine: str, drafter: Path, ranks: int, mode: str, timeout: float = 10.0) -> Any:
    release = VLLM_0_32 if engine == "vllm" else SGLANG_0_5_17
    spec = server_spec(release, drafter)
    with FakeRanks(drafter, spec, ranks, mode) as srv, NetClient(timeout=600.0) as net:
        return swap_in(engine, net, srv.url, drafter, spec, ranks=ranks, timeout=timeout), srv


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_honest_swap_is_read_back_against_the_file(drafter: Path, engine: str) -> None:
    res, _ = _swap(engine, drafter, 1, "honest")
    assert res.ok, res.why
    assert res.checked.startswith("read back: ") and "parameters equal the file's bytes" in res.checked
    assert res.ranks == 1 and res.maps_replaced == 1


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_swap_checked_on_the_device_says_how_each_parameter_was_held_and_where_the_seconds_went(
    drafter: Path, engine: str
) -> None:
    res, _ = _swap(engine, drafter, 1, "device")
    assert res.ok, res.why
    assert res.checked.startswith("read back on the device: ") and "equal the file's bytes" in res.checked
    assert "cast to their dtype" in res.checked and "fixed random input" in res.checked
    assert {"request", "check", "read", "update", "read_back"} <= set(res.timings) and res.bytes == 4096
    assert res.timings["read"] == 0.25 and res.to_dict()["timings"] == res.timings
    assert sum(res.compared.values()) == len(res.answers[0]["checks"]) and set(res.compared) <= {
        "bytes",
        "cast",
        "applied",
    }
    for mode, why in (
        ("device-differs", "does not hold the file's values"),
        ("device-missing", "did not read back"),
        ("device-bad-how", "not one of ckpt_swap.py's"),
        ("device-bad-timings", "not seconds by phase"),
    ):
        res, _ = _swap(engine, drafter, 1, mode)
        assert not res.ok and res.why is not None and why in res.why, (mode, res.why)


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


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_two_honest_ranks_are_a_swap_whose_shards_are_not_held_against_the_file(drafter: Path, engine: str) -> None:
    res, _ = _swap(engine, drafter, 2, "honest")
    assert res.ok and res.ranks == 2 and res.maps_replaced == 2, res.why
    assert res.checked.startswith("read back on 2 ranks: ") and "held sharded" in res.checked, res.checked
    assert "not compared" in res.checked


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("mode", ["extra-rank", "extra-rank-lying"])
def test_more_answers_than_ranks_is_a_failed_swap(drafter: Path, engine: str, mode: str) -> None:
    """A TP-1 server that answers for 2 ranks (wrong digests or not) is no swap to trust: the
    rank count is the server's, never taken from the answers."""
    res, _ = _swap(engine, drafter, 1, mode)
    assert not res.ok and res.why is not None, res.checked
    assert "the server has 1 rank" in res.why, res.why
    assert res.checked == "not checked"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_whole_parameter_that_disagrees_with_the_file_fails_at_any_rank_count(drafter: Path, engine: str) -> None:
    """At TP 2 a norm is whole on each rank (the file's dtype and size): rank 1's, read back as
    other bytes, fails the swap though the matrices are shards."""
    res, _ = _swap(engine, drafter, 2, "lying-norm-on-1")
    assert (
        not res.ok and "read back on rank 1" in (res.why or "") and "does not hold the file's bytes" in (res.why or "")
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(
    "mode, ranks, why",
    [
        ("duplicate-rank", 2, "rank 0 answered twice"),
        ("rank-out-of-range", 1, "'rank' is int 7, not one of the server's 1"),
        ("rank-bool", 1, "'rank' is bool false"),
        ("other-path", 1, "answered for text '/elsewhere/another-drafter'"),
        ("numel-negative", 1, "dtype or size of"),
        ("digest-not-hex", 1, "not a sha256 in hex"),
        ("maps-bool", 1, "'maps_replaced' is bool true, not a count"),
        ("loaded-stray", 1, "'loaded' names text 'layers.9.no_such.weight', which is no tensor"),
        ("refused-empty", 1, "'refused' is text '', not a reason"),
        ("dtypes-missing", 1, "answer has no 'dtypes'"),
        ("digest-of-no-tensor", 1, "model.no_such.weight is filled by no tensor of the drafter's file"),
    ],
)
def test_every_field_of_a_rank_answer_is_checked(drafter: Path, engine: str, mode: str, ranks: int, why: str) -> None:
    res, _ = _swap(engine, drafter, ranks, mode)
    if engine == "sglang" and mode == "duplicate-rank":  # rank1.json says rank 0
        why = "the answer of rank 1 says it is rank 0's"
    assert not res.ok and res.why is not None and why in res.why and "\n" not in res.why, res.why


def test_the_answer_folder_is_private_to_the_user(drafter: Path) -> None:
    res, srv = _swap("sglang", drafter, 1, "honest")
    assert res.ok and srv.answer_dir_mode == 0o700


@pytest.mark.parametrize(
    "mode, why",
    [
        ("answer-other-owner", "owned by user 65534, not by this user"),
        ("answer-link", "not a regular file, so no rank's answer"),
        ("stray-file", "an answer came back as 'rank0.json.tmp-99'"),
        ("success-false", "the server did not apply the update"),
    ],
)
def test_an_answer_no_rank_of_this_swap_wrote_is_refused(drafter: Path, mode: str, why: str) -> None:
    if mode == "answer-other-owner" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    res, _ = _swap("sglang", drafter, 1, mode)
    assert not res.ok and why in (res.why or ""), res.why


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_swap_requests_are_bounded_by_the_timeout(drafter: Path, engine: str) -> None:
    """A server that takes 5 s over the swap, with a 1 s timeout: the swap fails at the deadline,
    as a request that failed (the caller then looks whether the server died)."""
    t0 = time.monotonic()
    res, _ = _swap(engine, drafter, 1, "stall", timeout=1.0)
    assert time.monotonic() - t0 < 4.0
    assert not res.ok and res.request_failed and "\n" not in (res.why or "")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_rank_that_reads_back_other_bytes_fails_the_swap(drafter: Path, engine: str) -> None:
    res, _ = _swap(engine, drafter, 1, "lying-digest")
    assert not res.ok and "does not hold the file's bytes" in (res.why or "")


@pytest.mark.parametrize(
    "mode",
    [
        "http-500",
        "html",
        "not-a-list",
        "rpc-list",
        "digests-list",
        "maps-string",
        "rank-not-object",
        "rank-deep",
        "rank-not-json",
    ],
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


def _target_read(engine: str, drafter: Path, mode: str, ranks: int = 1) -> Any:
    spec = server_spec(VLLM_0_32 if engine == "vllm" else SGLANG_0_5_17, drafter)
    with FakeRanks(drafter, spec, ranks, mode) as srv, NetClient(timeout=10.0) as net:
        return target_digest(net, srv.url, spec, ranks, timeout=5.0)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_target_digest_reads_every_rank_or_says_why_not(drafter: Path, engine: str) -> None:
    """A digest only from answers that carry one per rank, each field of the type model_digest
    gives; a read that read nothing, or digested nothing, raises (the caller writes "not checked"
    and why), never a digest of nothing that equals itself."""
    got = _target_read(engine, drafter, "honest", ranks=2)
    assert len(got.digest) == 64 and [r.rank for r in got.ranks] == [0, 1]
    assert got.parameters == 24 and got.bytes == 8192 and got.compared()["target_class"] == "LlamaForCausalLM"
    assert "digested on the device" in got.how and "on 2 ranks" in got.how
    for mode, why in (
        ("target-none", "0 ranks answered the target digest, but the server has 1 rank"),
        (
            "target-extra",
            "2 ranks answered the target digest, but the server has 1 rank|'rank1.json', but the server has 1 rank",
        ),
        ("target-no-sum", "'parameters' is null, not a count"),
        ("target-empty", "digested no parameter"),
        ("target-refused", "rank 0 could not digest the target: AttributeError"),
        ("target-bad-sums", "not each tensor's digest"),
    ):
        with pytest.raises(ServerError, match=why):
            _target_read(engine, drafter, mode)


def test_two_target_digests_say_whether_and_where_the_target_changed(drafter: Path) -> None:
    from ckpttools.engines.swap import RankDigest, TargetDigest
    from ckpttools.measuring.compare import CompareReport, judge_target

    a = TargetDigest((RankDigest(0, "X", 3, 1, 0, 96, "a" * 64, 0.1, {"w": "0" * 16, "b": "1" * 16}),), "how")
    b = TargetDigest((RankDigest(0, "X", 3, 1, 0, 96, "b" * 64, 0.1, {"w": "2" * 16, "b": "1" * 16}),), "how")
    same, words, compared = judge_target(a, a)
    assert same is True and words.startswith("unchanged: 3 parameters") and compared["changed"] == []
    same, words, compared = judge_target(a, b)
    assert same is False and words.startswith("CHANGED") and compared["changed"] == ["w"] and "differs in w" in words
    assert judge_target("no answer", b)[:2] == (None, "not checked: before the first swap, no answer")
    assert judge_target(a, "died")[0] is None
    rep = CompareReport("vllm", "t", None, target_unchanged=False, target_compared=compared)
    err = rep.error()
    assert rep.exit_code == 1 and err is not None and err.exit_code == 1 and "(w)" in str(err)


def test_a_drafter_that_failed_sets_the_run_s_exit_code_and_its_one_error() -> None:
    """The report keeps every drafter's entry; the run's error names the first that failed, with
    its exit code (2) over a drafter that measured nothing (3); with no failure, 3 names that one."""
    from ckpttools.measuring.compare import CompareReport
    from ckpttools.measuring.verify import VerifyReport

    ok = VerifyReport(engine="sglang", url="u", accept_length=2.0)
    empty = VerifyReport(engine="sglang", url="u", verdict="no request completed")
    died = ServerError("the sglang server died during the run of d2, exit code -9", hint="read s.log (kept)")
    rep = CompareReport("sglang", "t", None, drafters=[{"drafter": "d1"}, {"drafter": "d2"}, {"drafter": "d3"}])
    rep.reports, rep.errors = [ok, VerifyReport(engine="sglang", url="u"), empty], [None, died, None]
    err = rep.error()
    assert rep.exit_code == 2 and err is not None and err.exit_code == 2 and isinstance(err, ServerError)
    assert (
        str(err) == "d2: the sglang server died during the run of d2, exit code -9" and err.hint == "read s.log (kept)"
    )
    rep.errors = [None, None, None]
    rep.reports = [ok, ok, empty]
    err = rep.error()
    assert rep.exit_code == 3 and err is not None and err.exit_code == 3 and str(err) == "d3: no request completed"
    rep.reports = [ok, ok, ok]
    assert rep.exit_code == 0 and rep.error() is None
