"""The hostile-input corpus (tests/corpus.py), run as users run ckpt: relative paths, from the
case's own directory; in this process where a fresh process would behave the same, else in a
subprocess (tests/case_runner.py). One parametrized test per case, the totals, and a sample of
cases run both ways with the same outcome."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import note_for_summary
from tests.corpus import (
    Case,
    Outcome,
    all_cases,
    build_base,
    case_env,
    process_reason,
    run_case,
    run_corpus,
    ZYGOTE_CASES,
    zygote_able,
)
from tests.corpus_net import hub_repos
from tests.fake_servers import MisbehavingServer
from tests.hook_host import HookHost
from tests.local_hub import LocalHub

CASES = all_cases()
NAMES = [c.name for c in CASES]


def both_ways_sample(cases: list[Case], n: int) -> list[str]:
    """``n`` cases that may run in this process (by what they say: their inputs, once made, may
    still need one), taken in turn from each class (the name up to its first dash), so that
    every class is in it while it has cases left."""
    by: dict[str, list[Case]] = {}
    for c in cases:
        if process_reason(c) is None and not c.env:
            by.setdefault(c.name.split("-", 1)[0], []).append(c)
    queues = [v[:: max(1, len(v) // 6)] + v for v in by.values()]  # spread over each class first
    out: list[str] = []
    while len(out) < n and any(queues):
        for q in queues:
            while q and q[0].name in out:
                q.pop(0)
            if q and len(out) < n:
                out.append(q.pop(0).name)
    return out


#: the cases run both ways are the first 60 of these that ran in this process
SAMPLE = both_ways_sample(CASES, 80)


def read_when_run_sample(cases: list[Case]) -> list[str]:
    """The cases whose environment holds only variables of case_runner.READ_WHEN_RUN (so that a zygote
    of the base environment runs them): the first of each class and exit code, and of each variable."""
    from tests.case_runner import READ_WHEN_RUN

    firsts: dict[object, str] = {}
    for c in cases:
        if c.env and set(c.env) <= READ_WHEN_RUN.keys() and not c.process:
            firsts.setdefault((c.name.split("-", 1)[0], c.code), c.name)
            firsts.setdefault(frozenset(c.env), c.name)
    return list(dict.fromkeys(firsts.values()))


ENV_SAMPLE = read_when_run_sample(CASES)


def zygote_able_cases(cases: list[Case]) -> list[Case]:
    """The cases that say they need a process of their own and that a zygote's child may run."""
    return [c for c in cases if process_reason(c) is not None and zygote_able(c, case_env(c, Path("/w"), {}))]


def zygote_sample(cases: list[Case]) -> list[str]:
    """Cases a zygote runs (tests/zygote.py: an environment of ZYGOTE_CASES cases or more; their
    directories once made may still say no): the first of each class, exit code and environment."""
    able = zygote_able_cases(cases)
    # each case's own TMPDIR (corpus.case_tmp) left out: a zygote's child takes it as it starts
    envs = {c.name: frozenset((k, v) for k, v in case_env(c, Path("/w"), {}).items() if k != "TMPDIR") for c in able}
    sizes = Counter(envs[c.name] for c in able)
    firsts: dict[object, str] = {}
    for c in able:  # not a -once mode: the Hub answers it alike only the first time (tests/local_hub.py)
        if sizes[envs[c.name]] >= ZYGOTE_CASES and not c.name.endswith("-once"):
            firsts.setdefault((c.name.split("-", 1)[0], c.code, envs[c.name]), c.name)
    return list(firsts.values())


ZYGOTE_SAMPLE = zygote_sample(CASES)
#: an offline torch case that loads the model: transformers' Llama import makes torch's compile cache in the
#: temporary directory (corpus.TORCH_CACHE), in a process of its own the case's TMPDIR
TORCH_SAMPLE = ["link-nothing-ids-prompts-offline"]


def _selected(request: pytest.FixtureRequest) -> set[str]:
    """The case names this session runs (all of them unless -k or node ids narrowed it)."""
    here = [i for i in request.session.items if i.module is request.module]
    if any(i.name == "test_totals" for i in here):  # the totals need every case
        return set(NAMES)
    names = {i.name for i in here}
    sample = set(SAMPLE) if "test_both_ways_alike" in names else set()
    sample |= set(ENV_SAMPLE) if "test_cases_with_variables_read_when_run_read_alike" in names else set()
    sample |= set(TORCH_SAMPLE) if "test_a_torch_case_that_loads_its_model_reads_alike" in names else set()
    if "test_cases_run_by_a_zygote_read_alike" in names:  # and the rest of their zygotes' cases
        sample |= {c.name for c in zygote_able_cases(CASES)}
    return sample | {i.callspec.params["name"] for i in here if getattr(i, "originalname", "") == "test_case"}


@dataclass
class Bench:
    """What the cases run against: the base inputs, the servers' URLs, the Hub's home."""

    base: Path
    subst: dict[str, str]
    home: str
    tmp: pytest.TempPathFactory

    def case(self, c: Case) -> Case:
        """``c`` with its environment's placeholders filled in."""
        hub = self.subst["{hub}"]
        return replace(c, env={k: v.replace("{hub}", hub).replace("{hubhome}", self.home) for k, v in c.env.items()})


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    base = tmp_path_factory.mktemp("corpus-base")
    build_base(base)
    with MisbehavingServer() as srv, LocalHub(hub_repos(base)) as hub, HookHost(base / "serve-hook") as hook:
        subst = {"{srv}": srv.url, "{srvhostport}": srv.url.removeprefix("http://"), "{hub}": hub.url}
        subst |= {"{hook}": hook.url, "{hookroot}": str(hook.root), "{hookbase}": str(hook.base)}
        yield Bench(base, subst, str(tmp_path_factory.mktemp("hub-home")), tmp_path_factory)


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, bench: Bench, corpus_work: Path) -> dict[str, Outcome]:
    wanted = _selected(request)
    cases = [bench.case(c) for c in CASES if c.name in wanted]
    res = run_corpus(cases, bench.base, corpus_work, bench.subst)
    return {o.case.name: o for o in res}


@pytest.fixture(scope="module")
def corpus_work(bench: Bench) -> Path:
    """The directory the corpus's cases run in, each in a directory of its own."""
    return bench.tmp.mktemp("corpus-work")


def test_no_temporary_is_left_beside_the_cases_directories(outcomes: dict[str, Outcome], corpus_work: Path) -> None:
    """Once every case has run, no temporary is left in the corpus's work directory, where 31 cases
    write their --log beside their own directory (`../NAME.log`) and the judge of each case does not
    look. A hung case's directory is kept, inputs named .ckpt-tmp-* on purpose too: that case failed
    already."""
    hung = {name for name, o in outcomes.items() if o.rc is None}
    left = [q.relative_to(corpus_work) for q in corpus_work.rglob("*.ckpt-tmp-*")]
    assert [str(q) for q in left if q.parts[0] not in hung] == []


@pytest.mark.parametrize("name", NAMES)
def test_case(outcomes: dict[str, Outcome], name: str) -> None:
    o = outcomes[name]
    assert not o.problems, f"{name}: {o.problems}\nstdout: {o.stdout[-600:]}\nstderr: {o.stderr[-600:]}"


def test_totals(outcomes: dict[str, Outcome]) -> None:
    """At least 200 cases; print the totals the issue asks for."""
    res = list(outcomes.values())
    count = lambda what: sum(any(p.startswith(what) for p in o.problems) for o in res)  # noqa: E731
    totals = {
        "cases": len(res),
        "clean": sum(not o.problems for o in res),
        "tracebacks": count("traceback"),
        "wrong exit codes": count("exit "),
        "modified inputs": count("input tree changed"),
        "leftovers": count("temporaries left") + count("something was left"),
        "hangs": count("hang"),
        "bad stderr": count("stderr is not") + count("exit 0 with an error"),
        "missing outputs": count("exit 0 and nothing at OUT"),
        "servers left running": count("servers left running"),
        "slowest case s": round(max(o.seconds for o in res), 2),
        "in-process": sum(o.how == "in-process" for o in res),
        "in-process s": round(sum(o.seconds for o in res if o.how == "in-process"), 1),
        "in own process s": round(sum(o.seconds for o in res if o.how != "in-process"), 1),
    }
    why: dict[str, int] = {}
    for o in res:
        h = o.how.removeprefix("process: ")  # in a zygote's child: "zygote: " and the reason
        k = "zygote: " + h.split(": ")[1] if h.startswith("zygote: ") else h.split(":")[0]
        why[k] = why.get(k, 0) + 1
    reruns = [f"{o.case.name}: {o.how}" for o in res if o.how.startswith("process: rerun")]
    for line in (
        f"corpus totals: {totals}",
        f"corpus cases, how they ran: {why}",
        f"corpus in-process anomalies re-run in a process: {reruns or 'none'}",
    ):
        print(line)
        note_for_summary(line)  # in the run's summary too, whether the test passes or not
    for o in res:
        if o.problems:
            print(f"unclean: {o.case.name} ({o.how}): {o.problems}\n  stderr: {o.stderr[-800:]!r}")
    assert len(res) >= 200
    assert totals["clean"] == totals["cases"]


def _alike(o: Outcome) -> tuple:
    """What a run's outcome is: its exit code, the judge's findings, and stderr (its directory
    written as <case>, so that runs in two directories compare)."""
    return o.rc, [p.replace(o.dir, "<case>") for p in o.problems], o.stderr.replace(o.dir, "<case>")


def test_both_ways_alike(outcomes: dict[str, Outcome], bench: Bench) -> None:
    """60 cases across the classes, run in this process (by the corpus run) and in subprocesses:
    the same exit code, the same findings, the same stderr, case by case."""
    chosen = [n for n in SAMPLE if outcomes[n].how == "in-process"][:60]
    assert len(chosen) == 60 and len({n.split("-", 1)[0] for n in chosen}) >= 20
    work = bench.tmp.mktemp("corpus-both-ways")
    cases = {c.name: bench.case(c) for c in CASES if c.name in chosen}
    run = lambda n: run_case(cases[n], bench.base, work, bench.subst, how="process")  # noqa: E731
    with ThreadPoolExecutor(max_workers=4) as pool:
        sub = dict(zip(chosen, pool.map(run, chosen)))
    differ = [f"{n}: in-process {_alike(outcomes[n])!r}, process {_alike(sub[n])!r}" for n in chosen]
    differ = [d for n, d in zip(chosen, differ) if _alike(outcomes[n]) != _alike(sub[n])]
    assert not differ, "\n".join(differ)


def test_cases_with_variables_read_when_run_read_alike(outcomes: dict[str, Outcome], bench: Bench) -> None:
    """A case whose environment holds only variables of case_runner.READ_WHEN_RUN ran in a child of
    the base environment's zygote, which set them as it started (the corpus run); run again in fresh
    processes (where every variable is read at import), a sample of them across classes, exit codes
    and variables ends alike, case by case."""
    from tests.case_runner import READ_WHEN_RUN

    chosen = ENV_SAMPLE
    seen = {k for c in CASES if c.name in chosen for k in c.env}
    # TMPDIR is the runner's, set for every case (corpus.case_tmp): every zygote child runs with a
    # TMPDIR of its own, and test_cases_run_by_a_zygote_read_alike reruns a sample in fresh processes
    assert len(chosen) >= 5 and seen | {"TMPDIR"} == READ_WHEN_RUN.keys(), (chosen, seen)
    zygote = [n for n in chosen if outcomes[n].how.startswith("process: zygote: ")]
    assert zygote == chosen, [(n, outcomes[n].how) for n in chosen]
    _rerun_alike(outcomes, bench, chosen, "zygote")


def test_cases_run_by_a_zygote_read_alike(outcomes: dict[str, Outcome], bench: Bench) -> None:
    """The cases that need a process of their own (an environment read at import, a Hub repo id, a
    stalling server, a regex, a FIFO, the demo) ran in children of a zygote (tests/zygote.py) that had
    imported ckpt and huggingface_hub under their environment, where 5 or more share one; run again
    each in a fresh ``python -m ckpttools``, a sample across classes, exit codes and environments
    ends alike, case by case."""
    chosen = [n for n in ZYGOTE_SAMPLE if outcomes[n].how.startswith("process: zygote: ")]
    envs = {frozenset(c.env.items()) for c in CASES if c.name in chosen}
    assert len(chosen) >= 8 and len(envs) >= 2 and len({n.split("-", 1)[0] for n in chosen}) >= 3, chosen
    _rerun_alike(outcomes, bench, chosen, "zygote")


def test_a_torch_case_that_loads_its_model_reads_alike(outcomes: dict[str, Outcome], bench: Bench) -> None:
    """An ``--engine torch`` case run in this process, where torch's compile cache was made by the
    model imports before the cases, and again in a fresh process, which makes it in the case's TMPDIR
    (a reviewer's finding, 2026-12-07): the same outcome, clean both ways."""
    assert [outcomes[n].how for n in TORCH_SAMPLE] == ["in-process"] * len(TORCH_SAMPLE)
    assert all(not outcomes[n].problems for n in TORCH_SAMPLE)
    _rerun_alike(outcomes, bench, TORCH_SAMPLE, "in-process")


def _rerun_alike(outcomes: dict[str, Outcome], bench: Bench, chosen: list[str], how: str) -> None:
    """Cases ``chosen`` of the corpus run, run again each in a fresh process: each ends alike."""
    work = bench.tmp.mktemp("corpus-rerun")
    cases = {c.name: bench.case(c) for c in CASES if c.name in chosen}
    run = lambda n: run_case(cases[n], bench.base, work, bench.subst, how="process")  # noqa: E731
    with ThreadPoolExecutor(max_workers=4) as pool:
        sub = dict(zip(chosen, pool.map(run, chosen)))
    port = re.compile(r"(127\.0\.0\.1:|--port )\d+")  # each run starts its server on a free port of its own
    alike = lambda o: port.sub(r"\1<port>", repr(_alike(o)))  # noqa: E731
    differ = [f"{n}: {how} {alike(outcomes[n])!r}, process {alike(sub[n])!r}" for n in chosen]
    differ = [d for n, d in zip(chosen, differ) if alike(outcomes[n]) != alike(sub[n])]
    assert not differ, "\n".join(differ)


def test_an_uncaught_exception_reads_alike(tmp_path: Path) -> None:
    """CKPT_DEBUG=1 lets the CLI's error escape: in this process it is printed as Python prints
    it, with exit 1, as the subprocess shows it (the judge's "traceback")."""
    from tests.case_runner import run_inprocess, run_process

    env = {**os.environ, "CKPT_DEBUG": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    ran = [run(["inspect", "nowhere"], tmp_path, env, 60.0) for run in (run_inprocess, run_process)]
    for rc, so, se in ran:
        assert rc == 1 and so == "" and se.startswith("Traceback (most recent call last):\n"), se
    assert [se.splitlines()[-1] for _, _, se in ran][0] == [se.splitlines()[-1] for _, _, se in ran][1]


def test_a_stop_that_python_swallows_is_sent_again(tmp_path: Path) -> None:
    """The watchdog's first stop lands in a finaliser, where Python prints "Exception ignored" and
    goes on (tests/runner_entry.py): it stops the case again every _REFIRE s, so a case that would
    run 20 s more is still reported as a hang (rc None) within a few seconds, not when it ends."""
    from tests.case_runner import _REFIRE, run_inprocess

    t = time.monotonic()
    rc, _, se = run_inprocess(["20"], tmp_path, dict(os.environ), 0.5, entry="tests.runner_entry")
    took = time.monotonic() - t
    assert rc is None and "Exception ignored in" in se and "_Hang" in se, se
    assert took < 0.5 + 4 * _REFIRE + 3, took


def test_an_exception_that_ends_a_thread_of_the_case_is_in_its_stderr(tmp_path: Path) -> None:
    """As in a fresh interpreter, not a warning of pytest's: the judge sees the traceback."""
    from tests.case_runner import run_inprocess

    rc, so, se = run_inprocess(["thread"], tmp_path, dict(os.environ), 30.0, entry="tests.runner_entry")
    assert rc == 0 and so == "", se
    assert se.startswith("Exception in thread") and "Traceback" in se and "ValueError: raised in a thread" in se, se


def test_a_librarys_log_handler_made_before_the_case_writes_to_its_stderr(tmp_path: Path) -> None:
    """A handler a library attached to ``sys.stderr`` at its import, before the case (transformers'
    and huggingface_hub's are), writes to the case's stderr during it, as in a fresh process where the
    import happens in the case; afterwards it writes where it wrote before."""
    import io
    import logging
    import sys

    from tests.case_runner import run_inprocess

    lib = logging.getLogger("runner-entry-lib")
    h = logging.StreamHandler()  # sys.stderr as it is now: this test's
    before = h.stream
    lib.addHandler(h)
    try:
        rc, so, se = run_inprocess(["log"], tmp_path, dict(os.environ), 30.0, entry="tests.runner_entry")
        assert (rc, so, se) == (0, "", "a library's warning, through its own handler\n")
        assert h.stream is before is sys.stderr
        h.setStream(buf := io.StringIO())
        rc, so, se = run_inprocess(["log"], tmp_path, dict(os.environ), 30.0, entry="tests.runner_entry")
        assert (rc, se, h.stream) == (0, "", buf)  # a handler on a stream of its own keeps it
        assert buf.getvalue() == "a library's warning, through its own handler\n"
    finally:
        lib.removeHandler(h)


def test_a_pools_idle_worker_with_a_name_of_its_own_is_not_waited_on(tmp_path: Path) -> None:
    """A module's thread pool named by ``thread_name_prefix`` (engines/serverside/ckpt_swap.py's
    ``ckpt-dg``): a fresh process ends with its worker idle; in this process the case ends too (it
    was waited on until its time ran out: a hang)."""
    from tests.case_runner import run_inprocess

    for _ in range(2):  # the pool made in the first run, used again in the second
        rc, so, se = run_inprocess(["pool"], tmp_path, dict(os.environ), 10.0, entry="tests.runner_entry")
        assert (rc, so, se) == (0, "", "")


def test_cases_the_hub_or_a_python_file_could_change_get_a_process(tmp_path: Path) -> None:
    """A repo-id-shaped input that is no local path goes to the Hub even where its org/ directory is
    local (the CLI looks for a typo there after the Hub's answer): huggingface_hub's settings are read
    at import, so such a case needs a process. An output path (-o, --output, --plot, --log) is never
    a repo. A .py file among the inputs could stand in for a module (-m puts the cwd first on sys.path)."""
    from tests.case_runner import dir_reason

    (tmp_path / "root" / "step-0").mkdir(parents=True)
    assert dir_reason(["serve", "--drafter", "root/gone"], tmp_path, tmp_path).startswith("hub: root/gone")
    assert dir_reason(["inspect", "org/x@main"], tmp_path, tmp_path).startswith("hub: org/x@main")
    assert dir_reason(["inspect", "root/step-0"], tmp_path, tmp_path) is None
    for flag in ("-o", "--output", "--plot", "--log"):
        assert dir_reason(["export", "root/step-0", flag, "root/out"], tmp_path, tmp_path) is None
    assert dir_reason(["export", "root/step-0", "--output=root/out"], tmp_path, tmp_path) is None
    (tmp_path / "root" / "step-0" / "jsonschema.py").write_text("")
    assert dir_reason(["inspect", "root/step-0"], tmp_path, tmp_path) == (
        "python file: -m puts the case's directory first on sys.path"
    )


def _misbehaving(do: Any) -> Any:
    """A run of ckpt that exits as ``do(cwd)`` says, after doing what it does: the product's part
    played by a function, so that the judge (tests/corpus.py:execute) is what is under test."""

    def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, str]:
        return do(cwd)

    return run


def _tmp_in_out(cwd: Path) -> tuple[int, str, str]:
    (cwd / "o").mkdir()
    (cwd / "o" / ".m.ckpt-tmp-9-write").write_text("")
    return 0, "", ""


def _chmod_input(cwd: Path) -> tuple[int, str, str]:
    (cwd / "o").mkdir()
    os.chmod(cwd / "in.txt", 0)
    return 0, "", ""


def _rewrite_input(cwd: Path) -> tuple[int, str, str]:
    (cwd / "o").mkdir()
    data = (cwd / "in.txt").read_bytes()
    (cwd / "in.txt").unlink()
    time.sleep(0.01)
    (cwd / "in.txt").write_bytes(data)  # the same bytes, a new file
    return 0, "", ""


@pytest.mark.parametrize(
    ("do", "problem"),
    [
        (_tmp_in_out, "temporaries left: ['o/.m.ckpt-tmp-9-write']"),
        (lambda cwd: (0, "", ""), "exit 0 and nothing at OUT o"),
        (lambda cwd: ((cwd / "o").mkdir(), (0, "", "ckpt: error: boom\n"))[1], "exit 0 with an error"),
        (
            lambda cwd: ((cwd / "o").mkdir(), (0, "", "x.py:3: UserWarning: careful\n  warn()\n"))[1],
            "exit 0 with an error or a Python warning",
        ),
        (_chmod_input, "input tree changed"),
        (_rewrite_input, "input tree changed"),
    ],
    ids=["tmp-inside-out", "no-out", "error-line", "py-warning", "chmod", "same-bytes-new-file"],
)
def test_the_judge_sees_what_a_defect_leaves_on_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, do: Any, problem: str
) -> None:
    """A case that expects exit 0 and an output: each defect below passed the judge before (a
    reviewer's audit, 2026-12-07) and is a problem now."""
    from tests import case_runner as R
    from tests.corpus import execute, prepare

    case = Case("judge", ["export", "in.txt", "-o", "o"], 0, setup=lambda d, b: (d / "in.txt").write_text("x"), out="o")
    p = prepare(case, tmp_path, tmp_path / "work", {})
    monkeypatch.setattr(R, "run_process", _misbehaving(do))
    o = execute(p, "process")
    assert any(q.startswith(problem) for q in o.problems), o.problems


def test_a_case_runs_with_a_temporary_directory_of_its_own_each_way(tmp_path: Path) -> None:
    """TMPDIR is the case's own (corpus.case_tmp) in this process, in a zygote's child and in a process
    of its own: what a command leaves in the temporary directory lands where the judge looks, and this
    process's temporary directory is as it was afterwards."""
    from tests.case_runner import READ_WHEN_RUN, run_inprocess
    from tests.corpus import case_env, case_tmp, prepare
    from tests.zygote import Zygote

    case = Case("leaves-tmp", ["tmp"], 0)
    p = prepare(case, tmp_path, tmp_path / "work", {})
    mine = case_tmp(tmp_path / "work", case)
    assert p.env["TMPDIR"] == str(mine) and mine.is_dir() and case_env(case, tmp_path / "work")["TMPDIR"] == str(mine)
    before = tempfile.gettempdir()
    rc, so, _ = run_inprocess(["tmp"], p.dir, p.env, 30.0, entry="tests.runner_entry")
    assert rc == 0 and Path(so.strip()).parent == mine and tempfile.gettempdir() == before
    code = "import tempfile; print(tempfile.mkdtemp(prefix='ckpt-swap-'))"
    (tmp_path / "zy").mkdir()
    env = {**p.env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # the zygote's preload reads its own temporary directory as it is imported, before the fork
    z = Zygote(
        {**env, "TMPDIR": str(tmp_path / "zy")}, tmp_path / "zy", ("tests.runner_entry",), frozenset(READ_WHEN_RUN)
    )
    try:
        rc, so, _ = z.run([], p.dir, 30.0, env=env, code=code)
    finally:
        z.close()
    assert rc == 0 and Path(so.decode().strip()).parent == mine
    r = subprocess.run([sys.executable, "-c", code], env=p.env, capture_output=True, text=True, check=True)
    assert Path(r.stdout.strip()).parent == mine
    assert len(os.listdir(mine)) == 3


def test_the_judge_sees_a_temporary_left_in_the_cases_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that leaves a directory in its TMPDIR (a swap's ``ckpt-swap-*`` answer folder, say) is
    a problem, whether it succeeded or failed, and the case's TMPDIR is removed with its directory."""
    from tests import case_runner as R
    from tests.corpus import case_tmp, execute, prepare

    def leaves(code: int) -> Any:
        def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, str]:
            tempfile.mkdtemp(prefix="ckpt-swap-", dir=env["TMPDIR"])
            if code == 0:
                (cwd / "o").mkdir()
                return 0, "", ""
            return code, "", "ckpt: error: the server went away\n"

        return run

    for code in (0, 2):
        case = Case(
            f"judge-{code}", ["export", "in.txt", "-o", "o"], code, lambda d, b: (d / "in.txt").write_text("x"), "o"
        )
        p = prepare(case, tmp_path, tmp_path / "work", {})
        monkeypatch.setattr(R, "run_process", leaves(code))
        o = execute(p, "process")
        assert [q for q in o.problems if q.startswith("temporaries left in its TMPDIR: ['ckpt-swap-")] == o.problems
        assert o.problems and not case_tmp(tmp_path / "work", case).exists()


def test_the_judge_passes_a_run_that_did_its_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of the test above: the output made, the input untouched, notes only on stderr."""
    from tests import case_runner as R
    from tests.corpus import execute, prepare

    case = Case("judge", ["export", "in.txt", "-o", "o"], 0, setup=lambda d, b: (d / "in.txt").write_text("x"), out="o")
    p = prepare(case, tmp_path, tmp_path / "work", {})
    monkeypatch.setattr(
        R, "run_process", _misbehaving(lambda cwd: ((cwd / "o").mkdir(), (0, "", "ckpt: note: ok\n"))[1])
    )
    assert execute(p, "process").problems == []


@pytest.mark.parametrize("how", ["left-running", "its-child-left", "stopped"])
def test_the_judge_sees_a_server_the_case_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A run that launches a server (its pid in the launch ledger, leading a process group of its own,
    the case's TMPDIR in its environment) and leaves it, or a process of its group, running is a
    problem, and the group is stopped; one that stops its server is not. The "server" is a real
    process (sleep, or a shell that leaves a sleep behind it), launched and recorded as
    ckpttools.engines.launch does."""
    from tests import case_runner as R
    from tests.corpus import execute, prepare

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("CKPT_LAUNCH_LEDGER", str(ledger))
    procs: list[subprocess.Popen[bytes]] = []

    def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, str]:
        cmd = ["sh", "-c", "sleep 60 & exit 0"] if how == "its-child-left" else ["sleep", "60"]
        srv = subprocess.Popen(cmd, env=env, start_new_session=True)
        procs.append(srv)
        with open(env["CKPT_LAUNCH_LEDGER"], "a") as f:
            f.write(json.dumps({"engine": "vllm", "pid": srv.pid, "time": 0.0, "argv": cmd}) + "\n")
        if how == "stopped":
            srv.terminate()
        if how != "left-running":
            srv.wait()
        return 2, "", "ckpt: error: the server was not ready\n"

    case = Case("judge-server", ["verify", "--launch"], 2)
    p = prepare(case, tmp_path, tmp_path / "work", {})
    monkeypatch.setattr(R, "run_process", run)
    try:
        o = execute(p, "process")
        assert procs and procs[0].wait(5) is not None  # ended by now, every way
    finally:
        for srv in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(srv.pid, signal.SIGKILL)
            srv.wait()
    if how == "stopped":
        assert o.problems == []
    elif how == "left-running":
        assert o.problems == [f"servers left running after the case: ['pid {procs[0].pid} (sleep 60)']"], o.problems
        assert procs[0].returncode == -signal.SIGKILL  # stopped by the judge
    else:  # the leader is gone, the sleep it started is still in its group
        assert len(o.problems) == 1 and o.problems[0].startswith("servers left running after the case: ['pid ")
        assert o.problems[0].endswith(" (sleep 60)']") and f"pid {procs[0].pid} " not in o.problems[0], o.problems


def test_a_case_past_its_time_is_stopped_in_process(bench: Bench, tmp_path: Path) -> None:
    """The in-process watchdog: a verify that waits on a server which sleeps 2 s is stopped at its
    0.5 s limit and reported as a hang (rc None), and the process is left as it was."""
    from tests.case_runner import run_inprocess

    (tmp_path / "p.jsonl").write_text('{"input_ids": [1, 2, 3]}\n')
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    cwd, environ = os.getcwd(), dict(os.environ)
    argv = ["verify", "--host", bench.subst["{srv}"] + "/sg-timeout", "--prompts", "p.jsonl", "--num-prompts", "1"]
    rc, _, se = run_inprocess(argv, tmp_path, env, 0.5)
    assert rc is None and "most recent call first" in se  # where it was stuck, for the failure message
    assert (os.getcwd(), dict(os.environ)) == (cwd, environ)
    rc, so, se = run_inprocess(["logs", "-"], tmp_path, env, 60.0)  # the next run: stdin empty, measured nothing
    assert rc == 3 and "<stdin>: 0 lines" in so and se.startswith("ckpt: error: "), se
