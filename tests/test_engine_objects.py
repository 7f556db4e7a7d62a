"""The engine objects (ckpttools/engines/engine.py): each built from its release table, and each
answering what ops/ used to ask by comparing engine names. The swap goes through the mechanism the
table records (a local HTTP server sees which endpoint it was asked at)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.fake_servers import QuietHTTPServer

from ckpttools.demo.tiny import build_drafter
from ckpttools.engines import releases
from ckpttools.engines.engine import SGLang, Torch, VLLM, engine_arg, engine_for, other_server_engine
from ckpttools.engines.launch import LaunchSpec, build_command
from ckpttools.io.net import NetClient


@pytest.mark.parametrize("spec", [s for s in releases.KNOWN if s.startswith(("sglang", "vllm"))])
def test_each_engine_object_is_built_from_its_release_table(spec: str) -> None:
    rel = releases.KNOWN[spec]
    eng = engine_for(rel.name, rel)
    assert eng.spec == spec and eng.release is rel and rel.version in eng.label
    assert eng.swap_route() == rel.drafter_swap.value
    assert eng.table() is rel and eng.serves


def test_launch_argv_readiness_and_sweep_rules() -> None:
    s = LaunchSpec("sglang", "t", "d", port=1234, steps=3, topk=4)
    argv = SGLang().launch_argv(s)
    assert argv == build_command(s) and argv[1:3] == ["-m", "sglang.launch_server"]
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "13"  # steps x topk + 1
    v = VLLM().launch_argv(LaunchSpec("vllm", "t", "d", port=1234))
    assert json.loads(v[v.index("--speculative-config") + 1])["method"] == "eagle3"
    assert "--per-request-spec-decode-metrics=summary" in v
    assert SGLang().health_path == VLLM().health_path == "/health"
    assert VLLM().sweep_setting_refused({"steps": 3, "topk": 4}) and SGLang().sweep_setting_refused({"topk": 4}) is None
    with pytest.raises(ValueError):
        Torch().launch_argv(s)
    assert other_server_engine("sglang") == "vllm" and other_server_engine("vllm") == "sglang"


def test_figures_cache_and_log_grammar_per_engine() -> None:
    assert VLLM().reads_counters and VLLM().per_request_counters(1) and not VLLM().per_request_counters(8)
    assert not SGLang().reads_counters and SGLang().flush_resets_counters
    assert SGLang().log_accept_lens("Decode batch. accept len: 2.50, x\naccept len: 9999") == [2.5]
    assert VLLM().log_accept_lens("accept len: 2.5") is None
    assert "SpecDecoding" in VLLM().log_source()[0] and "Decode batch" in SGLang().log_source()[0]
    assert SGLang().context_override_var() == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
    assert VLLM().context_override_var() is None


@pytest.mark.parametrize(
    ("args", "cap"),
    [
        ([], None),
        (["--max-total-tokens=300000"], 300000),
        (["--max-total-tokens", "42"], 42),
        (["--max-total-tokens=1", "--max-total-tokens=7"], 7),  # the last wins, as argparse reads it
        (["--max-total-tokens=abc"], None),
        (["--max-total-tokens=-5"], None),
        (["--max-total-tokens"], None),  # no value
        (["--max-total-tokens-x=5"], None),
    ],
)
def test_the_kv_token_cap_the_engine_arguments_give(args: list[str], cap: int | None) -> None:
    assert SGLang().kv_token_cap(args) == cap
    assert VLLM().kv_token_cap(args) is None  # vLLM sizes no shared pool from it
    assert engine_arg(["--a", "b"], "--a") == "b"


#: values a user gives the number flags, each read by both grammars (SGLang's and vLLM's)
_INT_VALUES = ["1024", " 2048 ", "1k", "1K", "1Ki", "25.6k", "1.5K", "1.5Ki", "2M", "2m", "2Mi", "1G", "3T", "auto",
               "AUTO", "-1", "0", "-5", "+7", "1_000", "\uff11\uff12", "1e3", "", "k", "1kk", "9" * 80, "12.0"]  # fmt: skip


def _engine_function(source: str, names: tuple[str, ...]) -> dict:
    """The engine's own functions ``names``, compiled from its source text alone (the module's other
    imports left out: these two need re, argparse and Decimal only)."""
    import argparse
    import ast
    import re
    from decimal import Decimal

    tree = ast.parse(source)
    ns: dict = {"re": re, "argparse": argparse, "Decimal": Decimal}
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(n.name for n in body) == sorted(names)
    exec(compile(ast.Module(body=body, type_ignores=[]), "<engine source>", "exec"), ns)  # noqa: S102
    return ns


def _as_engine_reads(fn, value: str) -> int | None:
    """What the engine's parser makes of ``value``: a positive number it serves, else None (refused,
    its own choice -1, or no positive number)."""
    import argparse

    try:
        n = fn(value)
    except (argparse.ArgumentTypeError, ValueError, OverflowError):
        return None
    return n if n > 0 else None


def test_vllms_max_model_len_is_read_as_vllm_reads_it() -> None:
    """vLLM 0.32 parses --max-model-len with human_readable_int_or_auto (the table's int_flags): every
    value gives what that function, compiled from the installed vLLM's own source, gives."""
    from .vllm_pool import VLLM_PY

    found = sorted(Path(VLLM_PY).parents[1].glob("lib/python3*/site-packages/vllm/utils/argparse_utils.py"))
    if not found:
        pytest.skip(f"no vLLM beside {VLLM_PY}: its parser is compared only where it is installed")
    ns = _engine_function(found[0].read_text(), ("human_readable_int", "human_readable_int_or_auto"))
    for v in _INT_VALUES:
        want = _as_engine_reads(ns["human_readable_int_or_auto"], v)
        assert VLLM(releases.VLLM_0_32).context_cap([f"--max-model-len={v}"]) == want, v
        assert VLLM(releases.VLLM_0_32).context_cap(["--max-model-len", v]) == want, v
    assert VLLM(releases.VLLM_0_32).context_cap(["--max-model-len=1k"]) == 1000
    assert VLLM(releases.VLLM_0_32).context_cap(["--max-model-len=1K"]) == 1024
    assert VLLM().context_cap(["--context-length=1k"]) is None  # SGLang's flag: not vLLM's


def test_sglangs_context_length_and_token_cap_are_read_as_sglang_reads_them() -> None:
    """SGLang 0.5.17 parses --context-length and --max-total-tokens with human_readable_int (the
    table's int_flags): every value gives what that function, compiled from the release's own
    source in shared/device/sglang, gives; its docstring's examples among them."""
    import tarfile

    from .conftest import SHARED

    tar = SHARED / "device" / "sglang" / "sglang-0.5.17-py312-site.tar.xz"
    if not tar.is_file():
        pytest.skip(f"no SGLang 0.5.17 source at {tar}")
    with tarfile.open(tar, "r|xz") as tf:
        for m in tf:
            if m.name == "./sglang/srt/utils/common.py":
                f = tf.extractfile(m)
                assert f is not None
                source = f.read().decode()
                break
    fn = _engine_function(source, ("human_readable_int",))["human_readable_int"]
    sg = SGLang(releases.SGLANG_0_5_17)
    for v in _INT_VALUES:
        want = _as_engine_reads(fn, v)
        assert sg.context_cap([f"--context-length={v}"]) == want, v
        assert sg.kv_token_cap(["--max-total-tokens", v]) == want, v
    examples = {"1k": 1000, "1M": 1000000, "25.6k": 25600, "1Ki": 1024, "1Mi": 1048576}  # its docstring's
    for v, n in examples.items():
        assert sg.context_cap([f"--context-length={v}"]) == n == _as_engine_reads(fn, v)
    assert sg.context_cap(["--context-length=1K"]) is None  # case-sensitive: SGLang refuses it
    assert sg.context_cap(["--max-model-len=1024"]) is None  # vLLM's flag: not SGLang's


class _Seen(BaseHTTPRequestHandler):
    paths: list[str] = []

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        _Seen.paths.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"results": []}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_swap_in_goes_through_the_mechanism_the_table_records(tmp_path: Path) -> None:
    """An SGLang object whose table records the worker-extension route swaps through /collective_rpc
    (that route's endpoint), not through SGLang's custom loader: the table decides, not the name."""
    d = build_drafter(tmp_path / "d")
    route = releases.VLLM_0_32.drafter_swap.value
    rel = releases.dataclasses.replace(
        releases.SGLANG_0_5_17, drafter_swap=releases.Cited(route, "a test's table: vLLM's route")
    )
    srv = QuietHTTPServer(("127.0.0.1", 0), _Seen)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with NetClient(timeout=10.0, connect=5.0) as net:
            url = f"http://127.0.0.1:{srv.server_address[1]}"
            res = SGLang(rel).swap_in(net, url, d, {"endpoint": route["endpoint"], "flush": route["flush"]}, 1, 10.0)
    finally:
        srv.shutdown()
    assert _Seen.paths[:1] == ["/collective_rpc"], _Seen.paths
    assert not res.ok and "reached 0 of the server's 1 ranks" in (res.why or "")
    with pytest.raises(ValueError, match="no swap route"):
        SGLang(releases.SGLANG_0_5_23).swap_in(None, "http://x", d, {}, 1, 1.0)


def test_the_offline_engine_has_no_swap_and_no_target_digest() -> None:
    assert Torch().swap_route() is None and Torch().target_digest(None, "", None, {}, 1, 1.0) is None
    assert not Torch().serves and Torch().label == "PyTorch"
