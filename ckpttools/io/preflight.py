"""What :func:`ckpttools.io.plan.execute` will need of the file system, checked before a byte is
written, by the one function both the executor and ``--dry-run`` call.

A dry run and a real run refuse the same inputs with the same line and exit code: the real run
calls :func:`preflight` first thing, the dry run calls it instead of writing. It reads the file
system and changes nothing (no directory made, no stale temporary removed):

- the plan names each output tensor once (a plan builder that let two sources take one name
  is refused here too, as a last line);
- OUT is no input (:func:`ckpttools.io.guard.check_output`);
- OUT's kind: an existing OUT needs ``force`` (or is the drafter ``in_place`` replaces); a
  mapping file cannot replace a directory; ``in_place`` needs the directory it replaces;
- OUT's parent: the nearest part of it that exists is a directory (the executor makes the
  rest), and the process may create entries in it: the temporary, the rename, the backup
  of ``in_place`` all happen there. A read-only file system says so;
- free space, where the file system reports it: the tensor bytes (holes excepted), the side
  files, the config (an OUT replaced with ``force`` is removed only after the rename, so it
  frees nothing before).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ckpttools.errors import CheckpointFormatError, OutputExistsError, UnsafePathError, opt
from ckpttools.io.guard import check_output

if TYPE_CHECKING:
    from ckpttools.io.write_plan import WritePlan

__all__ = ["preflight", "refuse_shared_names", "bytes_needed"]

#: what the index, the config and the manifest take beside the tensors, at most (a generous bound)
_SMALL_FILES = 1 << 20


def refuse_shared_names(
    pairs: Iterable[tuple[str, str]], where: str, *, key: Callable[[str], str] | None = None
) -> None:
    """Refuse two sources that would take one output name.

    ``pairs`` are ``(source, output name)``; ``key`` says when two output names are one (an engine
    that reads ``model.norm.weight`` and ``norm.weight`` as the same parameter: the canonical name).
    With ``key``, two sources kept under their own names are the source's affair, not a rename's,
    and pass; without, one output name twice is always refused.

    Raises:
        CheckpointFormatError: naming both sources and the name they would share.
    """
    seen: dict[str, tuple[str, str]] = {}
    for src, name in pairs:
        k = key(name) if key is not None else name
        if k in seen and (key is None or src != name or seen[k][0] != seen[k][1]):
            first, first_name = seen[k]
            same = f"{name!r}" if name == first_name else f"{first_name!r} and {name!r} (one name to the engine)"
            raise CheckpointFormatError(
                f"{where}: {first!r} and {src!r} would both be written as {same}: one would overwrite the other",
                path=where,
                tensor=src,
                hint="keep one of them: remove or rename the other in the source, then run again",
            )
        seen[k] = (src, name)


def bytes_needed(plan: WritePlan) -> int:
    """What writing ``plan`` takes on disk, about: its tensors (holes excepted, a sparse file's
    holes take no blocks), its side files, and a bound for the headers, index, config and manifest."""
    n = sum(t.nbytes for t in plan.tensors if t.source.kind != "hole")
    for s in plan.side_files:
        if s.data is not None:
            n += len(s.data)
        elif s.skipped is None and s.size is not None:
            n += s.size
        elif s.skipped is None:
            try:
                n += os.stat(s.path).st_size
            except OSError:
                pass
    return n + _SMALL_FILES


def preflight(plan: WritePlan, out: str | Path | None = None, *, force: bool = False, in_place: bool = False) -> Path:
    """Check everything :func:`~ckpttools.io.plan.execute` will need of the file system, writing
    nothing; return where it will write.

    Raises:
        CheckpointFormatError: two output tensors share a name.
        UnsafePathError: OUT is an input; OUT's parent is not a directory or cannot be written;
            a mapping file aimed at a directory; too little free space.
        OutputExistsError: OUT exists and ``force`` is not set.
    """
    dest = Path(out if out is not None else plan.output)
    refuse_shared_names(((_source_name(t), t.name) for t in plan.tensors), str(dest))
    check_output(dest, list(plan.inputs), replacing=dest if in_place else None)
    _check_kind(plan, dest, force, in_place)
    parent = _existing_parent(dest)
    _check_writable(parent, dest)
    _check_space(plan, parent, dest)
    return dest


def _source_name(t: object) -> str:
    src = getattr(t, "source", None)
    ref = getattr(src, "ref", None)
    return ref.tensor if ref is not None else getattr(t, "name", "?")


def _check_kind(plan: WritePlan, dest: Path, force: bool, in_place: bool) -> None:
    exists = os.path.lexists(dest)
    if in_place:
        if not dest.is_dir():
            raise UnsafePathError(f"{dest}: replacing it in place needs the directory itself", path=str(dest))
        return
    if exists and not force:
        raise OutputExistsError(f"{dest} already exists", path=dest)
    if exists and plan.layout == "file" and dest.is_dir() and not dest.is_symlink():
        raise UnsafePathError(
            f"{dest} is a directory: a mapping file cannot replace it, {opt('force')} or not",
            path=str(dest),
            hint="give a file name, e.g. DIR/mapping.safetensors",
        )


def _existing_parent(dest: Path) -> Path:
    """The nearest part of OUT's parent that exists (the executor makes the rest); it must be a
    directory, and so must every part above it."""
    parent = dest.parent if str(dest.parent) else Path(".")
    p = parent
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    if not p.is_dir():
        what = "a file" if p.is_file() else "a broken link" if p.is_symlink() else "not a directory"
        raise UnsafePathError(
            f"{dest}: its parent {p} is {what}, so nothing can be written under it",
            path=str(dest),
            hint="give an output path inside a directory",
        )
    return p


def _check_writable(parent: Path, dest: Path) -> None:
    if os.access(parent, os.W_OK | os.X_OK):
        return
    try:
        ro = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
    except OSError:
        ro = False
    why = "is on a read-only file system" if ro else "is not writable by this user"
    raise UnsafePathError(
        f"{dest}: the directory {parent} {why} ({os.strerror(errno.EROFS if ro else errno.EACCES)})",
        path=str(dest),
        hint="give an output path in a directory you can write to",
    )


def _check_space(plan: WritePlan, parent: Path, dest: Path) -> None:
    try:
        st = os.statvfs(parent)
    except OSError:  # not known: the write itself will say
        return
    free = st.f_bavail * st.f_frsize
    need = bytes_needed(plan)
    if st.f_blocks and need > free:
        from ckpttools.io.units import human_bytes

        raise UnsafePathError(
            f"{dest}: writing it needs about {human_bytes(need)}, and the file system of {parent} has "
            f"{human_bytes(free)} free",
            path=str(dest),
            hint="free some space, or write to another file system",
        )
