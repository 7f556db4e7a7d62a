"""The measure request as a library caller builds it (``MeasureRequest.from_options``, the constructor,
``measure``): every bad value is one RequestError (a ValueError) naming the parameter, never a
TypeError or an assertion from deep inside, and no output is aimed at an input or at another output.
Found by a hostile run of the library (2026-12-05): ``steps=0`` had been measured as 3,
``num_prompts=-1`` had dropped the last prompt, ``drafters="abc"`` had been three drafters, and
``measure(req)`` had written its report over the drafter's config.json."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest

from ckpttools.errors import UnsafePathError
from ckpttools.measuring.measure import check_outputs, measure
from ckpttools.measuring.request import MeasureRequest, Offline, RequestError, RunningHost, Sweep

F = MeasureRequest.from_options
H = "http://127.0.0.1:9"

BAD_OPTIONS = [
    ("drafters-str", "abc", dict(launch=True, engine="sglang", target="t")),
    ("drafters-none", None, dict(host=H)),
    ("drafters-none-item", [None], dict(host=H)),
    ("drafters-empty-item", [""], dict(host=H)),
    ("steps-0", ["d"], dict(engine="torch", target="t", steps=0)),
    ("steps-true", ["d"], dict(engine="torch", target="t", steps=True)),
    ("steps-text", ["d"], dict(engine="torch", target="t", steps="3")),
    ("steps-65", ["d"], dict(launch=True, engine="sglang", target="t", steps=65)),
    ("tp-0", ["d"], dict(launch=True, engine="sglang", target="t", tp=0)),
    ("port-0", ["d"], dict(launch=True, engine="sglang", target="t", port=0)),
    ("port-70000", ["d"], dict(launch=True, engine="sglang", target="t", port=70000)),
    ("num-prompts-0", ["d"], dict(host=H, num_prompts=0)),
    ("num-prompts-negative", ["d"], dict(host=H, num_prompts=-1)),
    ("num-prompts-fraction", ["d"], dict(host=H, num_prompts=2.5)),
    ("num-prompts-text", ["d"], dict(host=H, num_prompts="16")),
    ("repeat-0", ["d"], dict(host=H, repeat=0)),
    ("max-new-tokens-0", ["d"], dict(host=H, max_new_tokens=0)),
    ("timeout-nan", ["d"], dict(host=H, timeout=math.nan)),
    ("timeout-negative", ["d"], dict(host=H, timeout=-1)),
    ("temperature-inf", ["d"], dict(host=H, temperature=math.inf)),
    ("bar-nan", ["d"], dict(host=H, min_accept_len=math.nan)),
    ("bar-text", ["d"], dict(engine="torch", target="t", min_accept_len="2")),
    ("ready-timeout-nan", ["d"], dict(launch=True, engine="sglang", target="t", ready_timeout=math.nan)),
    ("concurrency-int", ["d"], dict(host=H, concurrency=8)),
    ("concurrency-text", ["d"], dict(host=H, concurrency="1,8")),
    ("concurrency-none", ["d"], dict(host=H, concurrency=None)),
    ("concurrency-fraction", ["d"], dict(host=H, concurrency=[1.5])),
    ("concurrency-bool", ["d"], dict(host=H, concurrency=[True])),
    ("concurrency-huge", ["d"], dict(host=H, concurrency=[10**9])),
    ("concurrency-twice", ["d"], dict(host=H, concurrency=[1, 1])),
    ("concurrency-1000-levels", ["d"], dict(host=H, concurrency=list(range(1, 1001)))),
    ("context-negative", ["d"], dict(host=H, context_lengths=[-5])),
    ("context-bool", ["d"], dict(host=H, context_lengths=[True])),
    ("context-text", ["d"], dict(host=H, context_lengths="1k")),
    ("context-none", ["d"], dict(host=H, context_lengths=None)),
    ("engine-args-str", ["d"], dict(launch=True, engine="sglang", target="t", engine_args="--dtype bf16")),
    ("host-int", ["d"], dict(host=123)),
    ("sweep-text", ["d"], dict(launch=True, engine="sglang", target="t", sweep="steps=1,3")),
    ("sweep-empty", ["d"], dict(launch=True, engine="sglang", target="t", sweep=Sweep(()))),
    ("launch-and-host", ["d"], dict(launch=True, engine="sglang", target="t", host=H)),
    ("launch-device", ["d"], dict(launch=True, engine="sglang", target="t", device="cuda:7")),
    ("vllm-topk", ["d"], dict(launch=True, engine="vllm", target="t", topk=4)),
    ("target-is-drafter", ["d"], dict(engine="torch", target="d")),
    ("prompts-empty", ["d"], dict(host=H, prompts="")),
    ("prompts-none", ["d"], dict(host=H, prompts=None)),
]


@pytest.mark.parametrize(("drafters", "opts"), [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_a_bad_value_is_one_request_error(drafters, opts) -> None:
    with pytest.raises(RequestError) as e:
        F(drafters, **opts)
    assert isinstance(e.value, ValueError) and str(e.value).strip()


def test_one_drafter_in_two_spellings_is_refused(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "d").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RequestError, match="are one drafter"):
        F(["d", "./d/", str(tmp_path / "d")], launch=True, engine="sglang", target="t")


@pytest.mark.parametrize("engine", [None, 3, ["sglang"]], ids=["none", "int", "list"])
def test_an_engine_that_is_not_a_string_is_named_as_what_it_is(engine) -> None:
    from ckpttools.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"engine .* is not a name \(type {type(engine).__name__}, not str\)"):
        F(["d"], host=H, engine=engine)


BAD_REQUESTS = [
    ("server-none", dict(drafters=("d",), target="t", server=None)),
    ("server-url", dict(drafters=("d",), target="t", server="http://127.0.0.1:9")),
    ("offline-no-target", dict(drafters=("d",), target=None, server=Offline())),
    ("offline-concurrency", dict(drafters=("d",), target="t", server=Offline(), concurrency=(8,))),
    ("offline-steps-0", dict(drafters=("d",), target="t", server=Offline(steps=0))),
    ("drafters-list", dict(drafters=["d"], target="t", server=Offline())),
    ("drafters-none-item", dict(drafters=(None,), target="t", server=Offline())),
    ("concurrency-int", dict(drafters=("d",), target=None, server=RunningHost(H), concurrency=8)),
]


@pytest.mark.parametrize("fields", [c[1] for c in BAD_REQUESTS], ids=[c[0] for c in BAD_REQUESTS])
def test_a_request_built_directly_is_checked_alike(fields) -> None:
    with pytest.raises(RequestError):
        MeasureRequest(**fields)


@pytest.mark.parametrize("thing", [{}, None, "d"], ids=["dict", "none", "str"])
def test_measure_takes_a_request_only(thing) -> None:
    with pytest.raises(RequestError, match="measure takes a MeasureRequest"):
        measure(thing)  # type: ignore[arg-type]


def _sums(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("opts", "why"),
    [
        (dict(output="d/config.json"), "lies inside the input d"),
        (dict(output="t/config.json"), "lies inside the input t"),
        (dict(output="p.jsonl"), "is the input p.jsonl"),
        (dict(plot="d"), "is the input d"),
        (dict(output="sub"), "is a directory"),
        (dict(output="r.json", plot="r.json"), "are one file"),
    ],
    ids=["output-drafter-config", "output-target-config", "output-prompts", "plot-drafter", "output-dir", "two-at-one"],
)
def test_no_output_of_a_library_run_is_aimed_at_an_input(tmp_path: Path, monkeypatch, opts, why) -> None:
    """The library's own guard (the CLI's declared inputs are not there): refused before anything
    is measured, every input as it was."""
    for d in ("d", "t", "sub"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "config.json").write_text("{}")
    (tmp_path / "p.jsonl").write_text('{"input_ids": [1, 2]}\n')
    monkeypatch.chdir(tmp_path)
    before = _sums(tmp_path)
    req = F(["d"], engine="torch", target="t", prompts="p.jsonl", **opts)
    with pytest.raises((UnsafePathError, RequestError), match=why):
        measure(req)
    assert _sums(tmp_path) == before


def test_a_running_servers_log_is_an_input_for_that_run_only(tmp_path: Path, monkeypatch) -> None:
    """A host log is read, never written: refused as that run's output, and a later write of the
    same path by the same process is not (it had stayed declared for the process)."""
    from ckpttools.io.guard import write_json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "srv.log").write_text("log\n")
    with pytest.raises(UnsafePathError, match="is the input srv.log"):
        check_outputs(F(["d"], host=H, log="srv.log", output="srv.log"))
    check_outputs(F(["d"], host=H, log="srv.log", output="r.json"))
    write_json("srv.log", {"ok": 1})
    assert (tmp_path / "srv.log").read_text().startswith("{")
