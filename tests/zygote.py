"""A process of its own for a corpus case, forked from one that has imported what ``ckpt`` imports.

Some corpus cases need a process of their own (tests/case_runner.py says why: huggingface_hub
reads its HF_* variables once, at import; a stalling server, a FIFO or a regex blocks in ways only
a process's end stops), and each paid a fresh interpreter and its imports (0.3-0.5 s of CPU a
case). Where 5 or more of them share one environment, a zygote is started once for it, with exactly
that environment: it imports what :data:`PRELOAD` names (the CLI, the commands' modules,
huggingface_hub), as a fresh process does under it, then forks a child per case (and a case whose
environment differs from it only in variables nothing reads at import, case_runner.READ_WHEN_RUN,
runs in a child that sets them as it starts). The child is a process of its own, as
``python -m ckpttools ARGV`` from the case's directory is: its cwd, ``sys.argv`` and ``sys.path[0]``
as ``-m`` sets them, stdin /dev/null, stdout and stderr to files, killed at its time limit, and it
ends as an interpreter ends (atexit, threads joined, streams flushed); its exit status is reported
as subprocess reports one. What it does not share with a fresh process: the modules are imported
already. test_corpus.py::test_cases_run_by_a_zygote_read_alike runs a sample both ways.

The zygote is started with the case's whole environment, so what the interpreter reads as it starts
(PYTHON*: the streams' encoding and buffering, the warning filters) is read as a fresh process reads
it, and the children inherit it. Not used (tests/corpus.py: zygote_able, _zygote_dir_ok) where a
relative path is in PYTHONPATH (looked up from the cwd at each import), or where the case's
directory holds a ``.py`` file (``-m`` puts the cwd first on ``sys.path``: such a file could stand
in for a module the zygote imported already).

tests/test_kill.py runs its commands in a zygote's children too: a child killed at a step is a
process killed there, and the next run a process of its own.

tests/test_public_api.py runs its random import orders as ``python -c`` children (the request's
``code``) of a zygote that imported torch and transformers only, not ckpttools: each order starts
with no ckpttools module imported, as a fresh interpreter does, and pays no torch import (4-5 s).

Protocol, one line each: the client writes ``{"id", "argv", "cwd", "out", "err", "env", "code"}`` as JSON to the
zygote's stdin; it answers ``started ID PID`` and, once that child has ended, ``exited ID CODE``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

#: what a zygote imports before its first fork: the CLI, the commands' modules and what they import
#: (none imports torch), huggingface_hub (the corpus's zygotes, test_kill's)
PRELOAD = (
    "numpy",
    "ml_dtypes",
    "jsonschema",
    "safetensors.numpy",
    "httpx",
    "huggingface_hub",
    "huggingface_hub.file_download",
    "huggingface_hub.hf_api",
    "huggingface_hub.errors",
    "ckpttools.cli.commands",
    "ckpttools.io.hub",
    "ckpttools.io.net",
    "ckpttools.ops.inspect",
    "ckpttools.ops.validate",
    "ckpttools.ops.export",
    "ckpttools.ops.remap",
    "ckpttools.ops.fix",
    "ckpttools.vocab.diff",
    "ckpttools.measuring.verify",
    "ckpttools.measuring.compare",
    "ckpttools.measuring.logs",
    "ckpttools.measuring.serve",
    "ckpttools.engines.launch",
    "ckpttools.engines.swap",
)

#: torch, transformers and the modules of theirs the torch engine loads a Llama-shaped tiny model with
#: (ckpttools.measuring.probe): 4-5 s of imports a process (tests/test_public_api.py's orders)
TORCH = (
    "numpy",
    "torch",
    "transformers",
    "transformers.cache_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.llama.configuration_llama",
    "transformers.models.llama.modeling_llama",
)


# ----------------------------------------------------------------------------- the zygote's side
def _serve(preload: list[str]) -> None:
    import gc
    import importlib
    import selectors

    # as every command does before huggingface_hub is imported (ckpttools.cli.commands._notes_to_stderr,
    # ckpttools.cli.entry._notes_to_stderr): its root logger reads the variable at import
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    for m in preload:
        importlib.import_module(m)
    # as a forking server does: what is imported already is left out of the children's collections,
    # their last one at exit included (1.2 s against 0.4 s for a child of a zygote holding torch)
    gc.freeze()
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, None)
    pidfds: dict[int, tuple[str, int]] = {}
    buf = b""
    os.write(1, b"ready\n")
    while True:
        for key, _ in sel.select():
            if key.data is None:
                chunk = os.read(0, 1 << 16)
                if not chunk:  # the client has gone: so do its children
                    for _, pid in pidfds.values():
                        os.kill(pid, 9)
                    os._exit(0)
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    req = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        sel.close()
                        for fd in pidfds:
                            os.close(fd)
                        _child(req)  # returns only by SystemExit or an exception: the interpreter's end
                    fd = os.pidfd_open(pid)
                    pidfds[fd] = (req["id"], pid)
                    sel.register(fd, selectors.EVENT_READ, fd)
                    os.write(1, f"started {req['id']} {pid}\n".encode())
            else:
                rid, pid = pidfds.pop(key.data)
                sel.unregister(key.data)
                os.close(key.data)
                _, status = os.waitpid(pid, 0)
                os.write(1, f"exited {rid} {os.waitstatus_to_exitcode(status)}\n".encode())


def _child(req: dict[str, Any]) -> None:
    """Become ``python -m ckpttools ARGV`` (or ``python -c CODE``) run from ``cwd``; never returns
    normally."""
    import runpy

    fds = [os.open(os.devnull, os.O_RDONLY)]  # first: whatever fails below is said in the case's stderr
    fds += [os.open(req[k], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for k in ("out", "err")]
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
        os.close(fd)
    if req["env"] is not None:  # it differs from the zygote's in variables read when a command runs only
        os.environ.clear()
        os.environ.update(req["env"])
        if "tempfile" in sys.modules:  # TMPDIR is read again at the first gettempdir()
            sys.modules["tempfile"].tempdir = None
    os.chdir(req["cwd"])
    if req.get("code") is not None:  # as -c: sys.argv ['-c'], the cwd ('') first on sys.path, a new __main__
        import types

        sys.argv = ["-c"]
        sys.path.insert(0, "")
        main_mod = types.ModuleType("__main__")
        sys.modules["__main__"] = main_mod
        exec(compile(req["code"], "<string>", "exec"), main_mod.__dict__)
        sys.exit(0)
    import ckpttools

    main = str(Path(ckpttools.__file__).with_name("__main__.py"))
    sys.argv = [main, *req["argv"]]
    sys.path.insert(0, os.getcwd())  # as -m puts it (the zygote took this file's directory out)
    runpy.run_module("ckpttools", run_name="__main__", alter_sys=True)
    sys.exit(0)


# ----------------------------------------------------------------------------- the client's side
class Zygote:
    """A zygote started with ``env`` that has imported ``preload``; :meth:`run` runs ``ckpt`` in a
    child of it (thread-safe), under ``env`` or one that differs from it in ``run_vars`` only:
    variables nothing reads at import (the caller's word; the child sets them before it runs)."""

    def __init__(
        self,
        env: dict[str, str],
        scratch: Path,
        preload: tuple[str, ...] = PRELOAD,
        run_vars: frozenset[str] = frozenset(),
    ) -> None:
        self.env, self._scratch, self._run_vars = dict(env), scratch, run_vars
        self._proc = subprocess.Popen(
            [sys.executable, __file__, *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            cwd=scratch,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if self._proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the zygote did not start (exit {self._proc.wait()})")
        self._lock = threading.Lock()
        self._dead = False
        self._next = 0
        self._waiting: dict[str, dict[str, Any]] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            what, rid, n = line.decode().split()
            with self._lock:
                w = self._waiting[rid]
                w["pid" if what == "started" else "code"] = int(n)
                w["event" if what == "started" else "done"].set()
        with self._lock:  # the zygote has ended: no answer will come to those still waiting
            self._dead = True
            for w in self._waiting.values():
                w["event"].set()
                w["done"].set()

    def run(
        self, argv: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None, code: str | None = None
    ) -> tuple[int | None, bytes, bytes]:
        """(exit code, or None when it ran out of time; stdout; stderr), as subprocess.run gives them.
        ``code``: the child is ``python -c CODE`` instead (``argv`` then unused)."""
        if env is not None:
            differ = {k for k in env.keys() | self.env.keys() if env.get(k) != self.env.get(k)}
            if differ - self._run_vars:
                raise ValueError(
                    f"a zygote's child runs under its environment: {sorted(differ - self._run_vars)} differ"
                )
        with self._lock:
            if self._dead:
                raise RuntimeError(f"the zygote has ended (exit {self._proc.poll()})")
            self._next += 1
            rid = str(self._next)
            w = self._waiting[rid] = {"event": threading.Event(), "done": threading.Event()}
            out, err = self._scratch / f"{rid}.out", self._scratch / f"{rid}.err"
            req = {"id": rid, "argv": argv, "cwd": str(cwd), "out": str(out), "err": str(err), "env": env, "code": code}
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(req).encode() + b"\n")
            self._proc.stdin.flush()
        w["event"].wait()
        timed_out = "pid" in w and not w["done"].wait(timeout)
        if timed_out:
            try:
                os.kill(w["pid"], 9)
            except ProcessLookupError:
                pass
            w["done"].wait()
        with self._lock:
            del self._waiting[rid]
        if "code" not in w:
            raise RuntimeError(f"the zygote ended before case {argv} did (exit {self._proc.poll()})")
        so, se = out.read_bytes(), err.read_bytes()
        out.unlink()
        err.unlink()
        return (None if timed_out else w["code"]), so, se

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()


if __name__ == "__main__":
    sys.path.pop(0)  # this file's directory: the child puts the case's directory there, as -m does
    _serve(sys.argv[1:])
