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


_LEAVES = """
import subprocess, sys, tempfile

def test_a_test_leaves_a_file():
    tempfile.mkstemp(prefix="left-by-a-test-")

def test_a_process_of_a_test_leaves_one():
    code = "import tempfile; tempfile.mkstemp(prefix='left-by-a-process-')"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def test_a_session_leaves_nothing_in_the_temporary_directory(tmp_path: Path) -> None:
    """What the tests and their processes (the engines' servers: vLLM's rendezvous files, torch's
    compile cache) put in the temporary directory goes with the session (tests/conftest.py:
    _session_tmp), on both workers; pytest's own tmp_path directories stay where pytest keeps them."""
    system = tmp_path / "system-tmp"
    system.mkdir()
    (tmp_path / "test_leaves.py").write_text(_LEAVES)
    ours = ("CKPT_TEST_TMP", "CKPT_LAUNCH_LEDGER", "CKPT_TEST_NOTES", "CKPT_VLLM_CACHE_ROOT", "PYTEST_DEBUG_TEMPROOT")
    env = {k: v for k, v in os.environ.items() if k not in ours} | {"TMPDIR": str(system)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", "-n", "2"]
        + [str(tmp_path / "test_leaves.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
    assert [p.name for p in system.iterdir() if not p.name.startswith("pytest-of-")] == []
