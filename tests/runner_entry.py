"""Commands for the in-process case runner's own tests (tests/test_corpus.py), each a way a case
can differ between this process and a fresh ``python -m ckpttools``:

- ``main([SECONDS])``: the main thread is in a finaliser when the watchdog's first SIGINT lands, and
  Python only prints what a finaliser raises ("Exception ignored in ...") and goes on; then it runs
  on for SECONDS.
- ``main(["thread"])``: a thread of its own ends with an exception, which a fresh interpreter prints
  to stderr ("Exception in thread ...") and then exits 0.
- ``main(["log"])``: logs a warning through the logger ``runner-entry-lib``, whose handler a library
  made before the case, on the ``sys.stderr`` of that moment.
- ``main(["pool"])``: runs a task on a module-level thread pool with a name of its own, as
  engines/serverside/ckpt_swap.py's ``ckpt-dg`` pool is, and returns with the pool's worker idle.
- ``main(["tmp"])``: makes a directory in the temporary directory, as engines/swap.py's ``ckpt-swap-``
  one is, prints its path and leaves it there.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

#: read as this module is imported, as a library may: a zygote that preloads it has its temporary
#: directory set before it forks (tests/test_corpus.py reads where its children make theirs)
TMP_AT_IMPORT = tempfile.gettempdir()

#: the pool of ``main(["pool"])``: kept, as a module's pool is, from one call to the next
_POOL: ThreadPoolExecutor | None = None


class _SlowFinaliser:
    def __del__(self) -> None:
        time.sleep(2.0)  # the case's 0.5 s limit passes in here


def _fails() -> None:
    raise ValueError("raised in a thread of the case")


def main(argv: list[str]) -> None:
    global _POOL
    if argv == ["thread"]:
        t = threading.Thread(target=_fails)
        t.start()
        t.join()
        return
    if argv == ["log"]:
        logging.getLogger("runner-entry-lib").warning("a library's warning, through its own handler")
        return
    if argv == ["tmp"]:
        print(tempfile.mkdtemp(prefix="ckpt-swap-"))
        return
    if argv == ["pool"]:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-dg")
        assert _POOL.submit(sum, [1, 2]).result() == 3
        return
    end = time.monotonic() + float(argv[0])
    x = _SlowFinaliser()
    del x
    while time.monotonic() < end:
        time.sleep(0.05)
