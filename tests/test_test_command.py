"""The test command's own settings (tests/run.sh, tests/conftest.py), as a developer gets them wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_timeline_that_cannot_be_written_is_one_usage_line(tmp_path: Path) -> None:
    """CKPT_TEST_TIMELINE in a directory that does not exist: pytest's usage error (exit 4), one
    line naming the variable, not an INTERNALERROR from every worker after every test."""
    where = tmp_path / "no-such-dir" / "t.jsonl"
    env = {**os.environ, "CKPT_TEST_TIMELINE": str(where)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "tests/test_startup.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 4, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [
        f"ERROR: CKPT_TEST_TIMELINE={where}: cannot append there (No such file or directory); "
        "give a file in a directory that exists, or unset it"
    ], r.stderr
    assert not where.parent.exists()
