"""A command for the in-process watchdog's test (tests/test_corpus.py): the main thread is in a
finaliser when the watchdog's first SIGINT lands, and Python only prints what a finaliser raises
("Exception ignored in ...") and goes on. ``main([SECONDS])`` then runs on for SECONDS.
``main(["thread"])`` ends a thread of its own with an exception, which a fresh interpreter prints
to stderr ("Exception in thread ...") and then exits 0."""

from __future__ import annotations

import threading
import time


class _SlowFinaliser:
    def __del__(self) -> None:
        time.sleep(2.0)  # the case's 0.5 s limit passes in here


def _fails() -> None:
    raise ValueError("raised in a thread of the case")


def main(argv: list[str]) -> None:
    if argv == ["thread"]:
        t = threading.Thread(target=_fails)
        t.start()
        t.join()
        return
    end = time.monotonic() + float(argv[0])
    x = _SlowFinaliser()
    del x
    while time.monotonic() < end:
        time.sleep(0.05)
