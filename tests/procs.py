"""What the tests read of processes and of the launch ledger: /proc/PID/stat's fields, and the pids of
the servers ckpt launched (CKPT_LAUNCH_LEDGER, written by ckpttools.engines.launch._ledger)."""

from __future__ import annotations

import re
from pathlib import Path

#: a ledger line as launch._ledger writes it (json.dumps of engine, pid, time, argv, in that order): read by
#: its shape, so that a line still being written, or anything else in the file, is left out
_LEDGER_LINE = re.compile(rb'\{"engine": "[^"]*", "pid": (\d{1,9}),')


def proc_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command's name (state, ppid, pgrp, ...); None when there is
    no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def ledger_pids(path: str | Path, since: int = 0) -> list[int]:
    """The pids of the launches in the ledger at ``path`` past byte offset ``since``."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            lines = f.read().splitlines()
    except OSError:
        return []
    return [int(m.group(1)) for m in map(_LEDGER_LINE.match, lines) if m]
