"""``ckpt logs`` on logs that SGLang 0.5.17 wrote on the GPU machine (tests/test_gpu_sglang_release.py,
2026-12-01; benchmarks/results/gpu-sglang-release-logs-2026-12-01.txt has that run's output). Each
figure equals what verify measured from the same run's meta_info; each crash is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpttools.cli.commands import cli

LOGS = Path(__file__).parent / "data" / "sglang-0.5.17-logs"


def _logs(name: str) -> tuple[int, dict]:
    r = CliRunner().invoke(cli, ["logs", str(LOGS / name), "--json"])
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.parametrize(
    "name, same_run_meta",
    [
        ("sglang-healthy.log", 4.0),
        ("sglang-eagle31.log", 4.0),
        ("sglang-mislabelled.log", 4.0),
        ("sglang-none-accepted.log", 1.0),
    ],
)
def test_a_healthy_log_gives_the_meta_info_figure_exactly(name, same_run_meta):
    code, rep = _logs(name)
    assert code == 0 and rep["engine"] == "sglang"
    assert rep["accept_length"] == same_run_meta and rep["exact"] is True  # the request log's counts
    assert any(e["kind"] == "load" and "LlamaForCausalLMEagle3" in e["text"] for e in rep["events"])
    assert any(e["kind"] == "warmup" for e in rep["events"])
    assert rep["windows"], "the decode windows are listed too"


def test_a_server_refused_at_start_names_the_context_refusal():
    code, rep = _logs("sglang-context-refused.log")
    assert code == 3 and rep["accept_length"] is None
    errs = [e["text"] for e in rep["events"] if e["kind"] == "error"]
    assert errs and "context_length (8192) is greater than the derived context_length (2048)" in errs[0]


def test_a_server_that_died_on_its_first_request_names_the_error():
    code, rep = _logs("sglang-died-first-request.log")
    assert code == 3
    errs = [e["text"] for e in rep["events"] if e["kind"] == "error"]
    assert errs and errs[0].startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
