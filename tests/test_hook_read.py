"""The swap hook's own read of a drafter file (engines/serverside/ckpt_swap.py ``_read_one``): one
buffer, the digest's pieces hashed on threads, the header held to safetensors' own checks.

- Property: on every generated file safetensors accepts (valid and damaged headers, the generators
  of tests/test_header_property.py), the hook's header reading gives the same names, dtypes,
  shapes and bytes, and the hook's whole read (``_read_one``: safetensors' check through
  /proc/self/fd, then the views) accepts exactly what ``safetensors.torch.load`` accepts.
- The digest is the documented one, for a file of several 64 MiB pieces too, on both sides.
- A file rewritten while it is read is refused, and one that shrinks while it is read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Scratch
from .test_header_property import compact_file, safetensors_file

torch = pytest.importorskip("torch")
from safetensors.torch import load, save_file  # noqa: E402

HOOK = Path(__file__).resolve().parents[1] / "ckpttools" / "engines" / "serverside" / "ckpt_swap.py"
SEEN = {"accepted": 0, "refused": 0, "other dtypes": 0}
#: test_the_property_run_saw_both_outcomes reads what the property test counted in this process: one worker
#: (under --dist loadgroup the two ran on different workers once, and the check skipped)
pytestmark = pytest.mark.xdist_group("hook-read")


def _hook():
    if str(HOOK.parent) not in sys.path:  # as on a server: the folder is on its path
        sys.path.insert(0, str(HOOK.parent))
    spec = importlib.util.spec_from_file_location("ckpt_swap_read_test", HOOK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


MOD = _hook()


def _theirs(data: bytes):
    try:
        return load(data)
    except Exception:  # noqa: BLE001 - any refusal by the library counts as a refusal
        return None


def _dtypes(data: bytes) -> set[str]:
    (n,) = struct.unpack("<Q", data[:8])
    return {e["dtype"] for k, e in json.loads(data[8 : 8 + n]).items() if k != "__metadata__"}


def _as_bytes(t) -> bytes:
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


@settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.one_of(safetensors_file(), compact_file().map(lambda x: x[0])))
def test_the_hooks_read_agrees_with_safetensors(scratch: Scratch, data: bytes) -> None:
    theirs = _theirs(data)
    if theirs is not None and not _dtypes(data) <= set(MOD._DTYPES):
        SEEN["other dtypes"] += 1  # F4, F6, E8M0: no torch dtype a swap loads; refused with the reason
        return
    p = scratch.fresh() / "model.safetensors"
    p.write_bytes(data)
    try:
        ours = MOD._read_one("model.safetensors", str(p), MOD.Digest())
    except MOD.Refused as e:
        ours = None
        assert str(e).startswith("model.safetensors: ")
    assert (ours is None) == (theirs is None), f"the hook {'refused' if ours is None else 'accepted'}, safetensors not"
    if ours is None:
        SEEN["refused"] += 1
        return
    SEEN["accepted"] += 1
    assert {k: (t.dtype, tuple(t.shape), _as_bytes(t)) for k, t in ours.items()} == {
        k: (t.dtype, tuple(t.shape), _as_bytes(t)) for k, t in theirs.items()
    }
    entries = MOD._entries(memoryview(data), len(data))
    assert sorted(n for n, *_ in entries) == sorted(theirs)


def test_the_property_run_saw_both_outcomes() -> None:
    if SEEN["accepted"] + SEEN["refused"] == 0:
        pytest.skip("the property test did not run in this process (another worker ran it)")
    assert SEEN["accepted"] > 100 and SEEN["refused"] > 100, SEEN


def _documented(path: Path) -> str:
    data = path.read_bytes()
    pieces = b"".join(hashlib.sha256(data[i : i + (64 << 20)]).digest() for i in range(0, len(data), 64 << 20))
    return hashlib.sha256(path.name.encode() + b"\0" + str(len(data)).encode() + b"\0" + pieces).hexdigest()


def test_a_file_of_several_pieces_digests_as_documented_on_both_sides(tmp_path: Path) -> None:
    from ckpttools.engines.guarded import drafter_digest

    d = tmp_path / "d"
    d.mkdir()
    g = torch.Generator().manual_seed(0)
    # 150 MiB: three pieces, the last one short; an odd header length, so tensors start unaligned
    save_file(
        {"a": torch.randn(150 << 18, generator=g), "b_odd": torch.ones(3, dtype=torch.float16)}, d / "model.safetensors"
    )
    files, server_side = MOD.read_guarded(str(d), {})
    want = _documented(d / "model.safetensors")
    assert server_side == drafter_digest(d) == want
    theirs = load((d / "model.safetensors").read_bytes())
    assert all(torch.equal(files[k], theirs[k]) for k in theirs)


def test_a_file_rewritten_while_it_is_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(1024)}, p)
    real = MOD._read_piece

    def piece_then_touch(*a):  # the trainer writes the file again mid-read
        out = real(*a)
        p.write_bytes(p.read_bytes())
        return out

    monkeypatch.setattr(MOD, "_read_piece", piece_then_touch)
    with pytest.raises(MOD.Refused, match="changed while it was read"):
        MOD._read_one("model.safetensors", str(p), MOD.Digest())


def test_a_file_cut_short_while_it_is_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(1024)}, p)
    real = MOD._read_piece

    def cut_then_read(fd, mv, at, dev, cpu):  # truncated between the check and the read
        with open(p, "r+b") as f:
            f.truncate(100)
        return real(fd, mv, at, dev, cpu)

    monkeypatch.setattr(MOD, "_read_piece", cut_then_read)
    with pytest.raises(MOD.Refused, match="changed while it was read"):
        MOD._read_one("model.safetensors", str(p), MOD.Digest())


def test_a_refused_read_leaves_no_piece_reading_its_closed_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first piece fails; the others must all have ended before the file is closed."""
    import threading
    import time as _time

    p = tmp_path / "model.safetensors"
    save_file({"w": torch.zeros(3 * (64 << 20) // 4)}, p)  # three pieces
    real, running, ended = MOD._read_piece, [0], []
    lock = threading.Lock()

    def slow_or_fail(fd, mv, at, dev, cpu):
        with lock:
            running[0] += 1
        try:
            if at == 0:
                raise MOD.Refused("changed while it was read")
            _time.sleep(0.3)
            return real(fd, mv, at, dev, cpu)
        finally:
            with lock:
                running[0] -= 1
                ended.append(at)

    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(MOD, "_read_piece", slow_or_fail)
    monkeypatch.setattr(MOD, "_POOL", ThreadPoolExecutor(max_workers=3))  # the pieces at once, as on a server
    with pytest.raises(MOD.Refused, match="changed while it was read"):
        MOD._read_one("model.safetensors", str(p), MOD.Digest())
    assert running[0] == 0, "a piece was still reading when _read_one returned"
    MOD._POOL.shutdown()
