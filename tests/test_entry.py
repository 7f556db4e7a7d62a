"""ckpt's entry point (ckpttools.cli.entry): ``ckpt inspect`` runs without Click, and means
exactly what the Click command means (the same parameters, exit code, stdout and stderr)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ckpttools.cli.entry import inspect_args
from ckpttools.demo.tiny import build_drafter, build_target
from tests.corpus import Case, all_cases, build_base, prepare, process_reason

REPO = Path(__file__).resolve().parents[1]

#: what no inspect --json imports: Click and the command group, the renderers, the engine
#: tables, validate's checks, the schema checker, the model runtimes, the Hub client, logging
NOT_FOR_INSPECT = [
    "click",
    "ckpttools.cli.commands",
    "ckpttools.cli.params",
    "ckpttools.cli.render",
    "ckpttools.engines.releases",
    "ckpttools.engines.claims",
    "ckpttools.engines.load_plan",
    "ckpttools.ops.validate",
    "ckpttools.io.writer",
    "ckpttools.io.hub",
    "jsonschema",
    "torch",
    "huggingface_hub",
    "importlib.metadata",
    "concurrent.futures",
    "logging",
    "shutil",
    "xxhash",
]

#: the modules the run had imported when it ended, on stderr's last line
_REPORT = (
    "import atexit, sys\natexit.register(lambda: sys.stderr.write('\\nMODULES ' + ' '.join(sorted(sys.modules))))\n"
)
#: how each entry starts: ``python -m ckpttools`` (runpy, as -m does) and the console script pip writes
_STARTS = {
    "python -m ckpttools": "import runpy\nsys.argv[0] = 'ckpttools'\nrunpy.run_module('ckpttools', run_name='__main__', alter_sys=True)\n",
    "ckpt": "from ckpttools.cli import main\nsys.exit(main())\n",
}


def _run(start: str, args: list[str], cwd: Path) -> tuple[int, str, set[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, "-c", _REPORT + _STARTS[start], *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    head, _, mods = r.stderr.rpartition("\nMODULES ")
    assert mods, r.stderr[-2000:]
    return r.returncode, r.stdout, set(mods.split())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("entry")
    build_target(base / "target")
    build_drafter(base / "drafter")
    return base


@pytest.mark.parametrize("start", sorted(_STARTS))
@pytest.mark.parametrize("extra", [["--no-tensors"], [], ["--filter", "model.layers.0.*"]])
def test_inspect_json_imports_no_click(tiny: Path, start: str, extra: list[str]) -> None:
    rc, out, mods = _run(start, ["inspect", "target", "--json", *extra], tiny)
    assert rc == 0 and json.loads(out)["kind"] == "target"
    assert {"ckpttools.cli.entry", "ckpttools.ops.inspect", "orjson"} <= mods  # it did run inspect
    assert not mods & set(NOT_FOR_INSPECT + ["numpy"]), sorted(mods & set(NOT_FOR_INSPECT + ["numpy"]))


def test_inspect_json_of_a_drafter_loads_numpy_for_its_mapping_only(tiny: Path) -> None:
    rc, out, mods = _run("ckpt", ["inspect", "drafter", "--json", "--no-tensors"], tiny)
    assert rc == 0 and json.loads(out)["vocab_mapping"] is not None and "numpy" in mods
    assert not mods & set(NOT_FOR_INSPECT), sorted(mods & set(NOT_FOR_INSPECT))


def test_what_the_entry_leaves_to_click_goes_there(tiny: Path) -> None:
    """A table needs Click to print it; --help and --revision are Click's to parse."""
    rc, out, mods = _run("ckpt", ["inspect", "target", "--no-tensors"], tiny)
    assert rc == 0 and "target" in out and "click" in mods and "ckpttools.cli.commands" not in mods
    rc, out, mods = _run("ckpt", ["inspect", "--help"], tiny)
    assert rc == 0 and "--no-tensors" in out and "ckpttools.cli.commands" in mods
    rc, out, mods = _run("python -m ckpttools", ["inspect", "target", "--bogus"], tiny)
    assert rc == 2 and out == "" and "ckpttools.cli.commands" in mods


@pytest.mark.parametrize(
    "args",
    [
        ["inspect"],
        ["inspect", "p", "q"],
        ["inspect", "p", "--revision", "main"],
        ["inspect", "p", "--filter"],
        ["inspect", "p", "--filter", "--json"],  # Click takes --json as the glob
        ["inspect", "p", "--filter="],
        ["inspect", "p", "--json", "--json"],
        ["inspect", "p", "--tensors", "--no-tensors"],
        ["inspect", "p", "--json=1"],
        ["inspect", "p", "-h"],
        ["inspect", "--", "p"],
        ["inspect", "-"],
        ["--version"],
        ["validate", "p"],
    ],
)
def test_the_entry_leaves_every_other_form_to_click(args: list[str]) -> None:
    assert inspect_args(args) is None


def test_what_the_entry_takes_click_reads_alike() -> None:
    """Random argument lists: each one the entry parses itself, Click's inspect command parses to
    the same parameters (and accepts)."""
    from ckpttools.cli.commands import cli

    cmd = cli.commands["inspect"]
    words = ["p", "q", "--json", "--tensors", "--no-tensors", "--all-tensors", "--filter", "--filter=a*", "a*"]
    words += ["--filter=", "-x", "--revision", "main", "--", "-h", "--json=1", "-", "layers.*", "--filter=-a"]
    rng = random.Random(30)
    taken = 0
    for _ in range(10_000):
        args = ["inspect", *(rng.choice(words) for _ in range(rng.randint(0, 6)))]
        got = inspect_args(args)
        if got is None:
            continue
        taken += 1
        want = dict(cmd.make_context("inspect", args[1:]).params)
        assert want.pop("revision") is None and want == got, args
    assert taken >= 500, taken


# ---------------------------------------------------------------- the corpus's inspect cases, both ways
INSPECT = [c for c in all_cases() if c.argv[:1] == ["inspect"] and process_reason(c) is None]


@pytest.fixture(scope="module")
def corpus_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("entry-base")
    build_base(base)
    return base


def test_the_sample_is_most_of_inspects_cases() -> None:
    assert len(INSPECT) >= 80 and sum(inspect_args(c.argv) is not None for c in INSPECT) >= 75


@pytest.mark.parametrize("case", INSPECT, ids=[c.name for c in INSPECT])
def test_an_inspect_case_reads_alike_both_ways(
    case: Case, corpus_base: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The entry's fast path and the Click group, on one case's inputs: the same exit code, the
    same stdout and the same stderr (the lines the judge reads, notes included)."""
    from tests.case_runner import run_inprocess

    if inspect_args(case.argv) is None:
        pytest.skip("the entry hands these words to Click: one path only")
    p = prepare(case, corpus_base, tmp_path_factory.mktemp("entry-work"), {})
    if p.why is not None:
        pytest.skip(f"needs its own process: {p.why}")
    cwd = p.dir / (case.cwd or "")
    fast = run_inprocess(p.argv, cwd, p.env, 60.0, entry="ckpttools.cli.entry")
    slow = run_inprocess(p.argv, cwd, p.env, 60.0)
    assert fast == slow
    assert fast[0] == case.code
