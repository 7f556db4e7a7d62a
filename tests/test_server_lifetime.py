"""A server ckpt launched ends with ckpt, however ckpt ends: here by SIGKILL (the OOM killer, a CI job's
time limit, ``kill -9``), which no handler of ckpt's sees. Each command that launches a server runs as
users run it, ``python -m ckpttools`` in a process of its own, killed at two steps: while it waits on a
server that never gets ready (``sleep``, exec'd where the engine's server would start), and with its
server up and answering (a fake engine, tests/fake_engine; ``CKPT_TEST_KILL_AT=server-ready`` makes ckpt
kill itself as the server first answers /health). The launch ledger (CKPT_LAUNCH_LEDGER) names the
server's pid. Before ckpttools.engines.launch set the parent-death signal, the server ran on after ckpt,
in its own session, for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ckpttools.demo.tiny import build_known_pair

from .procs import ledger_pids, proc_fields

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")

REPO = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by whoever adopted it, does not)."""
    fields = proc_fields(pid)
    return fields is not None and fields[0] != b"Z"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    w = tmp_path_factory.mktemp("lifetime")
    t, d = build_known_pair(w / "pair")
    (w / "t").symlink_to(t)
    (w / "d").symlink_to(d)
    dist = w / "site" / "sglang-0.5.17.dist-info"  # the release ckpt reads from --engine-python before it launches
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17\n")
    path = f"{REPO / 'tests' / 'fake_engine'}:{w / 'site'}"
    for name, server in (("fakepy", ""), ("sleepy", 'case "$*" in *launch_server*) exec sleep 300 ;; esac\n')):
        (w / name).write_text(f'#!/bin/sh\n{server}PYTHONPATH="{path}" exec "{sys.executable}" "$@"\n')
        (w / name).chmod(0o755)
    (w / "ids.jsonl").write_text('{"input_ids": [5, 6, 7]}\n{"input_ids": [8, 9]}\n')
    return w


def _argv(cmd: str, w: Path, py: str) -> list[str]:
    t, d = w / "t", w / "d"
    common = ["--engine", "sglang", "--target", str(t), "--engine-python", str(w / py)]
    measure = ["--prompts", str(w / "ids.jsonl"), "--num-prompts", "2", "--ready-timeout", "120"]
    if cmd == "verify":
        return ["verify", "--launch", *common, "--drafter", str(d), *measure]
    if cmd == "verify-two-drafters":  # one server, the drafters swapped in (measuring/compare.py)
        return ["verify", "--launch", *common, str(d), str(d), *measure]
    if cmd == "sweep":
        return ["verify", "--launch", *common, "--drafter", str(d), *measure, "--sweep", "steps=1,2"]
    return ["serve", *common, "--drafter", str(d), "--swap-root", str(d.resolve().parent)]


@pytest.mark.parametrize("cmd", ["verify", "verify-two-drafters", "sweep", "serve"])
@pytest.mark.parametrize("step", ["waiting", "server-ready"])
def test_a_server_ckpt_launched_ends_when_ckpt_is_killed(work: Path, tmp_path: Path, cmd: str, step: str) -> None:
    ledger = tmp_path / "ledger.jsonl"
    env = {**os.environ, "CKPT_LAUNCH_LEDGER": str(ledger), "CKPT_API_KEY": "k" * 32, "CKPT_FAKE_ENGINE": "honest"}
    if step == "server-ready":
        env["CKPT_TEST_KILL_AT"] = step
    py = "sleepy" if step == "waiting" else "fakepy"
    argv = [sys.executable, "-m", "ckpttools", *_argv(cmd, work, py), "--log", str(tmp_path / "server.log")]
    err = tmp_path / "stderr"
    with open(err, "wb") as e:
        ckpt = subprocess.Popen(argv, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=e, stderr=e)
    pids: list[int] = []
    try:
        t0 = time.monotonic()
        while not pids and time.monotonic() - t0 < 60:
            time.sleep(0.02)
            pids = ledger_pids(ledger)
            if ckpt.poll() is not None and not pids:
                break
        assert pids, f"no server was launched (exit {ckpt.poll()}): {err.read_text()[-2000:]}"
        if step == "waiting":
            assert _alive(pids[0]) and ckpt.poll() is None  # ckpt waits on a server that runs
            ckpt.send_signal(signal.SIGKILL)
        assert ckpt.wait(30) == -signal.SIGKILL, err.read_text()[-2000:]  # killed: by this test, or by itself
        t0 = time.monotonic()
        while _alive(pids[0]) and time.monotonic() - t0 < 10:
            time.sleep(0.02)
        assert not _alive(pids[0]), f"the server (pid {pids[0]}) still runs 10 s after ckpt was killed"
    finally:
        if ckpt.poll() is None:
            ckpt.kill()
            ckpt.wait()
        for pid in pids:
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)  # the server leads a session (and group) of its own
        session = os.environ.get("CKPT_LAUNCH_LEDGER")  # counted with the run's other launches
        if session and ledger.exists():
            with open(session, "a") as f:
                f.write(ledger.read_text())


def test_a_server_started_from_a_thread_outlives_the_thread(work: Path, tmp_path: Path) -> None:
    """The parent-death signal follows the thread that forked the server (prctl(2)): a server a library
    user starts from a pool's thread runs on after that thread ends, until stopped (every server is
    forked from one thread that lives as long as the process: ckpttools.engines.launch._popen)."""
    from concurrent.futures import ThreadPoolExecutor

    from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port

    spec = LaunchSpec("sglang", str(work / "t"), str(work / "d"), port=free_port(), python=str(work / "sleepy"))
    spec.log_path = str(tmp_path / "server.log")
    with ThreadPoolExecutor(1) as pool:  # its thread ends as the block does
        srv = pool.submit(lambda: RunningServer(spec).start()).result()
    assert srv.proc is not None
    try:
        time.sleep(0.5)
        assert _alive(srv.proc.pid) and srv.proc.poll() is None
    finally:
        srv.stop(grace=5)
    assert not _alive(srv.proc.pid)


AFTER_MAIN = """
import atexit, sys, threading, time
from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port

def spec():
    return LaunchSpec("sglang", sys.argv[1], sys.argv[2], port=free_port(), python=sys.argv[3], log_path=sys.argv[4])

def at_exit():  # a launch from an atexit handler, after every thread has ended
    srv = RunningServer(spec()).start()
    time.sleep(0.3)
    print("at exit:", srv.proc.poll(), flush=True)
    srv.stop(grace=5)

def later(srv):  # a non-daemon thread still using the server after the main thread has returned
    time.sleep(0.5)
    print("after main:", srv.proc.poll(), flush=True)
    srv.stop(grace=5)

atexit.register(at_exit)
threading.Thread(target=later, args=(RunningServer(spec()).start(),)).start()
"""


def test_a_server_runs_on_after_the_main_thread_returns_and_starts_from_atexit(work: Path, tmp_path: Path) -> None:
    """A library caller's server, started in the main thread and used by another thread after the main
    thread returned, runs on until stopped; a server started by an atexit handler starts and runs (the
    launcher is a daemon thread: a concurrent.futures worker ended as the main thread returned, which
    stopped the first at once and refused the second)."""
    args = [str(work / "t"), str(work / "d"), str(work / "sleepy"), str(tmp_path / "server.log")]
    r = subprocess.run([sys.executable, "-c", AFTER_MAIN, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.splitlines() == ["after main: None", "at exit: None"], (r.stdout, r.stderr)


def test_a_launch_interrupted_while_it_waits_leaves_no_server(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C (here a KeyboardInterrupt raised by a SIGALRM handler) while the caller waits on the
    launcher thread: the caller raises at once and gives the launch up, and the launcher, which goes
    on with it, stops the server it started; none is left running with no one holding it. The signal
    is sent to the main thread from inside the launch, and the launch makes its process only once the
    caller has raised: the interrupt lands while the launch is under way."""
    from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port

    real, made, gave_up = subprocess.Popen, [], threading.Event()
    sleepy = str(work / "sleepy")

    def slow(*a: Any, **kw: Any) -> subprocess.Popen[bytes]:
        if a and a[0] and a[0][0] == sleepy:  # this test's launch only
            # to the main thread, which waits on the launch, until it has raised: a signal that lands just
            # before a lock's wait blocks does not interrupt it (CPython runs the handler once it wakes)
            t0 = time.monotonic()
            while not gave_up.wait(0.05) and time.monotonic() - t0 < 30:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)
            made.append(real(*a, **kw))
            return made[-1]
        return real(*a, **kw)

    raised: list[bool] = []

    def interrupt(_signum: int, _frame: object) -> None:
        if not raised:  # once: the launch may send another before it sees the caller has raised
            raised.append(True)
            raise KeyboardInterrupt

    spec = LaunchSpec("sglang", str(work / "t"), str(work / "d"), port=free_port(), python=sleepy)
    spec.log_path = str(tmp_path / "server.log")
    monkeypatch.setattr(subprocess, "Popen", slow)
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            RunningServer(spec).start()
        assert not made  # raised at once, before the launch had made its process
        gave_up.set()
        while not (made and made[0].poll() is not None) and time.monotonic() - t0 < 10:
            time.sleep(0.02)
    finally:
        gave_up.set()
        signal.signal(signal.SIGALRM, old)
        monkeypatch.undo()
        for p in made:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert len(made) == 1 and made[0].returncode == -signal.SIGKILL  # stopped by the launcher


def test_a_launch_given_up_before_the_launcher_takes_it_starts_nothing(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the launcher is busy with another thread's launch, the main thread's launch waits in its
    queue; interrupted there, the caller raises, and the launcher, when it comes to it, starts nothing:
    the launch after it (which the launcher takes only once past the given-up one) is the second process
    made, not the third."""
    from ckpttools.engines import launch
    from ckpttools.engines.launch import LaunchSpec, RunningServer, free_port

    real, made, release, holding = subprocess.Popen, [], threading.Event(), threading.Event()
    sleepy = str(work / "sleepy")

    def held(*a: Any, **kw: Any) -> subprocess.Popen[bytes]:
        if a and a[0] and a[0][0] == sleepy:
            if not holding.is_set():
                holding.set()
                release.wait(30)  # the first launch holds the launcher
            made.append(real(*a, **kw))
            return made[-1]
        return real(*a, **kw)

    raised: list[bool] = []

    def interrupt(_signum: int, _frame: object) -> None:
        if not raised:
            raised.append(True)
            raise KeyboardInterrupt

    def spec(name: str) -> LaunchSpec:
        return LaunchSpec("sglang", str(work / "t"), str(work / "d"), port=free_port(), python=sleepy,
                          log_path=str(tmp_path / f"{name}.log"))  # fmt: skip

    def interrupt_once_queued() -> None:  # the main thread's launch is in the queue, the launcher busy
        t0 = time.monotonic()
        while not raised and time.monotonic() - t0 < 30:
            if launch._LAUNCHES is not None and launch._LAUNCHES[0].qsize() > 0:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)
            time.sleep(0.02)

    monkeypatch.setattr(subprocess, "Popen", held)
    old = signal.signal(signal.SIGALRM, interrupt)
    servers: list[RunningServer] = []
    try:
        first = threading.Thread(target=lambda: servers.append(RunningServer(spec("first")).start()))
        first.start()
        assert holding.wait(30)  # the launcher is in the first launch
        sender = threading.Thread(target=interrupt_once_queued)
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            RunningServer(spec("given-up")).start()
        sender.join()
        release.set()
        first.join(30)
        servers.append(RunningServer(spec("after")).start())
        assert len(made) == 2 and all(p.poll() is None for p in made)  # the given-up one never made
        assert [s.proc for s in servers] == made
    finally:
        release.set()
        signal.signal(signal.SIGALRM, old)
        monkeypatch.undo()
        for s in servers:
            s.stop(grace=5)
        for p in made:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
