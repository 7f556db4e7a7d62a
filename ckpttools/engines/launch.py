"""Starting an SGLang or vLLM server with the right speculative flags, and always stopping it."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.engines.engine import engine_for, installed_version, parse_sglang_accept_lens
from ckpttools.errors import ServerError, opt

__all__ = [
    "LaunchSpec",
    "RunningServer",
    "build_command",
    "parse_sglang_accept_lens",
    "installed_version",
    "free_port",
]


#: the longest wait between two readiness polls of a launched server, in seconds; the first come after
#: 0.05 s, 0.1 s, 0.2 s...: a small server answers within a fraction of a second of its start, and a
#: poll a second later made every launch take at least a second
READY_POLL = 1.0


def _poll_delays() -> Iterator[float]:
    """The waits between a launched server's readiness polls: 0.05 s, doubled each time up to
    READY_POLL, then READY_POLL for as long as the wait lasts (a doubling counted in an exponent had
    overflowed a float after 1,024 polls, about 17 minutes into a long --ready-timeout)."""
    d = 0.05
    while True:
        yield d
        d = min(READY_POLL, d * 2)


#: prctl(2)'s option that names the signal a process gets when its parent ends (linux/prctl.h)
_PR_SET_PDEATHSIG = 1


def _ends_with_its_launcher() -> Callable[[], None] | None:
    """A ``preexec_fn`` under which a launched server gets SIGTERM when the process that launched it
    ends, however it ends: a SIGKILL of ckpt, the OOM killer, a closed terminal (Linux's parent-death
    signal, prctl(2) PR_SET_PDEATHSIG, kept across the exec). The server runs in a session of its own,
    so neither a Ctrl-C nor a signal to ckpt's process group reaches it; without this a server outlived
    a killed ckpt, holding its port and its GPU memory. SIGTERM, as :meth:`RunningServer.stop` sends
    first; the signal reaches the process exec'd, the server's leader, only: its other processes end
    as the engine ends them on SIGTERM, an ``--engine-python`` wrapper that runs the interpreter
    without exec'ing it keeps it from the signal, and the kernel drops the signal for a set-user-ID
    or set-group-ID interpreter (prctl(2)). None where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl, set_handler = libc.prctl, libc.signal
    except (OSError, AttributeError):
        return None
    set_handler.argtypes, set_handler.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
    parent = os.getpid()

    def preexec() -> None:  # in the child, between fork and exec
        # SIGTERM's default action first: until the exec the child keeps ckpt's handlers (Python's C
        # handler, which would only note a signal), and the exec keeps an ignored one ignored
        set_handler(int(signal.SIGTERM), None)
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the launcher ended before the line above took effect
            os._exit(1)

    return preexec


@dataclass
class _Launch:
    """One ``subprocess.Popen`` for the launcher thread to make, and who holds what it made: the caller,
    or, once the caller has given it up (``abandoned``), the launcher, which then stops it."""

    cmd: list[str]
    kw: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    proc: subprocess.Popen[bytes] | None = None
    error: BaseException | None = None
    abandoned: bool = False


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to a launched process's group (its own session: the group is the server's), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()  # the process itself, were it no group's leader
    proc.wait()


#: the launches waiting for the thread every server is forked from. The parent-death signal follows
#: the thread that forked the process, not the process (prctl(2): "the thread that created this
#: process"): a server forked from a short-lived thread, a ThreadPoolExecutor's say, would be stopped as
#: that thread ends. This one is a daemon thread of its own, which runs until the interpreter is
#: finalised (a concurrent.futures worker ends as the main thread returns, before the other threads
#: and the atexit handlers that may still use a server); made anew in a forked child
_LAUNCHES: tuple[queue.SimpleQueue[_Launch], threading.Thread] | None = None
_LAUNCHES_LOCK = threading.Lock()


def _launcher(jobs: queue.SimpleQueue[_Launch]) -> None:
    while True:
        job = jobs.get()
        with job.lock:
            if job.abandoned:  # its caller was interrupted before this thread took it: nothing to start
                job.done.set()
                continue
        proc = None
        try:
            proc = subprocess.Popen(job.cmd, **job.kw)
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
            job.error = e
        with job.lock:
            job.proc = proc
            abandoned = job.abandoned
        if abandoned and proc is not None:  # its caller was interrupted while this thread started it
            _kill(proc)
        job.done.set()


def _forget_launcher() -> None:
    global _LAUNCHES, _LAUNCHES_LOCK
    _LAUNCHES, _LAUNCHES_LOCK = None, threading.Lock()  # a lock held by another thread at the fork stays held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_launcher)


def _give_up(job: _Launch) -> None:
    """The caller's side of an interrupted launch: mark it given up, and stop what was started already."""
    with job.lock:
        job.abandoned = True
        proc = job.proc
    if proc is not None:  # started, and the interrupt came before the caller had it
        _kill(proc)


def _popen(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **kw)``, the child tied to this process's life where the OS allows it.
    Interrupted while it waits (a Ctrl-C, a signal handler's exception), it gives the launch up and
    raises at once: what the launcher thread starts after that it stops itself, and what it had
    started is stopped here; no server is left that no one holds."""
    global _LAUNCHES
    preexec = _ends_with_its_launcher()
    if preexec is None:
        return subprocess.Popen(cmd, **kw)
    with _LAUNCHES_LOCK:
        if _LAUNCHES is None or not _LAUNCHES[1].is_alive():
            jobs: queue.SimpleQueue[_Launch] = queue.SimpleQueue()
            thread = threading.Thread(target=_launcher, args=(jobs,), name="ckpt-launcher", daemon=True)
            thread.start()  # before it is named the launcher: a thread that could not start reads no queue
            _LAUNCHES = (jobs, thread)
        jobs, thread = _LAUNCHES
    job = _Launch(cmd, {**kw, "preexec_fn": preexec})
    try:
        jobs.put(job)  # in the try: an interrupt just after it gives up a launch already queued
        while not job.done.wait(1.0):
            if not thread.is_alive():  # cannot happen while the interpreter runs; never wait on it for good
                raise RuntimeError("ckpt's launcher thread has ended; the server was not started")
    except BaseException:
        while True:  # a second interrupt here would leave the launch to no one: the give-up is finished first
            try:
                _give_up(job)
                break
            except (KeyboardInterrupt, SystemExit):  # a second Ctrl-C, a handler's exit: raised below
                continue
        raise
    if job.error is not None:
        raise job.error
    assert job.proc is not None
    return job.proc


#: a terminal colour code (vLLM colours its records' prefixes when told to, even into a file)
_COLOUR = re.compile(rb"\x1b\[[0-9;]{0,16}m")
#: an exception's line in a server log: ``RuntimeError: ...`` at the start of a line, after a process
#: tag "(Worker pid=N) " or an ERROR record's prefix (vLLM's "(Worker pid=N) ERROR 12-02 12:47:59
#: [file.py:1063] RuntimeError: ..."); never inside a WARNING's text. Narrower than ckpt logs'
#: logs_formats.EXC_LINE (undotted names with their text only): with that pattern the death message
#: would also name a "torch.OutOfMemoryError: ..." line, which it now leaves to the log's tail it quotes
_ERROR_LINE = re.compile(rb"^(?:\([^)]*\) )?(?:ERROR [^\]]*\] )?([A-Z]\w*(?:Error|Exception): \S.*)$")


@dataclass
class LaunchSpec:
    """What to start. ``python`` is the interpreter that has the engine installed."""

    engine: str
    target: str
    drafter: str | None  # None: the plain target, e.g. a baseline without speculation
    port: int = 30000
    host: str = "127.0.0.1"
    tp: int = 1
    steps: int = 3
    topk: int = 1
    draft_tokens: int | None = None
    engine_args: list[str] = field(default_factory=list)
    python: str = sys.executable
    log_path: str | None = None
    ready_timeout: float = 900.0
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def build_command(s: LaunchSpec) -> list[str]:
    """The server command line for the spec (its engine object's launch argv)."""
    try:
        eng = engine_for(s.engine)
    except ValueError:
        raise ValueError(f"cannot launch engine {s.engine!r}") from None
    return eng.launch_argv(s)


def check_port(host: str, port: int) -> None:
    """Refuse, before anything starts, a port another process holds."""
    import errno
    import socket

    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
            raise ServerError(
                f"{host}:{port} {why}: the server could not listen there",
                hint=f"choose another port ({opt('port')}), or stop what holds it",
            ) from None


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ledger(engine: str, cmd: list[str], pid: int) -> None:
    """One JSON line per server launch in the file ``CKPT_LAUNCH_LEDGER`` names, where it is set
    (the test suite counts its server starts with it; a user can audit what was launched)."""
    path = os.environ.get("CKPT_LAUNCH_LEDGER")
    if not path:
        return
    from ckpttools.errors import CkptError
    from ckpttools.io.guard import append_line

    try:
        append_line(path, json.dumps({"engine": engine, "pid": pid, "time": time.time(), "argv": cmd}))
    except (OSError, CkptError):
        pass  # an audit file that cannot be written never stops a launch


class RunningServer:
    """A server process in its own session, logging to a file; a context manager.

    ``__exit__`` stops it by its process group (SIGTERM, then SIGKILL), on errors and on
    Ctrl-C alike; where ckpt ends without stopping it (a SIGKILL), the server gets SIGTERM
    from the kernel (Linux: :func:`_ends_with_its_launcher`).
    """

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.cmd = build_command(spec)
        self.log_path = Path(spec.log_path or f"ckpt-verify-{spec.engine}-{spec.port}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RunningServer:
        from ckpttools.io.guard import open_log

        log = open_log(self.log_path, [self.spec.target, self.spec.drafter])
        log.write(("$ " + " ".join(self.cmd) + "\n").encode())
        log.flush()
        try:
            self.proc = _popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.spec.env},
                start_new_session=True,
            )
        except (KeyboardInterrupt, SystemExit):
            raise  # given up while the launcher may still be starting it with this log: closed as it lets go
        except BaseException:
            log.close()  # the engine's interpreter missing, say
            raise
        log.close()
        _ledger(self.spec.engine, self.cmd, self.proc.pid)
        return self

    def log_tail(self, n: int = 25) -> str:
        """The log's last ``n`` lines (lines end at ``\n`` only: what the server printed inside a
        line, a prompt's U+2028 say, stays in it), read from its last 256 KiB."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, 2) - (256 << 10)))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(ln.removesuffix("\r") for ln in text.rstrip("\n").split("\n")[-n:])

    def first_error(self) -> str | None:
        """The first ``SomethingError: text`` line of the log's last 256 KiB (a worker's root cause,
        printed before the traces that follow it), its logging prefix dropped; None if there is none."""
        for ln in self.log_tail(4000).splitlines():
            m = _ERROR_LINE.match(_COLOUR.sub(b"", ln.encode()))
            if m:
                return m.group(1).decode()[:300]
        return None

    def wait_ready(self, client: Any) -> float:
        """Poll /health until 200; raise ServerError with the log's tail if it dies or times out.
        The polls come soon at first, then once a second (READY_POLL).

        ``client`` is a :class:`ckpttools.io.net.NetClient` (any other object: a fresh one is used)."""
        from ckpttools.io.fsutil import kill_point
        from ckpttools.io.net import NetClient, Wording

        net = client if isinstance(client, NetClient) else NetClient(retries=0)
        quiet = Wording(connect="{where}: not up yet", timeout="{where}: no answer yet")
        t0 = time.monotonic()
        url = self.spec.url + engine_for(self.spec.engine).health_path  # readiness, as the engine says it
        delays = _poll_delays()
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise ServerError(
                    f"the {self.spec.engine} server exited with code {self.proc.returncode} before it was ready; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}",
                    hint=f"read {self.log_path}; check the engine is installed for {self.spec.python}",
                )
            try:
                if (
                    net.request(
                        "GET", url, deadline=5.0, max_bytes=1 << 20, what="/health", wording=quiet, retries=0
                    ).status
                    == 200
                ):
                    kill_point("server-ready")  # the kill tests: ckpt killed with its server up
                    return time.monotonic() - t0
            except ServerError:
                pass
            if time.monotonic() - t0 > self.spec.ready_timeout:
                raise ServerError(
                    f"the {self.spec.engine} server was not ready after {self.spec.ready_timeout:.0f} s; last lines of "
                    f"{self.log_path}:\n{self.log_tail()}",
                    hint=f"raise {opt('ready_timeout')}, or read the log",
                )
            time.sleep(next(delays))

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace`` seconds; returns once the
        server and every process of its group (vLLM's engine core, SGLang's schedulers) are gone."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=grace)
            # the leader is gone; its group's other processes end after it (vLLM's engine core polls its parent)
            # (bounded: a zombie nobody reaps, as under a PID 1 that reaps none, keeps a group alive)
            for sig in (signal.SIGKILL, None):
                t0 = time.monotonic()
                while time.monotonic() - t0 < grace:
                    os.killpg(self.proc.pid, 0)  # ProcessLookupError once the group is empty
                    time.sleep(0.1)
                if sig is not None:
                    os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> RunningServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
