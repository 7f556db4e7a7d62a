"""File-system primitives every command shares: regular-file checks, atomic renames,
and temporaries with one recognizable name that the next run can clean up.

Temporaries are named ``.NAME.ckpt-tmp-PID-ROLE`` beside their destination NAME. A
run removes the stale ones (their process is gone) before it writes NAME again, and
logs that it did.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
import re
import stat
from pathlib import Path

from ckpttools.errors import CheckpointFormatError, OutputExistsError

__all__ = [
    "remove_entry",
    "open_regular",
    "starts_with",
    "read_regular_bytes",
    "ensure_regular",
    "temp_name",
    "clean_stale_temporaries",
    "path_overlap",
    "rename_noreplace",
    "rename_exchange",
    "kill_point",
    "MAX_SIDE_FILE_BYTES",
]


#: JSON side files (config.json, index, tokenizer.json, mapping .json) larger than this are refused
MAX_SIDE_FILE_BYTES = 1 << 30

_TMP_RE = re.compile(r"^\.(?P<name>.+)\.ckpt-tmp-(?P<pid>\d+)-(?P<role>[a-z]+)(?:-(?P<ino>\d+))?$")


def _not_regular(path: Path, mode: int) -> CheckpointFormatError:
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    return CheckpointFormatError(
        f"{path}: is {kind}, not a regular file", path=path, hint="give a regular file (a FIFO or device is never read)"
    )


def open_regular(path: str | Path) -> int:
    """Open a regular file read-only and return its descriptor.

    Opens without blocking (a FIFO would otherwise hang the open) and refuses anything
    that is not a regular file, checked on the opened descriptor (no race).

    Raises:
        CheckpointFormatError: not a regular file, or a link that leads to no file (a file the user
            meant to give: never read as one that is absent).
        FileNotFoundError, PermissionError: as the OS says.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if os.path.islink(p):
            raise _link_to_nothing(p) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(p, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def absent_words(path: str | Path, what: str = "file") -> str:
    """Why ``path`` gives no file, in words: ``a link to X that leads to no file`` where it is such a
    link (the user gave a file: say what it is), else ``no such WHAT``."""
    if os.path.islink(path):
        try:
            to = os.readlink(path)
        except OSError:  # gone meanwhile
            to = "?"
        return f"a link to {to[:200]} that leads to no file"
    return f"no such {what}"


def _link_to_nothing(p: Path) -> CheckpointFormatError:
    return CheckpointFormatError(
        f"{p}: {absent_words(p)}",
        path=str(p),
        hint="point the link at the real file (or copy the file in place of the link)",
    )


def ensure_regular(path: str | Path) -> Path:
    """``path`` if it is a regular file (following links); else CheckpointFormatError."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        if os.path.islink(p):
            raise _link_to_nothing(p) from None
        raise
    if not stat.S_ISREG(mode):
        raise _not_regular(p, mode)
    return p


def starts_with(path: str | Path, prefix: bytes) -> bool:
    """Whether the regular file ``path`` begins with ``prefix`` (opened by :func:`open_regular`, which
    raises what it raises; only ``len(prefix)`` bytes are read)."""
    fd = open_regular(path)
    try:
        return os.pread(fd, len(prefix), 0) == prefix
    finally:
        os.close(fd)


def read_regular_bytes(path: str | Path, limit: int = MAX_SIDE_FILE_BYTES) -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise CheckpointFormatError(
                f"{path}: {size} bytes is too large for this kind of file (limit {limit})",
                path=path,
                hint="is this the right file?",
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            # the size it has, and one byte more to see it grow: a read of ``limit`` bytes would first
            # allocate that much (256 MB for an index: ~2 ms and 800 page faults for a 3 MB file)
            data = f.read(size + 1)
            if len(data) > size:  # it grew since fstat: up to the limit, as before
                data += f.read(limit - len(data) + 1)
            return data
    finally:
        os.close(fd)


def kill_point(step: str) -> None:
    """A named step where the kill tests stop the process (``CKPT_TEST_KILL_AT=step``).

    Only the tests set the variable; it is how they show that a kill at each rename
    leaves a complete old or new tree, and that the next run cleans up.
    """
    if os.environ.get("CKPT_TEST_KILL_AT") == step:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


# ----------------------------------------------------------------------------- temporaries
def temp_name(dest: Path, role: str, ino: int | None = None) -> Path:
    """The temporary beside ``dest`` for this process: ``.NAME.ckpt-tmp-PID-ROLE[-INO]``."""
    suffix = f"-{ino}" if ino is not None else ""
    return dest.parent / f".{dest.name}.ckpt-tmp-{os.getpid()}-{role}{suffix}"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_entry(p: Path) -> None:
    """Remove what is at ``p``: a real directory's tree; a link (never followed) or a file itself."""
    p = Path(p)
    if p.is_dir() and not p.is_symlink():
        import shutil  # bz2, lzma and more: not for the commands that only read

        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


#: called once, before the first note is logged: the CLI puts its handler in place there, so that
#: a command that says nothing never imports logging (~3 ms of every start-up)
BEFORE_FIRST_NOTE: list[Callable[[], None]] = []


def _note(msg: str) -> None:
    import logging

    while BEFORE_FIRST_NOTE:
        BEFORE_FIRST_NOTE.pop(0)()
    logging.getLogger("ckpttools").info(msg)


def path_overlap(a: Path, b: Path) -> str | None:
    """How real path ``a`` meets real path ``b``: ``is``, ``lies inside``, ``holds``, or None."""
    if a == b:
        return "is"
    if a.is_relative_to(b):
        return "lies inside"
    if b.is_relative_to(a):
        return "holds"
    return None


def clean_stale_temporaries(dest: str | Path, keep: Iterable[str | Path | None] = ()) -> list[str]:
    """Remove the temporaries that dead runs left beside ``dest``; return what was done.

    A ``fix`` temporary that holds the displaced original drafter (its inode is the
    one recorded in its name) is not deleted: it is renamed to ``NAME.bak-recovered-PID``.
    An entry that is, holds or lies inside one of ``keep`` (the run's inputs) is left alone,
    whatever its name: a user may run ckpttools on a temporary an interrupted run left.
    """
    dest = Path(dest)
    parent = dest.parent if str(dest.parent) else Path(".")
    done: list[str] = []
    kept: list[Path] = []
    for k in keep:
        if k is not None and str(k) != "":
            try:
                kept.append(Path(os.path.realpath(k)))
            except (OSError, ValueError):
                continue
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return done
    for e in entries:
        m = _TMP_RE.match(e.name)
        if not m or m["name"] != dest.name or _alive(int(m["pid"])):
            continue
        p = parent / e.name
        real = Path(os.path.realpath(p))
        if any(path_overlap(real, k) is not None for k in kept):
            continue  # an input of this run: never removed
        if m["ino"] is not None:
            try:
                same = os.lstat(p).st_ino == int(m["ino"])
            except OSError:
                continue
            if same:
                recovered = parent / f"{dest.name}.bak-recovered-{m['pid']}"
                try:
                    rename_noreplace(p, recovered)
                except OSError:
                    continue
                msg = f"recovered {recovered}: the original that an interrupted run (pid {m['pid']}) had set aside"
                _note(msg)
                done.append(msg)
                continue
        remove_entry(p)
        msg = f"removed {p}, a temporary left by an interrupted run (pid {m['pid']})"
        _note(msg)
        done.append(msg)
    return done


# ----------------------------------------------------------------------------- renames
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_renameat2 = None


def _libc_renameat2():
    global _renameat2
    if _renameat2 is None:
        import ctypes  # only when renaming: ctypes costs a cold start more than reading a header

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (AttributeError, OSError):
            _renameat2 = False
    return _renameat2 or None


def _rename2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2(2); False when the OS or file system lacks it."""
    fn = _libc_renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    import ctypes

    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(src), None, str(dst))


def rename_noreplace(src: str | Path, dst: str | Path) -> None:
    """Rename ``src`` to ``dst``, failing with OutputExistsError if ``dst`` exists.

    Atomic where the OS has RENAME_NOREPLACE; elsewhere checked just before the rename.
    """
    src, dst = Path(src), Path(dst)
    try:
        if _rename2(src, dst, _RENAME_NOREPLACE):
            return
    except FileExistsError:
        raise OutputExistsError(f"{dst} appeared while writing", path=dst) from None
    if os.path.lexists(dst):
        raise OutputExistsError(f"{dst} appeared while writing", path=dst)
    os.rename(src, dst)


def rename_exchange(a: str | Path, b: str | Path) -> bool:
    """Swap two paths atomically (both keep existing under their names); False if unsupported."""
    return _rename2(Path(a), Path(b), _RENAME_EXCHANGE)


def note(msg: str) -> None:
    """Say something on the side, through ``logging.getLogger("ckpttools")`` at INFO level (the
    CLI installs a handler that prints it as ``ckpt: note: ...``; a library user configures
    logging as they like)."""
    _note(msg)
