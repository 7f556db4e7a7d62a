"""The one reader for figures from outside (ckpttools/io/figures.py), as ``ckpt logs`` uses it.

Properties (hypothesis):

- any Decode batch line SGLang 0.5.17 can write (metrics_reporter.py: ``#running-req: {int}``,
  ``accept len: {:.2f}``, ``accept rate: {:.2f}``, ``gen throughput (token/s): {:.2f}``,
  ``#queue-req: {int}``), any SpecDecoding metrics line vLLM 0.32 can write (``%.2f``, ``%d``,
  ``{:.3f}`` per position) and any request-log line is read exactly as the engine's own number
  reads back (Python's ``float`` of the text, ``int`` of a count);
- any other line (a field replaced by any text, any JSON in a request line) is read or is
  skipped and counted, never a traceback and never a non-finite figure; for a decode line it is
  read exactly where the field is decimal text as printf writes numbers (digits, one point, a
  minus, no leading zero; any number of decimals, so a release that prints one more digit still
  reads) within its kind's range, and skipped otherwise.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpttools.engines.http import RequestResult, parse_sglang_meta
from ckpttools.errors import CkptError
from ckpttools.io import figures
from ckpttools.measuring import logs
from ckpttools.measuring.logs import read_logs

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NASTY = ["1_5", "1e308", "1e3", "inf", "-inf", "nan", "NaN", "-1", "٣", "²", "0x10", "1.", ".5", "05", "+5", "00", "-0",
         "-0.00", "9" * 50, "1" + "0" * 39, "18446744073709551616", "16777217", "16777216", "65.00", "65.01", "4.001",
         "1.000000000000000000000000000000000001", "0.99", "", "١.٥", "1\x00", "½"]  # fmt: skip


def printf_decimal(t: str, integer: bool) -> bool:
    """The spec, written out character by character: decimal text as printf writes a number."""
    if not t.isascii() or len(t) > figures.MAX_TEXT:
        return False
    body = t[1:] if t.startswith("-") and not integer else t
    whole, dot, frac = body.partition(".")
    if integer and dot:
        return False
    return whole.isdigit() and (whole == "0" or whole[0] != "0") and (not dot or frac.isdigit())


def _read(lines: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report read line by line and read the fast way (they must agree), as JSON data."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.log"
        p.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
        got = []
        for fast in (False, True):
            logs.FAST = fast
            try:
                got.append(json.loads(json.dumps(read_logs([str(p)]).to_dict(), allow_nan=False)))
            finally:
                logs.FAST = True
    a, b = got
    for r in (a, b):
        r["files"] = []
        for w in r["windows"]:
            w["file"] = ""
        r["skipped_examples"] = [e.split(": ", 1)[1] for e in r["skipped_examples"]]
    assert a == b, "the fast path reads the line differently"
    return a, b


def sgl_line(running: str, al: str, rate: str, tput: str, queued: str) -> str:
    return (
        f"[2026-11-30 10:46:41] Decode batch, #running-req: {running}, #token: 52, token usage: 0.00, accept len: {al}, "
        f"accept rate: {rate}, cuda graph: False, gen throughput (token/s): {tput}, #queue-req: {queued}"
    )


START = "[2026-11-30 10:46:40] server_args=ServerArgs(model_path='t', speculative_num_steps={steps}, tp_size=1)"
FIELDS = [("running", "requests"), ("al", "length"), ("rate", "rate"), ("tput", "throughput"), ("queued", "requests")]


@st.composite
def sglang_writes(draw: Any) -> dict[str, Any]:
    steps = draw(st.integers(1, 64))
    return {
        "steps": steps,
        "running": f"{draw(st.integers(0, 2**24))}",
        "al": f"{1 + draw(st.floats(0, 1)) * steps:.2f}",
        "rate": f"{draw(st.floats(0, 1)):.2f}",
        "tput": f"{draw(st.floats(0, 1e9)):.2f}",
        "queued": f"{draw(st.integers(0, 2**24))}",
    }


@SETTINGS
@given(sglang_writes())
def test_any_decode_line_sglang_writes_is_read_as_it_reads_back(f: dict[str, Any]) -> None:
    rep, _ = _read([START.format(steps=f["steps"]), sgl_line(f["running"], f["al"], f["rate"], f["tput"], f["queued"])])
    assert rep["window_count"] == 1 and rep["skipped_lines"] == 0, rep["skipped"]
    w = rep["windows"][0]
    assert w["accept_length"] == float(f["al"]) and w["accept_rate"] == float(f["rate"])
    assert w["running_requests"] == int(f["running"]) and w["queued_requests"] == int(f["queued"])
    assert w["throughput"] == float(f["tput"]) and rep["accept_length"] == pytest.approx(float(f["al"]), rel=1e-15)


def _in_range(t: str, kind: str, steps: int) -> bool:
    k = figures.KINDS[kind]
    v = float(t)
    return k.lo <= v <= (steps + 1 if kind == "length" else k.hi)


any_field = st.one_of(
    st.sampled_from(NASTY),
    st.text(st.characters(blacklist_characters=", \t\n\r\x0b\x0c", blacklist_categories=["Cs"]), max_size=45),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"{x:.2f}"),
    st.floats(-1e3, 1e3).map(repr),
)


@SETTINGS
@given(sglang_writes(), st.sampled_from(FIELDS), any_field)
def test_any_other_decode_line_is_read_exactly_or_skipped_and_counted(f: dict[str, Any], field: Any, text: str) -> None:
    name, kind = field
    f[name] = text
    rep, _ = _read([START.format(steps=f["steps"]), sgl_line(f["running"], f["al"], f["rate"], f["tput"], f["queued"])])
    ok = bool(text) and printf_decimal(text, figures.KINDS[kind].integer) and _in_range(text, kind, f["steps"])
    if ok:
        assert rep["window_count"] == 1 and rep["skipped_lines"] == 0, (text, rep["skipped"])
        w = rep["windows"][0]
        got = {"running": w["running_requests"], "al": w["accept_length"], "rate": w["accept_rate"],
               "tput": w["throughput"], "queued": w["queued_requests"]}[name]  # fmt: skip
        assert got == float(text)
    else:
        assert rep["window_count"] == 0 and rep["skipped_lines"] == 1, (text, rep["skipped"])
        assert rep["accept_length"] is None


@st.composite
def vllm_writes(draw: Any) -> tuple[int, int, list[float], str]:
    k = draw(st.integers(1, 64))
    drafts = draw(st.integers(1, 10**9))
    acc = draw(st.integers(0, drafts * k))
    pos = draw(st.lists(st.floats(0, 1), min_size=k, max_size=k))
    return acc, drafts * k, pos, f"{1 + acc / drafts:.2f}"


def vllm_line(acc: Any, drafted: Any, pos: str, mean: str) -> str:
    # v1/spec_decode/metrics.py:120-137
    return (
        f"(APIServer pid=41) INFO 12-01 08:54:20 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: {mean}, "
        f"Accepted throughput: 1.00 tokens/s, Drafted throughput: 1.00 tokens/s, Accepted: {acc} tokens, "
        f"Drafted: {drafted} tokens, Per-position acceptance rate: {pos}, Avg Draft acceptance rate: 10.0%"
    )


@SETTINGS
@given(vllm_writes())
def test_any_spec_decoding_line_vllm_writes_is_read_exactly(w: tuple[int, int, list[float], str]) -> None:
    acc, drafted, pos, mean = w
    rep, _ = _read([vllm_line(acc, drafted, ", ".join(f"{x:.3f}" for x in pos), mean)])
    assert rep["window_count"] == 1 and rep["skipped_lines"] == 0, rep["skipped"]
    win = rep["windows"][0]
    assert win["accepted"] == acc and win["drafted"] == drafted
    assert win["per_position"] == [float(f"{x:.3f}") for x in pos]


@SETTINGS
@given(vllm_writes(), st.sampled_from(["acc", "drafted", "pos", "mean"]), any_field)
def test_any_other_spec_decoding_line_is_read_or_skipped_never_a_traceback(w: Any, field: str, text: str) -> None:
    acc, drafted, pos, mean = w
    f = {"acc": str(acc), "drafted": str(drafted), "pos": ", ".join(f"{x:.3f}" for x in pos), "mean": mean}
    f[field] = text if field != "pos" else ", ".join([text] * len(pos))
    rep, _ = _read([vllm_line(f["acc"], f["drafted"], f["pos"], f["mean"])])
    assert rep["window_count"] + rep["skipped_lines"] == 1, rep
    for win in rep["windows"]:
        assert 1 <= win["accept_length"] <= len(win["per_position"]) + 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
COUNTS = ("completion_tokens", "spec_verify_ct", "spec_num_correct_drafts", "spec_accept_histogram")


def _json_line(obj: Any) -> str | None:
    try:
        return "[2026-11-30 10:00:00] " + json.dumps(obj)
    except (ValueError, OverflowError):
        return None


@SETTINGS
@given(st.integers(1, 10**6), st.data())
def test_any_request_line_sglang_writes_is_read_exactly(steps: int, data: Any) -> None:
    acc = data.draw(st.integers(0, 64 * steps))
    meta = {"completion_tokens": steps + acc, "spec_verify_ct": steps, "spec_num_correct_drafts": acc}
    line = _json_line({"timestamp": 1.5, "event": "request.finished", "rid": "a", "out": {"meta_info": meta}})
    assert line is not None
    rep, _ = _read([line])
    assert rep["per_request"]["n"] == 1 and rep["accept_length"] == 1 + acc / steps and rep["skipped_lines"] == 0


@SETTINGS
@given(st.sampled_from(["out", *COUNTS]), json_values)
def test_any_other_request_line_is_read_or_skipped_never_a_traceback(key: str, value: Any) -> None:
    meta: dict[str, Any] = {"completion_tokens": 40, "spec_verify_ct": 10, "spec_num_correct_drafts": 30}
    obj: dict[str, Any] = {"event": "request.finished", "rid": "a", "out": {"meta_info": meta}}
    if key == "out":
        obj["out"] = value
    else:
        meta[key] = value
    line = _json_line(obj)
    if line is None:
        return
    rep, _ = _read([line])
    n = rep["per_request"]["n"] if rep["per_request"] else 0
    assert n + rep["skipped_lines"] == 1, rep["skipped"]
    if n:
        assert math.isfinite(rep["accept_length"]) and 1 <= rep["accept_length"] <= 65


# ----------------------------------------------------------------------------- the reader itself
@SETTINGS
@given(
    st.one_of(any_field, st.binary(max_size=50).map(lambda b: b.decode("latin-1"))),
    st.sampled_from(sorted(figures.KINDS)),
)
def test_read_returns_the_texts_own_value_or_refuses(text: str, kind: str) -> None:
    try:
        v = figures.read(text, kind)
    except figures.FigureError as e:
        assert e.reason and not (printf_decimal(text, figures.KINDS[kind].integer) and _in_range(text, kind, 64))
        return
    assert printf_decimal(text, figures.KINDS[kind].integer) and math.isfinite(v) and v == float(text)
    assert isinstance(v, int) == figures.KINDS[kind].integer


@SETTINGS
@given(json_values, st.sampled_from(sorted(figures.KINDS)))
def test_value_takes_numbers_of_the_kind_only(v: Any, kind: str) -> None:
    try:
        got = figures.value(v, kind)
    except figures.FigureError:
        return
    assert got is v and not isinstance(v, bool) and math.isfinite(v)
    assert not figures.KINDS[kind].integer or type(v) is int


@pytest.mark.parametrize(
    "text, kind, why",
    [
        ("1_5", "count", "not a decimal number"),  # float() reads 15
        ("1e308", "requests", "not a decimal number"),
        ("16777217", "requests", "not an integer in [0, 2^24]"),
        ("9223372036854775808", "count", "not an integer in [0, 2^53]"),  # 2^63
        ("2.5", "count", "not an integer in [0, 2^53]"),
        ("1001.00", "length", "outside [1, 65] (draft steps + 1)"),
        ("nan", "rate", "not a decimal number"),
    ],
)
def test_the_issues_figures_are_refused_with_their_reason(text: str, kind: str, why: str) -> None:
    with pytest.raises(figures.FigureError) as e:
        figures.read(text, kind)
    assert e.value.reason == why


def test_a_list_of_more_than_64_positions_is_refused() -> None:
    assert figures.read_list("1.000, 0.500", "rate") == [1.0, 0.5]
    with pytest.raises(figures.FigureError, match="more than 64"):
        figures.read_list(", ".join(["0.5"] * 1000), "rate")


def test_json_counts_are_integers_within_2_53() -> None:
    for bad in (5.0, 2**63, -1, True, "5", float("inf")):
        with pytest.raises(CkptError):
            parse_sglang_meta(
                {"completion_tokens": 40, "spec_verify_ct": bad, "spec_num_correct_drafts": 3}, RequestResult(0, "x")
            )
    with pytest.raises(CkptError):
        parse_sglang_meta(
            {"completion_tokens": 40, "spec_verify_ct": 10, "spec_accept_histogram": [1] * 1000}, RequestResult(0, "x")
        )
