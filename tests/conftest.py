"""Shared fixtures: tiny real checkpoints built once per test session."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CKPT_SHARED", REPO.parent / "shared"))
REAL_CONFIGS = SHARED / "data" / "real-configs"


def real_configs_dir() -> Path:
    if not REAL_CONFIGS.is_dir():
        pytest.skip(f"real configs not found at {REAL_CONFIGS} (shared/ is laid beside the checkout)")
    return REAL_CONFIGS


def pytest_configure(config):
    """Every server any test launches (in this process or a ckpt subprocess) is one line in the
    launch ledger (ckpttools.engines.launch._ledger); the summary counts them."""
    timeline = os.environ.get("CKPT_TEST_TIMELINE")
    if timeline and not hasattr(config, "workerinput"):
        # the workers append to it after each test: a path they cannot write failed every test with an
        # INTERNALERROR per worker. Checked once, here; relative to where pytest runs (tests/run.sh makes
        # it absolute from where it was called)
        try:
            with open(timeline, "a"):
                pass
        except OSError as e:
            raise pytest.UsageError(
                f"CKPT_TEST_TIMELINE={timeline}: cannot append there ({e.strerror or e}); "
                "give a file in a directory that exists, or unset it"
            ) from None
    if "CKPT_TEST_TMP" not in os.environ and not hasattr(config, "workerinput"):
        _session_tmp(config)
    if "CKPT_LAUNCH_LEDGER" not in os.environ and not hasattr(config, "workerinput"):
        import tempfile

        fd, path = tempfile.mkstemp(prefix="ckpt-launches-", suffix=".jsonl")
        os.close(fd)
        os.environ["CKPT_LAUNCH_LEDGER"] = path
        config._ckpt_ledger = path  # the controller owns (and removes) it; xdist workers inherit the variable
    if "CKPT_TEST_NOTES" not in os.environ and not hasattr(config, "workerinput"):
        # lines a test leaves for the run's summary (the corpus totals), from whichever worker ran it
        import tempfile

        fd, path = tempfile.mkstemp(prefix="ckpt-notes-", suffix=".txt")
        os.close(fd)
        os.environ["CKPT_TEST_NOTES"] = config._ckpt_notes = path
    if "CKPT_VLLM_CACHE_ROOT" not in os.environ and not hasattr(config, "workerinput"):
        # one vLLM cache for every real vLLM server of the session, every worker's (tests/vllm_pool.py:
        # SERVER_ENV says what it saves); the controller removes it at the end
        import tempfile

        config._ckpt_vllm_cache = os.environ["CKPT_VLLM_CACHE_ROOT"] = tempfile.mkdtemp(prefix="ckpt-vllm-cache-")
    worker = getattr(config, "workerinput", {}).get("workerid", "")
    if worker.startswith("gw") and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        # vLLM's CPU build binds a server's threads to core 0 by default ("auto"); servers of two workers
        # at once would share that core while the other idles: each worker's servers get a core of their own
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(int(worker[2:]) % (os.cpu_count() or 1))
    if worker.startswith("gw"):
        # one thread per worker for torch (the probe) and what it starts: two workers on two cores
        # would otherwise run four threads that wait on each other
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def _session_tmp(config) -> None:
    """One temporary directory for the session (TMPDIR of this process, of the workers it starts and
    of every process a test starts), removed at its end (pytest_unconfigure). What the tests' engines
    leave in the temporary directory is then gone with the session: each real vLLM server start leaves
    a ``vllm_dist_*`` rendezvous file there (vllm/utils/network_utils.py:153-154, 0.32.0) and the TP-2
    run's inductor compiles a 155 MB precompiled header into ``torchinductor_<user>`` (torch's default
    cache: ``{gettempdir()}/torchinductor_{user}``): 948 such files and 2.4 GB of headers had piled up
    in the system's temporary directory here (2026-12-07). A fresh machine has no such cache, so no run is timed with one. pytest's
    own ``tmp_path`` directories stay where pytest keeps them (the last 3 runs': PYTEST_DEBUG_TEMPROOT)."""
    import tempfile

    system = tempfile.gettempdir()
    if "PYTEST_DEBUG_TEMPROOT" not in os.environ:
        os.environ["PYTEST_DEBUG_TEMPROOT"] = config._ckpt_temproot = system
    root = tempfile.mkdtemp(prefix="ckpt-t-")  # short: AF_UNIX paths (vLLM's ipc:// sockets) go under it
    # the system's mode (1777, as a rule), not mkdtemp's 0700: tests/test_plan_checks.py runs ckpt as another
    # user on inputs made in the temporary directory, as a user may
    os.chmod(root, stat.S_IMODE(os.stat(system).st_mode))
    config._ckpt_tmp_was = os.environ.get("TMPDIR")
    os.environ["CKPT_TEST_TMP"] = os.environ["TMPDIR"] = config._ckpt_tmp = root
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """CKPT_TEST_TIMELINE=FILE: one JSON line per test (worker, start, stop, node id, and the CPU seconds
    the worker and the children it waited for spent on it), appended by each worker, to see what the
    workers ran side by side and what costs CPU (a 2-core run is CPU-bound)."""
    path = os.environ.get("CKPT_TEST_TIMELINE")
    if not path:
        yield
        return
    import resource
    import time

    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    t0, c0 = time.time(), cpu()
    yield
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = {"worker": worker, "start": t0, "stop": time.time(), "cpu": round(cpu() - c0, 3), "test": item.nodeid}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def note_for_summary(line: str) -> None:
    """A line for the run's summary, printed after the tests by the controller (pytest_terminal_summary)."""
    path = os.environ.get("CKPT_TEST_NOTES")
    if path:
        with open(path, "a") as f:
            f.write(line.replace("\n", " ") + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    notes = getattr(config, "_ckpt_notes", None)
    if notes is not None:
        try:
            for line in Path(notes).read_text().splitlines():
                terminalreporter.write_line(line)
        finally:
            os.unlink(notes)
    path = getattr(config, "_ckpt_ledger", None)
    if path is None:
        return
    try:
        lines = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    finally:
        os.unlink(path)
    # by the venv's own path: both venvs' interpreters link to one base interpreter
    real_py = os.path.abspath(os.environ.get("CKPT_VLLM_PYTHON") or REPO / ".venv-vllm" / "bin" / "python")
    real = sum(os.path.abspath(ln["argv"][0]) == real_py for ln in lines)
    terminalreporter.write_line(
        f"engine servers started: {real} real vLLM, {len(lines) - real} stand-ins (tests/fake_engine and the like)"
    )


#: the architectures of every real vLLM server the tests start (tests/vllm_pool.py's families, the
#: gpt-oss target), the pool's first family first
VLLM_ARCHS = (
    "DeepseekV3ForCausalLM",
    "Eagle3DeepseekV2ForCausalLM",
    "LlamaForCausalLM",
    "Eagle3LlamaForCausalLM",
    "Qwen3ForCausalLM",
    "Eagle3Qwen3ForCausalLM",
    "GptOssForCausalLM",
)


def pytest_collection_finish(session):
    """Python's collector told to leave what the collection made alone, and to run less often; where this
    session runs real-vLLM tests: tests/vllm_warm.py, beside the first tests (started by one process: the
    first worker, or pytest without workers)."""
    import gc

    # A worker holds millions of objects once collected (torch and transformers, 3,200 test items, 1,641
    # corpus cases), and each full collection walked them all: the three workers of `--quick` spent 16.8 s
    # of CPU collecting, 10.9 s with the collection's objects frozen (moved out of the collector's view,
    # never freed, as the session keeps them anyway), 5.5 s with gen0 collections at 100,000 allocations
    # instead of 700 and older generations a fifth as often (2026-12-07; gc.callbacks timing, in a run
    # that is CPU-bound on 2 cores). Cycles are still freed, later; gc.collect() works as before.
    gc.freeze()
    gc.set_threshold(100_000, 50, 50)
    config = session.config
    if getattr(config, "workerinput", {}).get("workerid", "gw0") != "gw0" or config.option.collectonly:
        return
    if any(i.get_closest_marker("vllm") is not None for i in session.items):
        config._ckpt_vllm_warm = _start_vllm_warm()


def _start_vllm_warm() -> subprocess.Popen | None:
    """tests/vllm_warm.py into the session's vLLM cache: each architecture's class facts found once, in
    one process, instead of once per architecture by the first server to load it, in a subprocess of
    its own (about 19 s each here)."""
    from tests.vllm_pool import VLLM_PY

    cache = os.environ.get("CKPT_VLLM_CACHE_ROOT")
    if cache is None or not os.path.exists(VLLM_PY):
        return None
    env = {**os.environ, "VLLM_CACHE_ROOT": cache, "OMP_NUM_THREADS": "1"}
    with open(os.path.join(cache, "warm.log"), "wb") as log:  # the process writes to its own copy
        return subprocess.Popen(
            [VLLM_PY, str(REPO / "tests" / "vllm_warm.py"), *VLLM_ARCHS], stdout=log, stderr=log, env=env
        )


def pytest_unconfigure(config):
    import shutil

    warm = getattr(config, "_ckpt_vllm_warm", None)
    if warm is not None and warm.poll() is None:
        warm.kill()
        warm.wait()
    path = getattr(config, "_ckpt_vllm_cache", None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop("CKPT_VLLM_CACHE_ROOT", None)
    tmp = getattr(config, "_ckpt_tmp", None)
    if tmp is not None:
        import tempfile

        shutil.rmtree(tmp, ignore_errors=True)
        os.environ.pop("CKPT_TEST_TMP", None)
        if getattr(config, "_ckpt_temproot", None) is not None:
            os.environ.pop("PYTEST_DEBUG_TEMPROOT", None)
        was = getattr(config, "_ckpt_tmp_was", None)
        if was is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = was
        tempfile.tempdir = None


#: the order the shared vLLM servers' tests run in, family by family, so that each server starts once
#: and at most tests/vllm_pool.py's MAX_ALIVE run at a time (llama last: test_vllm_swap.py runs on it next)
POOL_FAMILIES = ("mla", "qwen3", "two-layer", "eagle31", "llama-extra-tensor", "llama")


def _pool_order(items: list) -> None:
    """Within each module, the tests marked pool_family take the slots those tests held, sorted by
    family (stable): a module's other tests keep their places, and no test moves to another module."""
    by_module: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        if item.get_closest_marker("pool_family") is not None:
            by_module.setdefault(item.nodeid.split("::")[0], []).append(i)
    for slots in by_module.values():
        chosen = sorted(
            (items[i] for i in slots),
            key=lambda it: POOL_FAMILIES.index(it.get_closest_marker("pool_family").args[0]),
        )
        for i, item in zip(slots, chosen):
            items[i] = item


def _launching_first(items: list) -> None:
    """The real-vLLM tests of no group (each starts servers of its own: 50-150 s here) ahead of the
    other tests of no group, in their own order. pytest-xdist's loadgroup hands out the groups first,
    the largest first (the corpus, then the shared servers' tests), then the other tests in this order,
    each to the worker that runs out of work first: started last, these long tests ran one after another
    on one worker at the end while the other had nothing left (a run of 2026-12-03: 200 s idle)."""
    launching = [
        i for i in items if i.get_closest_marker("vllm") is not None and i.get_closest_marker("xdist_group") is None
    ]
    if launching:
        chosen = set(map(id, launching))
        items[:] = launching + [i for i in items if id(i) not in chosen]


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture: such tests share one worker, which makes the
    fixture once (spread over three workers, each made its own: test_wheel's wheel, test_hub's repos)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        defs and defs[-1].scope == "module" for defs in (info.name2fixturedefs.get(n) for n in info.names_closure)
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group markers added here
def pytest_collection_modifyitems(config, items):
    _pool_order(items)
    # under pytest-xdist (tests/run.sh: -n 3 --dist loadgroup) the tests on the shared vLLM servers run
    # in one worker, which starts each server once; the corpus too (its cases share one module fixture)
    for item in items:
        if "vllm_pool" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("vllm-pool"))
        elif "readme_demo" in getattr(item, "fixturenames", ()):  # one demo run, read by two tests
            item.add_marker(pytest.mark.xdist_group("vllm-demo"))
        elif item.module.__name__.endswith("test_corpus"):
            item.add_marker(pytest.mark.xdist_group("corpus"))
        elif "zygote" in getattr(item, "fixturenames", ()):  # a module's zygote (tests/zygote.py), started once
            item.add_marker(pytest.mark.xdist_group(f"zygote-{item.module.__name__}"))
        elif item.get_closest_marker("xdist_group") is None and _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"module-{item.module.__name__}"))
    _launching_first(items)
    if os.environ.get("CKPT_GPU_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="GPU test: set CKPT_GPU_TESTS=1 on a machine with a GPU and the SGLang bundle")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class Scratch:
    """Fresh directories for a property test's examples, under one root: a plain mkdir each.
    ``tmp_path_factory.mktemp`` lists the worker's whole base directory to number every one it
    makes, and all the directories made before stay there: 1,500 examples spent 3-4 s of CPU in
    that listing, and every later ``tmp_path`` of the worker listed their directories again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._n = 0

    def fresh(self) -> Path:
        self._n += 1
        d = self.root / str(self._n)
        d.mkdir()
        return d


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Scratch:
    """A :class:`Scratch` for this module's property tests."""
    return Scratch(tmp_path_factory.mktemp("examples"))


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    """One tiny checkpoint of each kind, built once."""
    from ckpttools.demo.tiny import DRAFTER_FLAVORS, build_drafter, build_target

    root = tmp_path_factory.mktemp("ckpts")
    out = {f: build_drafter(root / f"drafter-{f}", f) for f in DRAFTER_FLAVORS}
    out["target"] = build_target(root / "target")
    out["sharded"] = build_drafter(root / "drafter-sharded", "sglang", max_shard_size=40_000, embed_tokens=True)
    return out


@pytest.fixture(scope="session")
def vllm_pool(tmp_path_factory):
    """The session's shared vLLM servers (tests/vllm_pool.py), started on first use."""
    from tests.vllm_pool import VLLM_PY, VllmPool

    pool = VllmPool(VLLM_PY, tmp_path_factory.mktemp("vllm-pool"))
    yield pool
    pool.close()


def run_ckpt(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real `ckpt` entry point in a fresh process."""
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "ckpttools", *args], capture_output=True, text=True, env=e, cwd=cwd)


def load_json(text: str):
    return json.loads(text)
