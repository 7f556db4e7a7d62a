"""The manifest's digest of a source whose data section is one kernel copy trails that copy
(ckpttools.io.manifest.BackgroundDigests ``follow``): the digest is the file's, whatever the pace,
and a digest that is never told of the copy still finishes."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import xxhash

from ckpttools.demo.tiny import build_drafter
from ckpttools.io.manifest import FOLLOW_CHUNK, BackgroundDigests, file_digest
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
