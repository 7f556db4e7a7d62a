"""Logs split at weight updates (``ckpt logs``' segments, issue 33 item 4), real-shaped and hostile.

The lines are built from the engines' own format strings:

- SGLang 0.5.17's access line: uvicorn 0.54.0's ``AccessFormatter`` with SGLang's format
  ``[%(asctime)s] %(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s``
  (sglang/srt/utils/common.py:3039-3042); checked against uvicorn 0.54.0 itself (its
  ``AccessFormatter.format`` gives :data:`UVICORN_SGL` and :data:`UVICORN_VLLM_COLOUR` byte for byte);
  a real one is in tests/data/sglang-0.5.17-logs/sglang-healthy.log:154;
- vLLM 0.32's: uvicorn's default format (no prefix: vllm/entrypoints/launchers/api_server/entry.py:128-131);
- the swap hook's line, as issue 33 fixes it:
  ``ckpttools swap: drafter="<path, JSON-escaped>" digest=<16 hex> rank=<r> world=<n> maps=<replaced|none>``;
- decode and metrics lines: tests/corpus_logs.py (metrics_reporter.py:757-835, v1/spec_decode/metrics.py).

Cases are named ``logs-seg-``.
"""

from __future__ import annotations

import json

from tests.corpus import Case, both, copy_in, write
from tests.corpus_logs import DEC, VLLM

#: uvicorn 0.54.0's AccessFormatter with SGLang's format (use_colors False: a file)
UVICORN_SGL = '[2025-11-30 10:40:00] INFO:     127.0.0.1:45068 - "POST /update_weights_from_tensor HTTP/1.1" 200 OK'
#: uvicorn 0.54.0's AccessFormatter with its default format, to a terminal (vLLM's, coloured)
UVICORN_VLLM_COLOUR = '\x1b[32mINFO\x1b[0m:     127.0.0.1:45068 - "\x1b[1mPOST /collective_rpc HTTP/1.1\x1b[0m" \x1b[31m401 Unauthorized\x1b[0m'
PHRASE = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error"}
START = "[2026-11-30 10:46:40] server_args=ServerArgs(model_path='t', speculative_num_steps=3)"


def sgl_access(path: str, status: int = 200, t: str = "2026-11-30 10:46:41", port: int = 48510) -> str:
    return f'[{t}] INFO:     127.0.0.1:{port} - "POST {path} HTTP/1.1" {status} {PHRASE.get(status, "")}'.rstrip()


def vllm_access(path: str, status: int = 200, port: int = 41000) -> str:
    return f'INFO:     127.0.0.1:{port} - "POST {path} HTTP/1.1" {status} {PHRASE.get(status, "")}'.rstrip()


def hook(path: str, digest: str, rank: int = 0, world: int = 1, maps: str = "replaced", prefix: str = "") -> str:
    return f"{prefix}ckpttools swap: drafter={json.dumps(path)} digest={digest} rank={rank} world={world} maps={maps}"


def sgl_prefix(tags: str = "", t: str = "2026-11-30 10:46:41") -> str:
    return f"[{t}{tags}] "


def digest(i: int) -> str:
    return f"{i:016x}"


def dec(al: float) -> str:
    return DEC.format(al=f"{al:.2f}", rate=f"{(al - 1) / 3:.2f}").rstrip("\n")


def vllm_spec(al: float) -> str:
    acc = round((al - 1) * 10)
    pos = ", ".join("1.000" if i < round(al - 1) else "0.000" for i in range(3))
    return (
        VLLM.format(acc=acc).replace("1.000, 0.000, 0.000", pos).replace("length: 2.00", f"length: {al:.2f}").rstrip()
    )


def three_drafters(how: str, figures: tuple[float, ...] = (4.0, 1.0, 4.0), n: int = 3) -> str:
    """A server launched with the first drafter, then two swaps: ``access`` (SGLang's access lines
    only), ``hook`` (the hook's lines on two TP ranks, then the access line), ``vllm`` (vLLM's
    collective_rpc and metrics lines), ``vllm-hook`` (the hook, then its rpc and a read-back rpc)."""
    vllm = how.startswith("vllm")
    lines = [] if vllm else [START]
    for i, al in enumerate(figures):
        if i:
            d, path = digest(0xD0 + i), f"/srv/drafters/step-{i}/model.safetensors"
            if how == "access":
                lines.append(sgl_access("/update_weights_from_tensor"))
            elif how == "hook":
                lines += [hook(path, d, r, 2, prefix=sgl_prefix(f" TP{r}")) for r in (0, 1)]
                lines.append(sgl_access("/update_weights_from_tensor"))
            elif how == "vllm":
                lines.append(vllm_access("/collective_rpc"))
            else:
                lines.append(vllm_access("/collective_rpc"))  # the target's digest, before
                lines += [hook(path, d, r, 2, prefix=f"(Worker_TP{r} pid={70 + r}) ") for r in (0, 1)]
                lines += [vllm_access("/collective_rpc"), vllm_access("/collective_rpc")]  # the swap; the read-back
        lines += [vllm_spec(al) if vllm else dec(al)] * n
    return "\n".join(lines) + "\n"


def swaps(count: int, with_figures: bool = True, world: int = 1) -> str:
    """``count`` hook swaps, each followed (``with_figures``) by one decode window."""
    out = [START]
    for i in range(count):
        out += [
            hook(f"/srv/d/{i}.safetensors", digest(i), r, world, prefix=sgl_prefix(f" TP{r}")) for r in range(world)
        ]
        if with_figures:
            out.append(dec(4.0 if i % 2 else 1.0))
    return "\n".join(out) + "\n"


def segment_cases() -> list[Case]:
    s = ["logs", "s.log"]
    bar = ["--min-accept-len", "2"]
    j = ["--json"]
    good = dec(4.0)
    out = [
        # ---- the three sources of a split, and the verdict per segment
        Case(
            "logs-seg-sglang-access",
            s + bar,
            1,
            write("s.log", three_drafters("access")),
            stdout_has="segment 1 1.00 FAIL",
        ),
        Case(
            "logs-seg-sglang-hook",
            s + j,
            0,
            write("s.log", three_drafters("hook")),
            stdout_has='"digest": "00000000000000d1"',
        ),
        Case("logs-seg-vllm-rpc", s + bar, 1, write("s.log", three_drafters("vllm")), stdout_has="3 segments"),
        Case("logs-seg-vllm-hook", s, 0, write("s.log", three_drafters("vllm-hook")), stdout_has="3 segments"),
        Case(
            "logs-seg-pass-every-segment",
            s + ["--min-accept-len", "1"],
            0,
            write("s.log", three_drafters("access")),
            stdout_has="PASS: every segment at or above",
        ),
        # ---- refused updates leave the weights (and the segment) as they were
        Case(
            "logs-seg-refused-401",
            s,
            0,
            write("s.log", "\n".join([START, good, sgl_access("/update_weights_from_disk", 401), good]) + "\n"),
            stdout_has="refused by the server",
        ),
        Case(
            "logs-seg-refused-colour-vllm",
            s,
            0,
            write("s.log", "\n".join([vllm_spec(2.0), UVICORN_VLLM_COLOUR, vllm_spec(2.0)]) + "\n"),
            stdout_has="refused by the server",
        ),
        Case(
            "logs-seg-failed-500-splits",
            s,
            0,
            write(
                "s.log", "\n".join([START, good, sgl_access("/update_weights_from_distributed", 500), dec(1.0)]) + "\n"
            ),
            stdout_has="/update_weights_from_distributed 500",
        ),
        # ---- what a hostile log holds
        Case("logs-seg-10000-swaps", s, 0, write("s.log", swaps(10_000)), stdout_has="more segments (all in --json)"),
        Case("logs-seg-10000-swaps-json", s + j, 0, write("s.log", swaps(10_000)), stdout_has='"segment_count": 10001'),
        Case("logs-seg-swaps-no-figures", s + bar, 3, write("s.log", swaps(50, with_figures=False))),
        Case(
            "logs-seg-figures-before-first-swap-only",
            s + bar,
            0,
            write("s.log", START + "\n" + good + "\n" + swaps(5, False)),
            stdout_has="every figure in segment 0 of 6",
        ),
        Case(
            "logs-seg-hook-digest-uppercase",
            s,
            0,
            write("s.log", "\n".join([START, good, hook("/d/a", "ABCDEF0123456789"), dec(1.0)]) + "\n"),
            stdout_has="swap hook line not in ckpttools' format",
        ),
        Case(
            "logs-seg-hook-digest-short",
            s,
            0,
            write("s.log", "\n".join([START, good, hook("/d/a", "abc"), good]) + "\n"),
            stdout_has="swap hook line not in ckpttools' format",
        ),
        Case(
            "logs-seg-hook-digest-17",
            s,
            0,
            write("s.log", "\n".join([START, good, hook("/d/a", "0" * 17), good]) + "\n"),
            stdout_has="swap hook line not in ckpttools' format",
        ),
        Case(
            "logs-seg-hook-path-not-json",
            s,
            0,
            write(
                "s.log",
                "\n".join(
                    [
                        START,
                        good,
                        'ckpttools swap: drafter="/d/\\q" digest=0123456789abcdef rank=0 world=1 maps=none',
                        good,
                    ]
                )
                + "\n",
            ),
            stdout_has="its path is not a JSON string",
        ),
        Case(
            "logs-seg-hook-path-nul",
            s,
            0,
            write("s.log", "\n".join([START, good, hook("/d/\x00a", digest(1)), good]) + "\n"),
            stdout_has="control characters",
        ),
        Case(
            "logs-seg-hook-rank-over-world",
            s,
            0,
            write("s.log", "\n".join([START, good, hook("/d/a", digest(1), 2, 2), good]) + "\n"),
            stdout_has="rank 2 of a world of 2",
        ),
        Case(
            "logs-seg-hook-maps-other",
            s,
            0,
            write("s.log", "\n".join([START, good, hook("/d/a", digest(1), maps="some"), good]) + "\n"),
            stdout_has="swap hook line not in ckpttools' format",
        ),
        Case(
            "logs-seg-hook-in-request-body",
            s,
            0,
            write(
                "s.log",
                "\n".join(
                    [
                        START,
                        good,
                        _request_with(hook("/d/a", digest(1))),
                        sgl_prefix()
                        + "Receive: obj=GenerateReqInput(text='"
                        + sgl_access("/update_weights_from_tensor")
                        + "')",
                        good,
                    ]
                )
                + "\n",
            ),
            stdout_has="accept length 4.00",
        ),
        Case(
            "logs-seg-hook-after-other-prefix",
            s,
            0,
            write("s.log", "\n".join([START, good, "user said: " + hook("/d/a", digest(1)), good]) + "\n"),
            stdout_has="accept length 4.00",
        ),
        Case(
            "logs-seg-interleaved-ranks",
            s + j,
            0,
            write(
                "s.log",
                "\n".join(
                    [START, good]
                    + [hook(f"/d/{d}", digest(d), r, 2, prefix=sgl_prefix(f" TP{r}")) for r in (0, 1) for d in (1, 2)]
                    + [good]
                )
                + "\n",
            ),
            stdout_has='"segment_count": 5',
        ),
        Case(
            "logs-seg-crlf",
            s + bar,
            1,
            write("s.log", three_drafters("hook").replace("\n", "\r\n")),
            stdout_has="segment 1 00000000000000d1 1.00 FAIL",
        ),
        Case(
            "logs-seg-hook-several-mib",
            s,
            0,
            write("s.log", "\n".join([START, good, hook("/d/" + "a" * (3 << 20), digest(1)), good]) + "\n"),
            stdout_has="line longer than",
        ),
        Case(
            "logs-seg-access-query-several-mib",
            s,
            0,
            write(
                "s.log",
                "\n".join([START, good, sgl_access("/update_weights_from_tensor?x=" + "a" * (3 << 20)), good]) + "\n",
            ),
            stdout_has="accept length 4.00",
        ),
        Case(
            "logs-seg-gzip",
            s + bar,
            1,
            write("s.log", _gz(three_drafters("hook"))),
            stdout_has="segment 1 00000000000000d1 1.00 FAIL",
        ),
        Case(
            "logs-seg-access-query-900kib",
            s,
            0,
            write(
                "s.log",
                "\n".join([START, good, sgl_access("/update_weights_from_tensor?x=" + "a" * (900 << 10)), dec(1.0)])
                + "\n",
            ),
            stdout_has="/update_weights_from_tensor 200",
        ),
    ]
    out.append(Case("logs-seg-plot", s + ["--plot", "p.png"], 0, write("s.log", three_drafters("hook")), out="p.png"))
    # ---- verify --host --log reads the server's log the same way
    v = ["verify", "--host", "{srv}/sg-ok", "--prompts", "prompts.jsonl", "--num-prompts", "2", "--max-new-tokens", "8"]
    v += ["--log", "s.log"]
    prompts = copy_in("prompts.jsonl")
    out += [
        Case("logs-seg-verify-host-log", v, 0, both(prompts, write("s.log", three_drafters("hook"))),
             stdout_has="split at each weight update: 3 segments"),
        Case("logs-seg-verify-host-log-10000-swaps", v + ["--json"], 0, both(prompts, write("s.log", swaps(10_000))),
             stdout_has='"segment_count": 10001'),
        Case("logs-seg-verify-host-log-bad-hook", v, 0, both(prompts, write("s.log", START + "\n" + hook("/d", "Z") + "\n")),
             stdout_has="verdict"),
    ]  # fmt: skip
    return out


def _request_with(text: str) -> str:
    """A request-log line (--log-requests-format json) whose prompt holds ``text``."""
    body = {"event": "request.received", "rid": "a", "obj": {"text": text}}
    return sgl_prefix() + json.dumps(body)


def _gz(text: str) -> bytes:
    import gzip

    return gzip.compress(text.encode())
