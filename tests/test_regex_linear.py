"""Every pattern ckpttools applies to text from outside (server logs, server answers, files
it reads) runs in time linear in that text: each is fed 1 MiB adversarial inputs (long runs of
each character it repeats, and near-misses: a valid line's prefix pumped, then a character that
fails it) under a time bound. ``ckpttools/engines/releases.py`` is left to its own tests.

A user's ``--pattern`` cannot be made linear: it gets a per-line budget (lines over
``PATTERN_LINE`` bytes are not offered to it; a line that takes over ``PATTERN_BUDGET`` CPU
seconds is given up and counted; after ``PATTERN_STRIKES`` such lines the pattern is refused)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpttools.engines import aux_rules, flavor, launch, names
from ckpttools.engines import logs_formats as F
from ckpttools.errors import ConfigError
from ckpttools.io import figures, net
from ckpttools.measuring import logs
from ckpttools.ops import export_trtllm
from ckpttools.measuring.logs import read_logs
from ckpttools.vocab import tokens

MIB = 1 << 20
#: CPU seconds any one 1 MiB input may take (a linear scan takes milliseconds; a quadratic one, minutes).
#: CPU time, not wall time: on a loaded machine the wall clock says more about the neighbours
BOUND = 0.5

SGL_DECODE = (
    b"[2026-11-30 10:46:41 DP0 TP0] Decode batch, #running-req: 1, #token: 52, token usage: 0.00, accept len: 3.62, "
    b"accept rate: 0.88, cuda graph: False, gen throughput (token/s): 0.65, #queue-req: 0"
)
VLLM_SPEC = (
    b"\x1b[1;36m(APIServer pid=41) \x1b[0;0mINFO 12-01 08:54:20 \x1b[0m[metrics.py:120] SpecDecoding metrics: Mean acceptance "
    b"length: 2.00, Accepted throughput: 1.00 tokens/s, Drafted throughput: 3.00 tokens/s, Accepted: 10 tokens, "
    b"Drafted: 30 tokens, Per-position acceptance rate: 1.000, 0.000, 0.000, Avg Draft acceptance rate: 33.3%"
)
VLLM_STATS = (
    b"(APIServer pid=41) INFO 12-01 08:54:20 [loggers.py:282] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    b"Avg generation throughput: 12.5 tokens/s, Running: 2 reqs, Waiting: 0 reqs"
)
LOAD = (
    b"[2026-11-30 10:00:05] Load weight end. elapsed=0.19 s, type=LlamaForCausalLM, avail mem=1 GB, mem usage=0.01 GB."
)
START = b"[2026-11-30 10:00:00] server_args=ServerArgs(model_path='t', speculative_num_steps=3, tp_size=1)"
EXC = b"(EngineCore_DP0 pid=7) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
RELEASE = b"(APIServer pid=41) INFO 12-01 08:54:10 [api_utils.py:327] vLLM server version 0.32.0, serving model t"
ENGINE = b"(EngineCore pid=7) INFO 12-01 08:54:10 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: x"
LOGO = b"\xe2\x96\x88\xe2\x96\x88 version \x1b[1m0.32.0\x1b[0m"
#: uvicorn 0.54.0's access line under SGLang's format, and its default (vLLM's) to a terminal
ACCESS = b'[2026-12-01 10:15:14] INFO:     127.0.0.1:48510 - "POST /update_weights_from_tensor?x=1 HTTP/1.1" 200 OK'
ACCESS_COLOUR = (
    b'\x1b[32mINFO\x1b[0m:     127.0.0.1:1 - "\x1b[1mPOST /collective_rpc HTTP/1.1\x1b[0m" \x1b[32m200 OK\x1b[0m'
)
#: ckpttools' swap hook's line (issue 33), after SGLang's prefix and after vLLM's
HOOK = b'[2026-12-01 10:15:14 TP1] ckpttools swap: drafter="/r/a \\"b\\".st" digest=0123456789abcdef rank=1 world=2 maps=none'
HOOK_VLLM = b'(Worker_TP0 pid=3) ckpttools swap: drafter="/r/a" digest=0123456789abcdef rank=0 world=1 maps=replaced'


def _b(f: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    return f


def _s(f: Callable[[str], Any]) -> Callable[[bytes], Any]:
    return lambda b: f(b.decode("latin-1"))


#: (name, how it is applied, a line it reads): every pattern applied to outside text
PATTERNS: list[tuple[str, Callable[[bytes], Any], bytes]] = [
    ("vllm-prefix-colours", F.VLLM_PREFIX.match, b"\x1b[0m\x1b[1m\x1b[0mINFO 12-01 08:54:20 [x.py:1] hello"),
    ("sgl-prefix", F.SGL_PREFIX.match, SGL_DECODE),
    ("vllm-prefix", F.VLLM_PREFIX.match, VLLM_SPEC),
    ("decode", F.parse_decode, SGL_DECODE),
    ("decode-fast", F.DECODE_FAST.findall, b"\n" + SGL_DECODE + b"\n"),
    ("spec", F.SPEC.search, VLLM_SPEC),
    ("vllm-stats", F.VLLM_STATS.search, VLLM_STATS),
    ("load", F.parse_load, LOAD),
    ("resolved", F.RESOLVED.search, b"(APIServer pid=1) INFO 12-01 08:00:00 [model.py:733] Resolved architecture: X"),
    ("sgl-steps", F.SGL_STEPS.search, START),
    ("exc-line", F.EXC_LINE.match, EXC),
    ("release-version", F.RELEASE_LINES[0][1].search, RELEASE),
    ("release-engine", F.RELEASE_LINES[1][1].search, ENGINE),
    ("release-logo", F.RELEASE_LINES[2][1].search, LOGO),
    ("events", logs._EVENTS.search, b"[2026-11-30 10:00:07] The server is fired up and ready to roll!"),
    ("access", F.ACCESS.search, ACCESS),
    ("parse-access", F.parse_access, ACCESS),
    ("access-vllm-colour", F.parse_access, ACCESS_COLOUR),
    ("hook", F.HOOK.search, HOOK),
    ("parse-hook", lambda b: isinstance(F.parse_hook(b), F.Hook), HOOK),
    ("parse-hook-vllm", lambda b: isinstance(F.parse_hook(b), F.Hook), HOOK_VLLM),
    ("proc-prefix", F.PROC_PREFIX.match, HOOK_VLLM),
    ("launch-accept-len", _s(launch.parse_sglang_accept_lens), SGL_DECODE),
    (
        "launch-first-error",
        launch._ERROR_LINE.match,
        b"(Worker pid=1) ERROR 12-02 12:47:59 [multiproc_executor.py:1063] RuntimeError: Unsupported CPU attention",
    ),
    ("launch-colour", launch._COLOUR.search, b"\x1b[1;36m(Worker pid=1)\x1b[0;0m ERROR"),
    ("figure-decimal", figures._DECIMAL.fullmatch, b"-12.50"),
    ("figure-integer", figures._INTEGER.fullmatch, b"1250"),
    ("figure-read", lambda b: _quiet(figures.read, b, "throughput"), b"12.50"),
    ("tiktoken-rank-line", tokens._RANK_LINE.match, b"IQ== 0"),
    ("content-range", _s(net._CONTENT_RANGE.match), b"bytes 0-99/1000"),
    ("layer-id", _s(flavor._layer_ids), b"model.layers.0.self_attn.q_proj.weight\nlayers.1.mlp.weight"),
    ("midlayer", _s(flavor._has_midlayer), b"midlayer.self_attn.q_proj.weight"),
    ("trtllm-later-norm", _s(export_trtllm._LATER_INPUT_NORM.fullmatch), b"layers.1.input_layernorm.weight"),
    ("trtllm-layer", _s(export_trtllm._LAYER.match), b"layers.12.mlp.weight"),
    ("aux-later-norm", _s(aux_rules._LATER_NORM.fullmatch), b"layers.2.hidden_norm.weight"),
    ("qk-norm", _s(names.QK_NORM.match), b"model.layers.0.self_attn.q_norm.weight"),
]


def _quiet(f: Callable[..., Any], *a: Any) -> Any:
    try:
        return f(*a)
    except ValueError:
        return None


def adversarial(good: bytes, size: int = MIB) -> Iterator[tuple[str, bytes]]:
    """1 MiB inputs for a pattern that reads ``good``: each distinct character repeated; each
    prefix of ``good`` repeated (near-misses back to back); a prefix of ``good``, then one of its
    pieces pumped, then a character that fails it (the classic way to make a regex backtrack).
    The pieces start and end at tenths of the line and after each space, comma and ``m`` (the
    fields, and the colour codes)."""
    for c in sorted(set(good)):
        yield f"run of {bytes([c])!r}", bytes([c]) * size
    ends = {i + 1 for i, c in enumerate(good) if c in b" ,m"}
    cuts = sorted(({len(good) * k // 10 for k in range(1, 11)} | set(sorted(ends)[:12])) - {0})
    for c in cuts:
        yield f"prefix {good[:c][-20:]!r} repeated", good[:c] * (size // c)
    for i, a in enumerate(cuts[:-1]):
        for b in cuts[i + 1 :: 2]:
            pump = good[a:b]
            yield f"pumped {pump[:20]!r}", good[:a] + pump * ((size - a) // len(pump)) + b"\x00"
    yield "good then a long tail", good + b"9" * size
    yield "spaces", b" " * size


@pytest.mark.parametrize("name, apply, good", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_each_pattern_is_linear_on_1mib_adversarial_input(
    name: str, apply: Callable[[bytes], Any], good: bytes
) -> None:
    assert apply(good), f"{name}: the pattern does not read its own sample line"
    for what, text in adversarial(good):
        t = time.process_time()
        apply(text)
        took = time.process_time() - t
        assert took < BOUND, f"{name}: {what} ({len(text)} bytes) took {took:.2f} s"


def test_every_pattern_of_the_log_modules_is_in_the_table() -> None:
    """A new pattern in the log formats (or the logs modules) cannot skip this test."""
    import inspect

    from ckpttools.measuring import logs_fast

    covered = {id(apply.__self__) for _, apply, _ in PATTERNS if hasattr(apply, "__self__")}
    helpers = {id(F._DECODE_HEAD), id(F._DECODE_ACCEPT), id(F._DECODE_GRAPH), id(F._LOAD_TYPE)}  # (in the parsers)
    for mod in (F, logs, logs_fast, launch):
        for n, v in inspect.getmembers(mod):
            if isinstance(v, re.Pattern):
                assert id(v) in covered | helpers or n == "_ACCEPT_LEN", (
                    f"{mod.__name__}.{n} is not tested for linear time"
                )


def test_the_parsers_helpers_are_linear() -> None:
    for rx, good in ((F._DECODE_HEAD, b"Decode batch, #running-req: 1, "), (F._DECODE_ACCEPT, b"accept len: 1, accept rate: 1, "),
                     (F._DECODE_GRAPH, b"cuda graph: True, gen throughput (token/s): 1, #queue-req: 0"),
                     (F._LOAD_TYPE, b"type=X")):  # fmt: skip
        for what, text in adversarial(good):
            t = time.process_time()
            for i in range(0, len(text), len(text) // 8):  # (applied at a position, as the parsers apply them)
                rx.match(text, i)
            assert time.process_time() - t < BOUND, f"{rx.pattern[:30]!r}: {what}"


@pytest.mark.parametrize(
    "line",
    [
        b"\x1b[0m" * (MIB // 4 - 4),
        b"Decode batch, #running-req: 1, accept len: 1, accept rate: 1, " * (MIB // 64),
        b"Load weight end. " * (MIB // 17 - 1),
        b"[2026-11-30 10:00:00" + b" TP0" * (MIB // 4 - 8),
        b"(" + b"a" * (MIB - 8),
        b"SpecDecoding metrics: Mean acceptance length: " + b"1, " * (MIB // 3 - 20),
        b'ckpttools swap: drafter="' + b'\\"' * (MIB // 2 - 20),
        b"[2026-11-30 10:00:00] " + b'INFO:     a - "POST /update_weights_from_tensor' * (MIB // 50),
    ],
    ids=[
        "vllm-escapes",
        "decode-fields",
        "load-repeated",
        "sgl-rank-tags",
        "vllm-open-paren",
        "spec-fields",
        "hook-escapes",
        "access-repeated",
    ],  # fmt: skip
)
def test_ckpt_logs_reads_a_1mib_adversarial_line_in_bounded_time(tmp_path: Path, line: bytes) -> None:
    """The whole reader (both paths) on a line just under MAX_LINE of what made it stall."""
    p = tmp_path / "s.log"
    p.write_bytes(line[: logs.MAX_LINE - 1] + b"\n")
    for fast in (True, False):
        t = time.process_time()
        logs.FAST = fast
        try:
            r = read_logs([str(p)])
        finally:
            logs.FAST = True
        assert time.process_time() - t < 2 * BOUND and r.lines == 1


# ----------------------------------------------------------------------------- the user's pattern
def test_a_long_line_is_not_offered_to_the_users_pattern(tmp_path: Path) -> None:
    p = tmp_path / "p.log"
    p.write_bytes(b"a" * (MIB - 1) + b"\nAccept len: 2.5\n")
    t = time.process_time()
    r = read_logs(
        [str(p)], pattern=r"(?:a|a)*(?:a|a)*b|Accept len: (?P<accept_len>[\d.]+)", convention="tokens-per-step"
    )
    assert time.process_time() - t < BOUND
    assert r.accept_length == 2.5 and r.skipped == {
        f"lines longer than {logs.PATTERN_LINE} bytes, not offered to the pattern": 1
    }


def test_a_line_over_budget_is_skipped_and_counted(tmp_path: Path) -> None:
    p = tmp_path / "p.log"
    p.write_bytes(b"Accept len: 2.5\n" + b"a" * 40 + b"!\nAccept len: 3.5\n")
    t = time.process_time()
    r = read_logs([str(p)], pattern=r"^(?:a+)+$|Accept len: (?P<accept_len>[\d.]+)", convention="tokens-per-step")
    assert time.process_time() - t < 4 * logs.PATTERN_BUDGET + BOUND
    assert r.accept_length == 3.0 and r.window_count == 2 and r.skipped_lines == 1
    assert [k for k in r.skipped] == [
        f"lines the pattern did not finish within its budget ({logs.PATTERN_BUDGET} s of CPU a line)"
    ]


def test_a_pattern_over_budget_on_several_lines_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "p.log"
    p.write_bytes((b"a" * 40 + b"!\n") * 100)
    t = time.process_time()
    with pytest.raises(ConfigError, match="ran past its budget on 3 lines"):
        read_logs([str(p)], pattern=r"^(?P<accept_len>(?:a+)+)$", convention="tokens-per-step")
    assert time.process_time() - t < 2 * logs.PATTERN_STRIKES * logs.PATTERN_BUDGET + BOUND


def test_the_budget_leaves_the_timer_and_handler_as_it_found_them(tmp_path: Path) -> None:
    import signal

    before = signal.getsignal(signal.SIGVTALRM), signal.getitimer(signal.ITIMER_VIRTUAL)
    p = tmp_path / "p.log"
    p.write_bytes(b"Accept len: 2.5\n")
    read_logs([str(p)], pattern=r"Accept len: (?P<accept_len>[\d.]+)", convention="tokens-per-step")
    assert (signal.getsignal(signal.SIGVTALRM), signal.getitimer(signal.ITIMER_VIRTUAL)) == before
