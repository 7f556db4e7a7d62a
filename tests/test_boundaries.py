"""The network client is one module: httpx and urllib appear nowhere else in the package."""

from __future__ import annotations

import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "ckpttools"
NET = PKG / "io" / "net.py"
_HTTP = re.compile(r"\bhttpx\.|\bimport httpx\b|\bfrom httpx\b|\burllib\b")


def test_http_only_in_net() -> None:
    found = []
    for p in sorted(PKG.rglob("*.py")):
        if p == NET:
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if _HTTP.search(line):
                found.append(f"{p.relative_to(PKG.parent)}:{n}: {line.strip()}")
    assert not found, "HTTP outside ckpttools/io/net.py:\n" + "\n".join(found)
