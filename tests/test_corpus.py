"""The hostile-input corpus (tests/corpus.py), run as users run ckpt: subprocesses, relative
paths, from the case's own directory. One parametrized test per case, plus the totals."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from tests.corpus import Outcome, all_cases, build_base, run_case
from tests.corpus_net import hub_repos
from tests.fake_servers import MisbehavingServer
from tests.local_hub import LocalHub

CASES = all_cases()
NAMES = [c.name for c in CASES]


def _selected(request: pytest.FixtureRequest) -> set[str]:
    """The case names this session runs (all of them unless -k or node ids narrowed it)."""
    here = [i for i in request.session.items if i.module is request.module]
    if any(i.name == "test_totals" for i in here):  # the totals need every case
        return set(NAMES)
    return {i.callspec.params["name"] for i in here if getattr(i, "originalname", "") == "test_case"}


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory) -> dict[str, Outcome]:
    wanted = _selected(request)
    base = tmp_path_factory.mktemp("corpus-base")
    build_base(base)
    work = tmp_path_factory.mktemp("corpus-work")
    with MisbehavingServer() as srv, LocalHub(hub_repos(base)) as hub:
        subst = {"{srv}": srv.url, "{srvhostport}": srv.url.removeprefix("http://"), "{hub}": hub.url}
        home = str(tmp_path_factory.mktemp("hub-home"))
        env = lambda c: {k: v.replace("{hub}", hub.url).replace("{hubhome}", home) for k, v in c.env.items()}  # noqa: E731
        cases = [replace(c, env=env(c)) for c in CASES if c.name in wanted]
        with ThreadPoolExecutor(max_workers=4) as pool:
            res = list(pool.map(lambda c: run_case(c, base, work, subst), cases))
    return {o.case.name: o for o in res}


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
        "bad stderr": count("stderr is not"),
        "slowest case s": round(max(o.seconds for o in res), 2),
    }
    print("\ncorpus totals:", totals)
    assert len(res) >= 200
    assert totals["clean"] == totals["cases"]
