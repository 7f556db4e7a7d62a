"""The one check before a launch (ckpttools/measuring/launch_check.py): claims judged under the release that
will run (read from --engine-python before the launch) and the engine arguments given; each warning
said once per run, shared ones once and per-drafter ones under the drafter's name.

The drafters are real files (a Llama drafter whose per-layer KV outgrows an MLA target's, which SGLang's
KV pools advice is about); the interpreter is this Python with the fake engines of tests/fake_engine
first on its path and an ``sglang 0.5.17`` distribution's metadata, so ``importlib.metadata`` says
0.5.17 as an installed SGLang would. The two CLI runs start the fake SGLang server (a second each).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli
from ckpttools.demo.tiny import build_deepseek_target, build_drafter
from ckpttools.engines.launch import LaunchSpec, free_port
from ckpttools.measuring.launch_check import check_launch, effective_engine

REPO = Path(__file__).resolve().parents[1]
KV = "target.draft_kv_memory"


def _fakepy(d: Path, version: str = "0.5.17") -> Path:
    dist = d / "site" / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    p = d / "fakepy"
    path = f"{REPO / 'tests' / 'fake_engine'}:{d / 'site'}"
    p.write_text(f'#!/bin/sh\nPYTHONPATH="{path}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n')
    p.chmod(0o755)
    return p


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    w = tmp_path_factory.mktemp("launch-check")
    big = dict(hidden_size=512, num_heads=32, num_kv_heads=32, intermediate_size=256, aux_layer_ids=(0, 1, 2))
    d = build_drafter(w / "d", **big)
    shutil.copytree(d, w / "d2")
    d3 = build_drafter(w / "d3", **big)
    cfg = json.loads((d3 / "config.json").read_text())
    del cfg["torch_dtype"]  # d3's own warning: SGLang then serves it as float16
    (d3 / "config.json").write_text(json.dumps(cfg))
    t = build_deepseek_target(w / "t", hidden_size=512, num_layers=4)
    (w / "ids.jsonl").write_text('{"input_ids": [5, 6, 7]}\n{"input_ids": [8, 9]}\n')
    return {"d": d, "d2": w / "d2", "d3": d3, "t": t, "py": _fakepy(w), "ids": w / "ids.jsonl", "w": w}


def _spec(pair: dict[str, Path], *engine_args: str) -> LaunchSpec:
    return LaunchSpec("sglang", str(pair["t"]), str(pair["d"]), port=free_port(), python=str(pair["py"]),
                      engine_args=list(engine_args))  # fmt: skip


def test_the_release_is_read_from_the_launch_interpreter(pair: dict[str, Path]) -> None:
    eng, how = effective_engine(_spec(pair))
    assert (eng.spec, how) == ("sglang==0.5.17", "installed")
    plain = LaunchSpec("sglang", str(pair["t"]), str(pair["d"]), python=sys.executable)
    assert effective_engine(plain)[1] == "not known"  # this Python has no SGLang: no release is made up


def test_advice_names_the_release_that_will_run(pair: dict[str, Path]) -> None:
    got = check_launch(_spec(pair), [str(pair["d"])])
    kv = [w for w in got.warnings if KV.split(".")[1] in w or "--max-total-tokens" in w]
    assert len(kv) == 1 and "SGLang 0.5.17" in kv[0] and "0.5.23" not in " ".join(got.warnings)
    assert got.reports[str(pair["d"])].engine_release == "sglang==0.5.17"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--engine-arg-unused",), True),  # not the flag: the advice stands
        (("--max-total-tokens=300000",), False),
        (("--max-total-tokens", "300000"), False),
        (("--max-total-tokens=300",), True),
        # as SGLang reads the numbers (human_readable_int: the release table's int_flags)
        (("--max-total-tokens=300k",), False),
        (("--max-total-tokens", "1Mi"), False),
        (("--max-total-tokens=2000",), True),  # fewer than one request at the target's context
        (("--context-length=1k", "--max-total-tokens=2000"), False),  # enough at the context served
    ],
)
def test_advice_never_asks_for_what_the_engine_arguments_give(pair: dict[str, Path], args, said) -> None:
    got = check_launch(_spec(pair, *args), [str(pair["d"])])
    kv = [w for w in got.warnings if "--max-total-tokens" in w]
    assert len(kv) == (1 if said else 0), got.warnings
    if said and "300" in args[0]:
        assert "the --max-total-tokens 300 given is fewer than one full-length request" in kv[0]
        assert "SGLang 0.5.17" in kv[0] and "launch SGLang with --max-total-tokens N" not in kv[0]


def test_each_warning_once_shared_ones_bare_per_drafter_ones_named(pair: dict[str, Path]) -> None:
    drafters = [str(pair[k]) for k in ("d", "d2", "d3", "d")]  # d twice: checked once
    got = check_launch(_spec(pair), drafters)
    assert list(got.reports) == drafters[:3]
    kv = [w for w in got.warnings if "--max-total-tokens" in w]
    assert len(kv) == 1 and not kv[0].startswith(tuple(drafters))  # all three share it: said once, bare
    dtype = [w for w in got.warnings if "torch_dtype is missing" in w]
    assert len(dtype) == 1 and dtype[0].startswith(f"{pair['d3']}: validate warns")  # only d3's: under its name
    assert len(got.warnings) == len(set(got.warnings))


def _verify(pair: dict[str, Path], *extra: str, drafters: tuple[str, ...] = ("d",)) -> object:
    argv = ["verify", "--launch", "--engine", "sglang", "--target", str(pair["t"]), *(str(pair[d]) for d in drafters)]
    argv += ["--engine-python", str(pair["py"]), "--prompts", str(pair["ids"]), "--num-prompts", "2"]
    argv += ["--max-new-tokens", "8", "--log", str(pair["w"] / f"s-{len(drafters)}-{len(extra)}.log"), "--json"]
    return CliRunner().invoke(cli, [*argv, *extra], env={"CKPT_FAKE_ENGINE": "honest"})


def test_a_launch_says_the_release_it_launched_and_each_warning_once(pair: dict[str, Path]) -> None:
    r = _verify(pair, drafters=("d", "d2"))
    assert r.exit_code == 0, r.output
    kv = [ln for ln in r.stderr.splitlines() if "warns before the load: $.num_key_value_heads" in ln]
    assert len(kv) == 1 and "SGLang 0.5.17 sizes" in kv[0] and "--max-total-tokens N" in kv[0], r.stderr
    assert "0.5.23" not in r.stderr
    rep = json.loads(r.stdout)
    assert rep["release"] == "sglang==0.5.17" and rep["server_starts"] == 1


def test_a_large_enough_max_total_tokens_given_silences_the_advice(pair: dict[str, Path]) -> None:
    r = _verify(pair, "--engine-arg=--max-total-tokens=300000")
    assert r.exit_code == 0, r.output
    assert "max-total-tokens" not in r.stderr and "KV" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["server"]["engine_release"] == "sglang==0.5.17"


def test_the_context_axis_marks_the_configs_the_check_read(pair: dict[str, Path]) -> None:
    """`verify --launch --context-lengths`: the limits the axis marks come from the target and the drafter
    as the launch check opened them (the target's context from its config, as SGLang derives it; the
    drafter's max_position_embeddings from its); a bin past the target's context is skipped, the others
    measured on the server."""
    from ckpttools.engines.config_rules import context_length

    tctx = context_length(json.loads((pair["t"] / "config.json").read_text()))[0]
    dmpe = json.loads((pair["d"] / "config.json").read_text())["max_position_embeddings"]
    assert isinstance(tctx, int) and 64 < tctx < dmpe * 4
    r = _verify(pair, "--context-lengths", f"64,{dmpe * 4}")
    assert r.exit_code == 0, r.output
    ctx = json.loads(r.stdout)["context"]
    assert ctx["target_context"] == tctx and ctx["drafter_max_position_embeddings"] == dmpe
    short, long = ctx["bins"]
    assert short["tokens"] == 64 and short["accept_length"] == 2.0 and not short["past_drafter_context"]
    assert long["past_drafter_context"] and long["skipped"] == f"past the target's context of {tctx} tokens"


def test_the_context_the_engine_arguments_set_is_read_as_the_engine_reads_it(pair: dict[str, Path]) -> None:
    """`--engine-arg=--context-length=1Ki` (SGLang's human_readable_int: 1024): the axis's target
    context is the one the launch serves, and a bin past it is skipped, not sent."""
    r = _verify(pair, "--engine-arg=--context-length=1Ki", "--context-lengths", "64,2k")
    assert r.exit_code == 0, r.output
    ctx = json.loads(r.stdout)["context"]
    assert ctx["target_context"] == 1024
    short, long = ctx["bins"]
    assert short["tokens"] == 64 and short["accept_length"] == 2.0
    assert long["tokens"] == 2048 and long["skipped"] == "past the target's context of 1024 tokens"


@pytest.mark.parametrize(
    "arg, says",
    [
        ("--engine-arg=--speculative-draft-model-path=/etc", "sets --speculative-draft-model-path"),
        ("--engine-arg=--port=1", "sets --port"),
        ("--engine-arg=--speculative-num", "sets --speculative-num-"),  # argparse takes an unambiguous prefix
    ],
)
def test_an_engine_argument_that_sets_ckpts_own_flag_is_refused_before_anything_starts(
    pair: dict[str, Path], arg: str, says: str
) -> None:
    """SGLang's argparse keeps the last of a flag given twice: ``--speculative-draft-model-path`` among
    the engine arguments would load a drafter that was never checked. Refused in the check before the
    launch: one error line, no "starting" note, no server (the ledger of launches stays empty)."""
    log = pair["w"] / "refused.log"
    r = CliRunner().invoke(
        cli,
        [
            "verify",
            "--launch",
            "--engine",
            "sglang",
            "--target",
            str(pair["t"]),
            str(pair["d"]),
            arg,
            "--engine-python",
            str(pair["py"]),
            "--prompts",
            str(pair["ids"]),
            "--num-prompts",
            "2",
            "--log",
            str(log),
        ],  # fmt: skip
        env={"CKPT_FAKE_ENGINE": "honest"},
    )
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert says in lines[0] and "which ckpttools sets itself" in lines[0], r.stderr
    assert len(lines) == 2 and lines[1].startswith("ckpt: hint: "), r.stderr  # no "starting ..." note
    assert not log.exists()
