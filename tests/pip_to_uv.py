"""pip's settings, read from ``pip config list`` on stdin, as the shell exports that give uv the same
ones (tests/run.sh evals them): the find-links, the index and the extra indexes, the constraints,
the certificate and the timeout. pip looks at every index and takes the best version it finds;
uv is told to do the same (by default it stops at the first index that has the package).
A variable already set in the environment is left as it is.

    pip config list | python tests/pip_to_uv.py
"""

from __future__ import annotations

import os
import re
import shlex
import sys

#: pip's key -> uv's variable, and how uv separates a list in it
KEYS = {
    "find-links": ("UV_FIND_LINKS", ","),
    "index-url": ("UV_DEFAULT_INDEX", None),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", None),
    "timeout": ("UV_HTTP_TIMEOUT", None),
    "default-timeout": ("UV_HTTP_TIMEOUT", None),
}
#: pip's sections, the most specific last (the environment's ``:env:`` wins, as it does for pip)
ORDER = {"global": 0, "install": 1, ":env:": 2}


def exports(text: str, environ: dict[str, str]) -> list[str]:
    """The ``export NAME=VALUE`` lines for ``pip config list``'s ``text``."""
    best: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([^.=]*)\.([a-z-]+)=(.*)", line.strip())
        if not m or m[2] not in KEYS:
            continue
        try:
            value = " ".join(shlex.split(m[3]))  # pip prints the value quoted
        except ValueError:
            continue
        rank = ORDER.get(m[1], 0)
        if m[2] not in best or rank >= best[m[2]][0]:
            best[m[2]] = (rank, value)
    out = {"UV_INDEX_STRATEGY": "unsafe-best-match"}
    for key, (_, value) in best.items():
        name, sep = KEYS[key]
        out[name] = sep.join(value.split()) if sep else value
    return [f"export {k}={shlex.quote(v)}" for k, v in out.items() if k not in environ]


if __name__ == "__main__":
    print("\n".join(exports(sys.stdin.read(), dict(os.environ))))
