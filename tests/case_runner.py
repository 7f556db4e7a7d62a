"""How a corpus case's ``ckpt`` runs: in this process, through the CLI's ``main()``, or in a
process of its own (``python -m ckpttools``). tests/corpus.py:run_case judges both alike.

A case runs in this process unless it needs its own (:func:`static_reason`, :func:`dir_reason`):
an environment that a library reads once, at import (huggingface_hub: HF_*; any case ``env``
counts, to be safe); a Hub repo id (huggingface_hub's import-time HF_HOME/HF_HUB_OFFLINE); a
server mode that stalls; the demo (models and servers, minutes); a FIFO, socket or device among
its inputs (an open that blocks); a user's regular expression (backtracking in C that no signal
stops). ``Case.process`` asks for a process outright. When unsure: a process. Such a process is
forked from a zygote where 5 or more such cases share an environment (tests/zygote.py; the
corpus's run_corpus decides), else started afresh (:func:`run_process`).

In this process a case gets what a fresh ``python -m ckpttools`` gets: its own directory as
cwd, exactly the environment the subprocess would have, stdin empty (/dev/null), stdout and
stderr captured at the file descriptors (C libraries' output too) through streams with a fresh
interpreter's encoding and error handlers, Python's default warning filters, an uncaught
exception printed as Python prints it (exit 1), Python's own hooks for an exception that ends a
thread or cannot be raised (printed to its stderr), and the log handlers that write to the process's
stdout or stderr writing to its. Afterwards cwd, environment, streams, loggers and their handlers'
streams, warning filters, hooks, signal handlers and umask are put back as they were. It runs in the main
thread (cwd and fds are the process's; SIGALRM deadlines need it), one case at a time; a
watchdog interrupts it (SIGINT) past its time limit, and the case is then a hang.
"""

from __future__ import annotations

import faulthandler
import importlib
import io
import locale
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.fake_servers import HOSTILE

#: server modes (a ``{srv}/MODE`` argument) that answer slowly or never: their cases get a process
STALLING = (*HOSTILE, "timeout", "slow", "stall", "hang", "sleep")

#: variables that nothing reads at import: a zygote's child (tests/zygote.py) may take them from the case
#: as it starts (test_corpus.py::test_cases_with_variables_read_when_run_read_alike runs such cases both ways)
READ_WHEN_RUN = {
    "CKPT_FAKE_ENGINE": "read by tests/fake_engine's server, a process of its own that ckpt starts",
    "CKPT_API_KEY": "read as the command's options are parsed (click's envvar), and by measuring.serve when called",
    "TMPDIR": "read by tempfile.gettempdir() at its first call, which a case's process (or child) makes anew",
}

#: the CLI's options whose value is a path it writes (ckpttools/cli/commands.py, serve_cmds.py): never a Hub repo
_OUTPUT_FLAGS = frozenset({"-o", "--output", "--plot", "--log"})
#: a Hub repo id as the CLI reads one: ``org/name`` with an optional ``@revision``
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*(@.*)?")


def _arg_values(argv: Sequence[str]) -> Iterator[str]:
    """Every argument, and the value of each ``--flag=value``."""
    for a in argv:
        yield a
        if a.startswith("--") and "=" in a:
            yield a.split("=", 1)[1]


def static_reason(process: bool, argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why a case needs its own process, from what it says (None: it need not, so far)."""
    if process:
        return "asked: Case.process"
    if env:
        return f"environment: {', '.join(sorted(env))} (may be read at import)"
    if argv[:1] == ["demo"]:  # the whole story: models, servers, minutes (a --launch case's server is
        return "demo: it may run models and servers"  # stopped by its own cleanup when the watchdog stops it)
    if "--pattern" in argv:
        return "regex: a user's regular expression (backtracking in C is not interruptible)"
    for a in _arg_values(argv):
        if "{srv" in a:
            mode = a.split("}", 1)[-1].lstrip("/").split("/", 1)[0]
            if any(k in mode for k in STALLING):
                return f"stalling server: {mode}"
    return None


def dir_reason(argv: Sequence[str], root: Path, cwd: Path) -> str | None:
    """Why a case needs its own process, from its inputs once made under ``root`` (None: it need not)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            why = _blocking(Path(dirpath) / n)
            if why:
                return why
    outputs = {b for f, b in zip(argv, argv[1:]) if f in _OUTPUT_FLAGS}
    outputs |= {a.split("=", 1)[1] for a in argv if a.split("=", 1)[0] in _OUTPUT_FLAGS and "=" in a}
    for a in _arg_values(argv):
        if not a or a.startswith("-") or "://" in a:
            continue
        p = Path(a) if os.path.isabs(a) else cwd / a
        why = _blocking(p)
        if why:
            return why
        if _REPO_ID.fullmatch(a) and a not in outputs and not os.path.lexists(cwd / a.split("@", 1)[0]):
            # no such local path: the CLI asks the Hub, with a local org/ directory too (it looks for a
            # typo there after the Hub's answer)
            return f"hub: {a} names a repo (huggingface_hub reads HF_HOME, HF_HUB_OFFLINE at import)"
    if any(root.rglob("*.py")):  # -m puts the cwd first on sys.path: a jsonschema.py there is imported
        return "python file: -m puts the case's directory first on sys.path"
    return None


def _blocking(p: Path) -> str | None:
    try:
        mode = os.stat(p).st_mode  # links followed: a link to a FIFO blocks as the FIFO does
    except (OSError, ValueError):
        return None
    if stat.S_ISFIFO(mode):
        return f"fifo: {p.name} (opening it blocks)"
    if stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return f"device: {p.name} is a socket or device"
    return None


# ----------------------------------------------------------------------------- its own process
def run_process(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, str]:
    """``python -m ckpttools ARGV`` from ``cwd``: (exit code, or None when it ran out of time; stdout; stderr)."""
    try:
        r = subprocess.run(
            [sys.executable, "-m", "ckpttools", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        return None, as_text(e.stdout), as_text(e.stderr)
    return r.returncode, r.stdout, r.stderr


def run_zygote(
    zygote: Any, argv: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> tuple[int | None, str, str]:
    """``python -m ckpttools ARGV`` from ``cwd`` in a child of ``zygote`` (tests/zygote.py), under
    ``env`` (the zygote's, or one that differs from it in READ_WHEN_RUN only): as :func:`run_process`
    gives it."""
    rc, so, se = zygote.run(argv, cwd, timeout, env)
    return rc, as_text(so), as_text(se)


def as_text(b: bytes | str | None) -> str:
    """What subprocess's text mode makes of a child's bytes (the locale's encoding, universal newlines)."""
    if b is None:
        return ""
    s = b if isinstance(b, str) else b.decode(locale.getpreferredencoding(False))
    return s.replace("\r\n", "\n").replace("\r", "\n")


# ----------------------------------------------------------------------------- this process
class _Hang(BaseException):
    """Raised in the main thread by the watchdog (never caught by the CLI's ``except Exception``)."""


#: seconds between the watchdog's SIGINTs to a case past its time that has not stopped yet
_REFIRE = 0.5


_STREAMS: dict[str, tuple[str, str, str]] = {}
_streams_lock = threading.Lock()


def _child_streams(env: dict[str, str]) -> tuple[str, str, str]:
    """(encoding, stdout errors, stderr errors) of a fresh interpreter's std streams under ``env``."""
    key = repr(sorted((k, v) for k, v in env.items() if k.startswith(("PYTHON", "LC_", "LANG"))))
    with _streams_lock:
        if key not in _STREAMS:
            code = "import sys; print(sys.stdout.encoding, sys.stdout.errors, sys.stderr.errors)"
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            enc, oerr, eerr = out.stdout.split()
            _STREAMS[key] = (enc, oerr, eerr)
        return _STREAMS[key]


class _Routed:
    """sys.stdout/sys.stderr while a case runs: the case's threads write to its stream, the others
    (the test servers' request threads, the pool's) to where they wrote before (under ``lock``, so
    that the runner can move them back at the end)."""

    def __init__(self, case: Any, other: Any, mine: Any, lock: threading.Lock, fd: int) -> None:
        self._case, self._other, self._mine, self._lock = case, other, mine, lock
        #: 1 (stdout) or 2 (stderr)
        self.fd = fd

    def _target(self) -> Any:
        return self._case if self._mine() else self._other

    def write(self, s: str) -> int:
        if self._mine():
            return self._case.write(s)
        with self._lock:
            return self._other.write(s)

    def writelines(self, lines: Any) -> None:
        for ln in lines:
            self.write(ln)

    def flush(self) -> None:
        if self._mine():
            return self._case.flush()
        with self._lock:
            return self._other.flush()

    def retarget(self, other: Any) -> Any:
        """Send the other threads' writes to ``other`` (the caller holds the lock); the previous target."""
        old, self._other = self._other, other
        return old

    def isatty(self) -> bool:
        return self._target().isatty()

    def fileno(self) -> int:
        return self._target().fileno()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # .buffer, .encoding, .errors, ...
        return getattr(self._target(), name)


def _elsewhere(stream: Any, fd: int, saved: int) -> Any:
    """Where other threads' writes to ``stream`` go while ``fd`` is the case's: ``stream`` itself,
    or, when it writes to ``fd`` (pytest -s), a stream on ``saved``, the fd's saved copy."""
    try:
        direct = stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        direct = False
    if not direct:
        return stream
    enc = getattr(stream, "encoding", None) or "utf-8"
    raw = io.FileIO(saved, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding=enc, errors="backslashreplace", line_buffering=True, write_through=True)


#: Python's default warning filters (a fresh interpreter with no -W and no PYTHONWARNINGS)
_DEFAULT_FILTERS = [
    ("default", None, DeprecationWarning, "__main__", 0),
    ("ignore", None, DeprecationWarning, None, 0),
    ("ignore", None, PendingDeprecationWarning, None, 0),
    ("ignore", None, ImportWarning, None, 0),
    ("ignore", None, ResourceWarning, None, 0),
]

_CATCHABLE = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


def inprocess_possible() -> bool:
    """In-process runs need the main thread (cwd, fds and signals are the process's)."""
    return threading.current_thread() is threading.main_thread()


def run_inprocess(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float, *, entry: str = "ckpttools.cli.commands"
) -> tuple[int | None, str, str]:
    """``ckpt ARGV`` through ``entry``'s main (default ckpttools.cli.commands, the Click group; the
    console script's is ckpttools.cli.entry) in this process, as a fresh process would run it:
    (exit code, or None when it ran out of time; stdout; stderr)."""
    assert inprocess_possible(), "in-process cases run in the main thread"
    if "PYTHONWARNINGS" in env or any(k.startswith("PYTHONDEVMODE") for k in env):
        raise AssertionError("PYTHONWARNINGS/PYTHONDEVMODE change a fresh interpreter: run such cases in a process")
    enc, oerr, eerr = _child_streams(env)
    token = object()
    main_thread = threading.main_thread()

    def mine() -> bool:
        t = threading.current_thread()
        return t is main_thread or getattr(t, "_corpus_case", None) is token

    out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    devnull = os.open(os.devnull, os.O_RDONLY)
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved_std = (sys.stdin, sys.stdout, sys.stderr)
    saved_argv, saved_cwd, saved_env = list(sys.argv), os.getcwd(), dict(os.environ)
    saved_tempdir = tempfile.tempdir
    saved_umask = os.umask(0o022)
    os.umask(saved_umask)
    saved_signals = {s: signal.getsignal(s) for s in _CATCHABLE}
    saved_itimer = signal.getitimer(signal.ITIMER_REAL)
    loggers = _logger_state()
    start = threading.Thread.start
    saved_hooks = (sys.unraisablehook, threading.excepthook)

    started: list[threading.Thread] = []

    def start_marked(self: threading.Thread) -> None:
        if mine():
            self._corpus_case = token  # type: ignore[attr-defined]
            started.append(self)
        start(self)

    hung, running = threading.Event(), [True]

    def fire() -> None:
        if not running[0]:
            return
        if not hung.is_set():
            hung.set()
            faulthandler.dump_traceback(file=err_f, all_threads=True)  # where it was stuck, in its stderr
        signal.pthread_kill(main_thread.ident or 0, signal.SIGINT)

    done = threading.Event()

    def watch() -> None:
        # past the case's time, then again every _REFIRE s until it has stopped: Python swallows an
        # exception raised where it cannot propagate (a weakref callback, a __del__: "Exception ignored
        # in ..."), and a _Hang swallowed there would leave an endless case running for good (seen once
        # under load in test_a_case_past_its_time_is_stopped_in_process, whose case ends by itself)
        if done.wait(timeout):
            return
        while running[0]:
            fire()
            if done.wait(_REFIRE):
                return

    def on_sigint(_signum: int, frame: Any) -> None:
        if not running[0]:  # the watchdog fired as the case ended: nothing to stop
            return
        if frame is not None and frame.f_code is run_inprocess.__code__:
            return  # a _Hang came out of the case already: this runner is handling it
        if hung.is_set():
            raise _Hang()
        raise KeyboardInterrupt

    rc: int | None = None
    for s in (*saved_std[1:], sys.__stdout__, sys.__stderr__):
        if s is not None:
            s.flush()  # what is buffered for fds 1 and 2 goes there, not into the case's output
    case_out = case_err = None
    lock = threading.Lock()
    routed: list[_Routed] = []
    moved: list[tuple[logging.StreamHandler, Any]] = []
    watchdog = threading.Thread(target=watch, name="ckpt-case-watchdog", daemon=True)
    try:
        case_in = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=enc)
        case_out = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=enc, errors=oerr)
        case_err = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=enc, errors=eerr, line_buffering=True)
        routed = [
            _Routed(case_out, _elsewhere(saved_std[1], 1, saved_fds[1]), mine, lock, 1),
            _Routed(case_err, _elsewhere(saved_std[2], 2, saved_fds[2]), mine, lock, 2),
        ]
        moved = _follow_case(routed, saved_std)
        # the streams first, then the fds: from here other threads write where they wrote before (a
        # server thread's error print, made while fd 2 was the case's and sys.stderr not yet routed,
        # had landed in a case's stderr: tok-id-float-remap under pytest -s, 2026-12-04)
        sys.stdin = case_in
        sys.stdout, sys.stderr = routed
        os.dup2(devnull, 0)
        os.dup2(out_f.fileno(), 1)
        os.dup2(err_f.fileno(), 2)
        sys.argv = [str(Path(__file__).resolve().parents[1] / "ckpttools" / "__main__.py"), *argv]
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # read TMPDIR again: the case's (tests/corpus.py: case_tmp)
        os.chdir(cwd)
        threading.Thread.start = start_marked  # type: ignore[method-assign]
        # what a fresh interpreter does with an exception it cannot raise (in a finaliser, a weakref
        # callback) and with one that ends a thread: print it to stderr, where the case is judged
        # (pytest's own hooks would turn them into warnings of the test, out of the judge's sight)
        sys.unraisablehook, threading.excepthook = sys.__unraisablehook__, threading.__excepthook__
        signal.signal(signal.SIGINT, on_sigint)
        with warnings.catch_warnings():
            warnings.resetwarnings()  # a new filter version: each warning shows once per case, as in a fresh process
            warnings.filters[:] = _DEFAULT_FILTERS  # type: ignore[index]
            warnings.showwarning = _showwarning_to_stderr
            watchdog.start()
            rc = _call_main(argv, entry)
            _join_at_exit(started)
            running[0] = False
    except _Hang:
        rc = None
    finally:
        running[0] = False
        done.set()
        if watchdog.ident is not None:  # started
            watchdog.join()
        if hung.is_set():
            time.sleep(0.01)  # a SIGINT still pending is handled now, by on_sigint, which lets it be
        for s in (case_out, case_err):
            if s is not None:
                try:
                    s.flush()
                except Exception:  # an unencodable write already failed the case (a traceback)
                    pass
        threading.Thread.start = start  # type: ignore[method-assign]
        sys.unraisablehook, threading.excepthook = saved_hooks
        for h, stream in moved:
            h.setStream(stream)
        for s, h in saved_signals.items():
            if signal.getsignal(s) is not h and h is not None:
                signal.signal(s, h)
        signal.setitimer(signal.ITIMER_REAL, *saved_itimer)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        tempfile.tempdir = saved_tempdir
        os.umask(saved_umask)
        sys.argv = saved_argv
        with lock:  # the fds back first, then the streams (the order of the start, reversed)
            for fd, saved in zip((0, 1, 2), saved_fds):
                os.dup2(saved, fd)
        sys.stdin, sys.stdout, sys.stderr = saved_std
        with lock:  # no other thread writes through the saved fds while they are closed
            for r, orig in zip(routed, saved_std[1:]):
                r.retarget(orig).flush()
            for saved in saved_fds:
                os.close(saved)
        os.close(devnull)
        _restore_loggers(loggers)
    if hung.is_set() and rc is not None:  # it ended just as the watchdog fired
        rc = None
    out_f.seek(0)
    err_f.seek(0)
    so, se = as_text(out_f.read()), as_text(err_f.read())
    out_f.close()
    err_f.close()
    return rc, so, se


def _call_main(argv: list[str], entry: str = "ckpttools.cli.commands") -> int:
    """The exit status ``python -m ckpttools ARGV`` would have, its uncaught exceptions printed as
    Python prints them."""
    main = importlib.import_module(entry).main

    try:
        main(argv)
    except SystemExit as e:
        return _exit_status(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT  # Python ends by SIGINT after an uncaught KeyboardInterrupt
    except _Hang:
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        for s in (sys.stdout, sys.stderr):
            s.flush()
    return 0


def _follow_case(routed: list[_Routed], saved_std: tuple[Any, Any, Any]) -> list[tuple[logging.StreamHandler, Any]]:
    """Point the log handlers that write to this process's stdout or stderr at the case's, and
    return each with its stream, to be put back after the case. A library attaches such a handler
    to the ``sys.stderr`` of when it was imported (transformers, huggingface_hub): imported before
    the case, or in an earlier one, its lines went there, not to the case's stderr where a fresh
    process prints them (found by a reviewer: transformers' ``Unrecognized keys in rope_parameters``
    of a ``verify --engine torch`` run, 2026-12-07)."""
    which = {id(saved_std[1]): 1, id(sys.__stdout__): 1, id(saved_std[2]): 2, id(sys.__stderr__): 2}
    moved = []
    for lg in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for h in getattr(lg, "handlers", ()):  # a PlaceHolder has none
            if not isinstance(h, logging.StreamHandler) or isinstance(h, logging.FileHandler):
                continue
            stream = h.stream
            fd = stream.fd if isinstance(stream, _Routed) else which.get(id(stream))
            if fd in (1, 2) and not any(h is m for m, _ in moved):
                moved.append((h, stream))
                h.setStream(routed[fd - 1])
    return moved


def _join_at_exit(threads: list[threading.Thread]) -> None:
    """Wait, as Python does before it exits, for the non-daemon threads the case started (the
    watchdog still runs: one that never ends is a hang). concurrent.futures' workers are left,
    whatever their executor named them (``thread_name_prefix``): at exit Python tells them to stop
    (they end once their executor is gone). Known by the function they run, which a running thread
    still holds: a pool named ``ckpt-dg`` (engines/serverside/ckpt_swap.py) was waited on for good."""
    from concurrent.futures import thread as futures_thread

    for t in threads:
        pool_worker = getattr(t, "_target", None) is futures_thread._worker
        if not t.daemon and not pool_worker and t is not threading.current_thread():
            t.join()


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _showwarning_to_stderr(
    message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _logger_state() -> list[tuple[logging.Logger, int, list[logging.Handler], bool, bool]]:
    logging.getLogger("ckpttools")  # the CLI configures this one each run: put it back after
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    return [(lg, lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers]


def _restore_loggers(state: list[tuple[logging.Logger, int, list[logging.Handler], bool, bool]]) -> None:
    """Loggers that were there before the case, as they were (the CLI's note handler, level and
    propagation undone); loggers made during it stay as their import made them, as in a fresh process.
    Held as objects, not looked up by name: logging never replaces a Logger once made."""
    for lg, level, handlers, propagate, disabled in state:
        if lg.level != level:  # setLevel clears every logger's cache: ~90 loggers, each case, cost 8 s a corpus
            lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate, lg.disabled = propagate, disabled
