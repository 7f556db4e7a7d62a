"""The manifest's digest of a source whose data section is one kernel copy trails that copy
(ckpttools.io.manifest.BackgroundDigests ``follow``): the digest is the file's, whatever the pace,
and a digest that is never told of the copy still finishes. The digest thread yields its core
(DIGEST_NICE), and what it has not reached when the copy is done is hashed on the caller's thread."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import xxhash

from ckpttools.demo.tiny import build_drafter
import pytest

from ckpttools.io.manifest import DIGEST_NICE, FOLLOW_CHUNK, BackgroundDigests, file_digest
from ckpttools.io.safetensors_header import read_header


def _xxh3(p: Path) -> str:
    return xxhash.xxh3_128(p.read_bytes()).hexdigest()


def _big(tmp_path: Path) -> Path:
    p = tmp_path / "big.bin"
    p.write_bytes(os.urandom(3 * FOLLOW_CHUNK + 12345))
    return p


def test_a_followed_digest_waits_for_the_copy_and_is_the_files(tmp_path: Path) -> None:
    p = _big(tmp_path)
    size = p.stat().st_size
    d = BackgroundDigests([p], follow={str(p): (100, size)})
    d.start()
    try:
        d.copied(str(p), FOLLOW_CHUNK + 100)  # the copy has read the first chunk only
        time.sleep(0.3)
        assert d._thread is not None and d._thread.is_alive()  # it waits at the second chunk (its own limit is 2 s)
        assert str(p) not in d._done
        for pos in range(2 * FOLLOW_CHUNK, size, FOLLOW_CHUNK):
            d.copied(str(p), pos)
        d.copied(str(p), size)
        assert d.result() == {str(p): {"xxh3_128": _xxh3(p)}}
    finally:
        d.close()


def test_a_followed_digest_whose_copy_never_reports_still_finishes(tmp_path: Path) -> None:
    p = _big(tmp_path)
    d = BackgroundDigests([p], follow={str(p): (0, p.stat().st_size)})
    d.start()
    timer = threading.Timer(0.2, d.release)  # what execute does once the tensors are written
    timer.start()
    try:
        t = time.perf_counter()
        assert d.result()[str(p)] == file_digest(p)
        assert time.perf_counter() - t < 30
    finally:
        timer.cancel()
        d.close()


def test_export_of_renamed_tensors_is_one_copy_and_records_the_sources_digest(tmp_path: Path) -> None:
    """A drafter whose tensors are only renamed: the plan copies the source's whole data section in
    one run, and the manifest's digest of the shard (read beside the copy) is the xxh3-128 of its bytes."""
    from ckpttools.io.plan import Copy, _copy_runs
    from ckpttools.ops.export import export, plan_export

    src = build_drafter(tmp_path / "eagle", "eagle")  # midlayer.* names: every one renamed
    shard = Path(src) / "model.safetensors"
    assert shard.exists(), sorted(os.listdir(src))
    h = read_header(shard)
    plan = plan_export(src, tmp_path / "o")
    runs = _copy_runs(plan.tensors)
    assert list(runs.items()) == [(0, len(plan.tensors))], runs
    first = plan.tensors[0].source
    assert isinstance(first, Copy) and first.ref.offset == h.data_start
    assert first.ref.offset + sum(t.nbytes for t in plan.tensors) == h.file_size
    export(src, tmp_path / "o")
    manifest = json.loads((tmp_path / "o" / "ckpttools-manifest.json").read_text())
    digests = {Path(e["path"]).name: e["digest"] for e in manifest["sources"]["drafter"]}
    assert digests["model.safetensors"]["xxh3_128"] == _xxh3(shard)


def _nice_of_thread(tid: int) -> int:
    """The nice value of one of this process's threads (proc(5): field 19 of .../task/TID/stat)."""
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads a thread's nice value from Linux's /proc")
def test_the_digest_thread_yields_its_core_and_the_caller_keeps_its_priority(tmp_path: Path) -> None:
    p = _big(tmp_path)
    mine = _nice_of_thread(threading.get_native_id())
    d = BackgroundDigests([p], follow={str(p): (0, p.stat().st_size)})
    d.start()
    try:
        time.sleep(0.2)  # it waits at its first chunk for a copy that never reports
        assert d._thread is not None and d._thread.native_id is not None and d._thread.is_alive()
        assert _nice_of_thread(d._thread.native_id) == max(DIGEST_NICE, mine)
        assert _nice_of_thread(threading.get_native_id()) == mine
        assert d.result() == {str(p): {"xxh3_128": _xxh3(p)}}
        assert _nice_of_thread(threading.get_native_id()) == mine
    finally:
        d.close()


def test_result_finishes_on_the_callers_thread_what_the_digest_thread_had_not_reached(tmp_path: Path) -> None:
    """The thread, held a chunk into the first of three files (its copy reports no further), is
    stopped by result(): the caller hashes the rest of that file from where the thread stopped, and
    the two files after it, and every digest is the file's."""
    first = _big(tmp_path)
    others = [tmp_path / "b.bin", tmp_path / "c.bin"]
    for i, q in enumerate(others):
        q.write_bytes(os.urandom(FOLLOW_CHUNK + 1000 * i + 7))
    size = first.stat().st_size
    d = BackgroundDigests([first, *others], follow={str(first): (0, size)})
    d.start()
    try:
        d.copied(str(first), FOLLOW_CHUNK)
        deadline = time.monotonic() + 30
        while (d._partial is None or d._partial.pos < FOLLOW_CHUNK) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert d._partial is not None and d._partial.pos == FOLLOW_CHUNK  # one chunk hashed, the next awaited
        got = d.result()
        assert got == {str(q): {"xxh3_128": _xxh3(q)} for q in (first, *others)}
        assert got == {str(q): file_digest(q) for q in (first, *others)}
        # the thread hashed at most the chunk it was let into; the caller the rest
        assert size - 2 * FOLLOW_CHUNK + sum(q.stat().st_size for q in others) <= d.finished_by_caller
        assert d.finished_by_caller <= size - FOLLOW_CHUNK + sum(q.stat().st_size for q in others)
        assert d._thread is not None and not d._thread.is_alive()
    finally:
        d.close()


def test_result_without_a_started_thread_hashes_every_file_on_the_caller(tmp_path: Path) -> None:
    p = _big(tmp_path)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    d = BackgroundDigests([p, empty])
    assert d.result() == {str(p): {"xxh3_128": _xxh3(p)}, str(empty): {"xxh3_128": _xxh3(empty)}}
    assert d._thread is None and d.finished_by_caller == p.stat().st_size
    d.start()  # after result(): no thread is started any more
    assert d._thread is None


def test_a_file_that_vanishes_before_the_caller_takes_over_is_an_error_there(tmp_path: Path) -> None:
    p = _big(tmp_path)
    gone = tmp_path / "gone.bin"
    gone.write_bytes(b"x" * 10)
    d = BackgroundDigests([p, gone], follow={str(p): (0, p.stat().st_size)})
    d.start()
    try:
        time.sleep(0.1)
        gone.unlink()
        with pytest.raises(FileNotFoundError):
            d.result()
    finally:
        d.close()
