"""The output guard: every file ckpttools writes goes through this module.

One set of rules for every output, whatever wrote it (a checkpoint, a mapping file, a
verify report, a plot, a server log, the header cache):

- **Never over an input.** The real path of an output (links resolved) is compared with
  every input of the run: the paths the operation names itself, plus every input the
  caller declared with :func:`declare_inputs` (the CLI declares every argument and option
  of the command that names an existing path, so a new flag is covered by construction).
  An output that is an input, lies inside one (an input directory), or holds one is
  refused, whatever the flags.
- **Whole or not at all.** Reports, plots and cache entries are written to a temporary
  beside them (``.NAME.ckpt-tmp-PID-ROLE``, see :mod:`ckpttools.io.fsutil`) and renamed
  into place. A server log streams, so it is the one output opened in place; it still
  never lands on an input.
- **No NaN or infinity in a JSON file.** :func:`json_bytes` writes a non-finite number
  as ``null``.

The checkpoint writer (:mod:`ckpttools.io.writer`) calls :func:`check_output` before it
makes its temporary directory and :func:`open_new` for each file inside it.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from ckpttools.errors import UnsafePathError
from ckpttools.io.fsutil import clean_stale_temporaries, path_overlap, temp_name

__all__ = [
    "declare_inputs",
    "declared_inputs",
    "run_inputs",
    "check_output",
    "write_bytes",
    "write_text",
    "write_json",
    "json_bytes",
    "finite",
    "open_log",
    "open_new",
]

_lock = threading.Lock()
_declared: list[str] = []


def declare_inputs(paths: Iterable[str | Path | None]) -> None:
    """Add paths to the run's inputs (those that exist; a Hub id or a word is skipped)."""
    with _lock:
        for p in paths:
            if p is None or str(p) == "":
                continue
            try:
                if os.path.lexists(p):
                    _declared.append(os.path.realpath(p))
            except (OSError, ValueError):
                continue


@contextmanager
def declared_inputs(paths: Iterable[str | Path | None]) -> Iterator[None]:
    """The run's inputs for the ``with`` block (library users; the CLI declares its own)."""
    with _lock:
        saved = list(_declared)
    declare_inputs(paths)
    try:
        yield
    finally:
        with _lock:
            _declared[:] = saved


def run_inputs() -> list[str]:
    """The real paths declared as this run's inputs."""
    with _lock:
        return list(_declared)


def _real(p: str | Path) -> Path:
    return Path(os.path.realpath(p))


def check_output(
    out: str | Path, inputs: Iterable[str | Path | None] = (), *, replacing: str | Path | None = None
) -> None:
    """Refuse an output that is an input, lies inside one, or holds one.

    ``inputs`` are the operation's own inputs; the run's declared inputs are always added.
    Real paths are compared (links resolved), so ``.``, ``..`` and links to an input are
    caught too. ``replacing`` is the one input an operation may replace whole (``validate
    --fix --in-place`` and its drafter); every other input still stops it.

    Raises:
        UnsafePathError
    """
    o = _real(out)
    allowed = _real(replacing) if replacing is not None else None
    # `-o .`: the rename over the folder in use fails (EBUSY) after every byte is written; --in-place
    # (``replacing``) swaps the folder whole, so it may be "."
    at_cwd = path_overlap(o, _real(os.getcwd()))
    if o != allowed and at_cwd in ("is", "holds"):
        raise UnsafePathError(
            f"output {out} {at_cwd} the current folder: a folder in use is never replaced",
            path=str(out),
            hint="write to a new path, e.g. a new folder beside this one",
        )
    named = [(str(i), i) for i in inputs if i is not None and str(i) != ""]
    for shown, i in named + [(d, d) for d in run_inputs()]:
        try:
            if not os.path.lexists(i):
                continue
            r = _real(i)
        except (OSError, ValueError):
            continue
        if r == allowed:
            continue
        for real, where in [(r, shown), *_linked(i)]:
            why = path_overlap(o, real)
            if why is not None:
                raise UnsafePathError(
                    f"output {out} {why} the input {where}: an input is never written",
                    path=str(out),
                    hint="write to a new path beside the input",
                )


#: entries of an input folder looked at for links (a checkpoint holds a few dozen files)
_MAX_LINKED = 4096


def _linked(i: str | Path) -> list[tuple[Path, str]]:
    """The real files behind the links among a folder input's entries (a Hugging Face snapshot's
    every file is a link into ``blobs/``; a local checkpoint may link its shards from elsewhere):
    an output there would replace the input's data as surely as one at the folder itself."""
    out: list[tuple[Path, str]] = []
    try:
        if not os.path.isdir(i):
            return out
        with os.scandir(i) as it:
            for n, e in enumerate(it):
                if n >= _MAX_LINKED:
                    break
                if e.is_symlink():
                    out.append((_real(e.path), f"{e.path} (the file its link leads to)"))
    except (OSError, ValueError):
        pass
    return out


def finite(obj: Any) -> Any:
    """``obj`` with every NaN and infinity (at any depth) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def json_bytes(obj: Any, indent: int | None = 2) -> bytes:
    """JSON text of ``obj`` with non-finite numbers as null (never NaN or Infinity)."""
    import json

    text = json.dumps(finite(obj), indent=indent, allow_nan=False, default=_default)
    return (text + "\n").encode("utf-8")


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return finite(o.item())
    if isinstance(o, np.ndarray):
        return finite(o.tolist())
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON")


def write_bytes(path: str | Path, data: bytes, inputs: Iterable[str | Path | None] = ()) -> Path:
    """Write a small file whole: checked against the inputs, through a temporary and one rename.

    An existing file that is not an input is replaced (a report or a plot written again).
    """
    dest = Path(path)
    inputs = list(inputs)  # read twice: the check, and the temporaries left alone
    check_output(dest, inputs)
    if dest.is_dir() and not dest.is_symlink():
        raise UnsafePathError(f"output {dest} is a directory", path=str(dest), hint="give a file name")
    if str(dest.parent):
        dest.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(dest, [*inputs, *run_inputs()])
    tmp = temp_name(dest, "write")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def write_text(path: str | Path, text: str, inputs: Iterable[str | Path | None] = ()) -> Path:
    """:func:`write_bytes` of UTF-8 text."""
    return write_bytes(path, text.encode("utf-8"), inputs)


def write_json(path: str | Path, obj: Any, inputs: Iterable[str | Path | None] = (), indent: int | None = 2) -> Path:
    """:func:`write_bytes` of :func:`json_bytes` (no NaN, no infinity)."""
    return write_bytes(path, json_bytes(obj, indent), inputs)


def open_log(path: str | Path, inputs: Iterable[str | Path | None] = ()) -> IO[bytes]:
    """A server log, opened for writing in place (a log streams; it cannot be renamed in at
    the end), after the same check against the inputs."""
    dest = Path(path)
    check_output(dest, inputs)
    if dest.is_dir():
        raise UnsafePathError(f"log {dest} is a directory", path=str(dest), hint="give a file name")
    if str(dest.parent):
        dest.parent.mkdir(parents=True, exist_ok=True)
    return open(dest, "wb")


def append_line(path: str | Path, line: str, inputs: Iterable[str | Path | None] = ()) -> None:
    """One line appended to an audit file (``CKPT_LAUNCH_LEDGER``), after the same check against
    the inputs: one write of O_APPEND, so lines from parallel processes stay whole."""
    dest = Path(path)
    check_output(dest, inputs)
    fd = os.open(dest, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, line.rstrip("\n").encode() + b"\n")
    finally:
        os.close(fd)


def open_new(path: str | Path) -> IO[bytes]:
    """A new file inside a temporary that the writer made (and so already checked)."""
    p = Path(path)
    if not any(".ckpt-tmp-" in part for part in p.parts):
        raise UnsafePathError(f"{p}: files are created only inside a checked temporary", path=str(p))
    return open(p, "wb")
