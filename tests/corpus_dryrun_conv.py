"""Issue 31, root causes 6 and 7: dry runs that passed where the run fails, Hub dry runs that wrote
caches, and conversions that wrote wrong results.

- ``dryrun-fs-*``: each file-system refusal twice, as a dry run and as the run; both exit alike with
  the same error line (the executor's preflight, ckpttools/io/preflight.py, runs in both). A
  directory read-only by its mode bits stops every user but root, so those cases expect what this
  user meets (root writes there, and then both runs succeed).
- ``dryrun-hub-*``: dry runs of Hub drafters (``{hub}``, tests/local_hub.py) with the Hugging Face
  home inside the case directory: a cache entry written would change the input tree, which
  tests/corpus.py's run_case checks.
- ``conv-*``: renames that map two sources to one name, target tensors of the wrong rank, and
  full-vocabulary d2t maps that an engine without d2t would drop.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tests.corpus import Case, Setup, both, copy_in, write
from tests.corpus_net import CALM_ENV

REMAP = ["remap", "d", "--to", "m.safetensors"]
BUILD = ["vocab", "build", "--frequencies", "freq.npy", "--draft-vocab-size", "16"]
DM = both(copy_in("d"), copy_in("m.safetensors"))
DRY = ["--dry-run"]


def _mode_bits_stop_this_user() -> bool:
    """Whether a directory of mode 555 stops this process writing in it (root writes there all the same)."""
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / "ro"
        p.mkdir()
        p.chmod(0o555)
        try:
            return not os.access(p, os.W_OK)
        finally:
            p.chmod(0o755)


def _read_only_dir(name: str, then: Setup | None = None) -> Setup:
    def s(d: Path, base: Path) -> None:
        (d / name).mkdir()
        if then is not None:
            then(d, base)
        (d / name).chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)

    return s


def _twice(name: str, argv: list[str], code: int, setup: Setup, out: str | None, err: str | None) -> list[Case]:
    """The same input as a dry run and as the run: the same exit code and error line."""
    return [
        Case(f"{name}-dry", [*argv, *DRY], code, setup, out=out, stderr_has=err),
        Case(f"{name}-run", argv, code, setup, out=out, stderr_has=err),
    ]


def _huge_drafter(d: Path, base: Path) -> None:
    """``hd``: a link to a drafter (built once, outside the case directory: run_case hashes every file
    under it) with one sparse tensor of twice this file system's free space; fix copies every tensor."""
    free = os.statvfs(d).f_bavail * os.statvfs(d).f_frsize
    root = base / f"huge-{os.getpid()}"
    if not root.exists():
        from ckpttools.io.checkpoint import open_checkpoint
        from ckpttools.io.plan import Data, Hole, PlannedTensor, WritePlan, execute

        with open_checkpoint(base / "d") as ck:
            ts = [
                PlannedTensor(n, t.dtype, t.shape, Data(np.asarray(ck.read(n)).copy())) for n, t in ck.tensors.items()
            ]
            cfg = dict(ck.config or {})
        ts.append(PlannedTensor("extra.huge", "F32", (2 * free // 4 + 1,), Hole()))
        tmp = base / f".huge-{os.getpid()}-{os.urandom(4).hex()}"
        execute(WritePlan("demo", str(tmp), ts, config=cfg))
        try:
            os.rename(tmp, root)
        except OSError:  # another worker made it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    (d / "hd").symlink_to(root)


def _fs_cases() -> list[Case]:
    stops = _mode_bits_stop_this_user()
    ro_code = 2 if stops else 0
    ro_err = "is not writable by this user" if stops else None
    afile = write("afile", "a file, not a directory")
    out = [
        *_twice(
            "dryrun-fs-parent-is-file-remap",
            [*REMAP, "-o", "afile/out"],
            2,
            both(DM, afile),
            None,
            "ckpt: error: afile/out: its parent afile is a file, so nothing can be written under it",
        ),
        *_twice(
            "dryrun-fs-grandparent-is-file-export",
            ["export", "d", "-o", "afile/sub/out"],
            2,
            both(copy_in("d"), afile),
            None,
            "its parent afile is a file",
        ),
        *_twice(
            "dryrun-fs-parent-is-file-build",
            [*BUILD, "-o", "afile/m.safetensors"],
            2,
            both(copy_in("freq.npy"), afile),
            None,
            "its parent afile is a file",
        ),
        *_twice(
            "dryrun-fs-parent-is-file-fix",
            ["validate", "d", "--fix", "-o", "afile/out"],
            2,
            both(copy_in("d"), afile),
            None,
            "its parent afile is a file",
        ),
        *_twice(
            "dryrun-fs-build-onto-dir-force",
            [*BUILD, "-o", "odir", "--force"],
            2,
            both(copy_in("freq.npy"), write("odir/keep.txt", "mine")),
            None,
            "ckpt: error: odir is a directory: a mapping file cannot replace it, --force or not",
        ),
        *_twice(
            "dryrun-fs-out-exists-fix",
            ["validate", "d", "--fix", "-o", "out"],
            2,
            both(copy_in("d"), write("out/keep.txt", "mine")),
            None,
            "ckpt: error: out already exists\n",
        ),
        *_twice(
            "dryrun-fs-read-only-parent-export",
            ["export", "d", "-o", "ro/out"],
            ro_code,
            both(copy_in("d"), _read_only_dir("ro")),
            "ro",
            ro_err,
        ),
        *_twice(
            "dryrun-fs-read-only-parent-remap",
            [*REMAP, "-o", "ro/new/out"],
            ro_code,
            both(DM, _read_only_dir("ro")),
            "ro",
            ro_err,
        ),
        *_twice(
            "dryrun-fs-read-only-parent-build",
            [*BUILD, "-o", "ro/m.safetensors"],
            ro_code,
            both(copy_in("freq.npy"), _read_only_dir("ro")),
            "ro",
            ro_err,
        ),
        *_twice(
            "dryrun-fs-read-only-fix-in-place",
            ["validate", "ro/d", "--fix", "--in-place"],
            ro_code,
            _read_only_dir("ro", copy_in("d", "ro/d")),
            "ro",
            ro_err,
        ),
        # the dry run only: an executor that lost its preflight would fill the disk before failing
        # (the run's refusal is tests/test_plan_checks.py's, on a plan whose source cannot be read)
        Case(
            "dryrun-fs-no-space-fix-dry",
            ["validate", "hd", "--fix", "-o", "out", *DRY],
            2,
            _huge_drafter,
            "out",
            stderr_has="free some space",
        ),
    ]
    # the parent need not exist: the run makes it, and so the dry run plans it
    out.append(Case("dryrun-fs-missing-parents-dry", [*REMAP, "-o", "a/b/out", *DRY], 0, DM, out="a"))
    return out


#: the hostile Hub's environment, with the Hugging Face home (and so ckpttools' cache) inside the case:
#: anything a dry run wrote there would change the input tree
HUB_HERE = {**CALM_ENV, "HF_HOME": "hfhome"}


def _hub_cases() -> list[Case]:
    mapping = copy_in("m.safetensors")
    home = write("hfhome/keep", "")  # an existing, empty cache
    cases = [
        ("export", ["export", "org/d", "-o", "out"], home, "nothing was written"),
        ("export-json", ["export", "org/d", "-o", "out", "--json"], home, '"written": false'),
        ("export-vllm", ["export", "org/d", "-o", "out", "--format", "vllm", "--target", "org/t"], home, None),
        ("export-trtllm", ["export", "org/d", "-o", "out", "--format", "trtllm", "--target", "org/t"], home, None),
        ("export-sharded", ["export", "org/sh", "-o", "out", "--max-shard-size", "50KB"], home, "nothing was written"),
        ("remap", ["remap", "org/d", "--to", "m.safetensors", "-o", "out"], both(home, mapping), "gathered"),
        (
            "remap-mean",
            ["remap", "org/d", "--to", "m.safetensors", "-o", "out", "--fill", "mean"],
            both(home, mapping),
            "every carried row",
        ),
        ("fix", ["validate", "org/d", "--fix", "-o", "out"], home, "nothing was written"),
        ("fix-target", ["validate", "org/d", "--target", "org/t", "--fix", "-o", "out"], home, None),
    ]
    out = [
        Case(f"dryrun-hub-{n}", [*argv, *DRY], 0, s, out="out", env=HUB_HERE, stdout_has=has)
        for n, argv, s, has in cases
    ]
    out += [
        Case(
            "dryrun-hub-no-cache-dir",
            ["export", "org/d", "-o", "out", *DRY],
            0,
            None,
            out="out",
            env={**CALM_ENV, "HF_HOME": "hfhome"},  # no hfhome at all: a dry run makes none
            stdout_has="nothing was written",
        ),
        Case(
            "dryrun-hub-parent-is-file",
            ["export", "org/d", "-o", "afile/out", *DRY],
            2,
            both(home, write("afile", "x")),
            env=HUB_HERE,
            stderr_has="its parent afile is a file",
        ),
        Case(
            "dryrun-hub-in-place-refused",
            ["validate", "org/d", "--fix", "--in-place", *DRY],
            2,
            home,
            env=HUB_HERE,
            stderr_has="never changed in place",
        ),
    ]
    for mode in ("small-html", "small-truncated", "range-wrong-offset", "listing-malformed"):
        out.append(Case(f"dryrun-hub-{mode}", ["export", f"org/d-{mode}", "-o", "out", *DRY], 2, home, "out", HUB_HERE))
    return out


# ----------------------------------------------------------------------------- conversions
def _edited(src: str, dst: str, edit: Any) -> Setup:
    """A copy of the drafter or target ``src`` as ``dst``, its tensors changed by ``edit(dict)``."""

    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import write_tensors
        from ckpttools.io.checkpoint import open_checkpoint

        with open_checkpoint(base / src) as ck:
            ts = {n: np.asarray(ck.read(n)).copy() for n in ck.tensors}
            cfg = dict(ck.config or {})
        edit(ts)
        write_tensors(d / dst, ts, cfg)

    return s


def _rename(old: str, *new: str) -> Any:
    def e(ts: dict) -> None:
        a = ts.pop(old)
        for n in new:
            ts[n] = a.copy()

    return e


def _full_vocab(name: str, ids: np.ndarray | None, **kw: Any) -> Setup:
    """A drafter whose draft vocab is the full vocab (1024), its slots mapped by ``ids`` (None: no map)."""

    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import build_drafter

        build_drafter(d / name, draft_vocab_size=1024, mapping=ids, **kw)

    return s


PERM = np.random.default_rng(31).permutation(1024)


def _without(name: str, tensor: str) -> Setup:
    def s(d: Path, base: Path) -> None:
        from ckpttools.demo.tiny import write_tensors
        from ckpttools.io.checkpoint import open_checkpoint

        with open_checkpoint(d / name) as ck:
            ts = {n: np.asarray(ck.read(n)).copy() for n in ck.tensors if n != tensor}
            cfg = dict(ck.config or {})
        write_tensors(d / (name + "2"), ts, cfg)

    return s


def _bad_d2t(d: Path, base: Path) -> None:
    """A full-vocab drafter whose d2t sends two slots to one token (and none to another)."""
    from ckpttools.demo.tiny import write_tensors
    from ckpttools.io.checkpoint import open_checkpoint

    _full_vocab("p", PERM)(d, base)
    with open_checkpoint(d / "p") as ck:
        ts = {n: np.asarray(ck.read(n)).copy() for n in ck.tensors if n != "t2d"}
        cfg = dict(ck.config or {})
    ids = ts["d2t"] + np.arange(1024)
    ids[1] = ids[0]
    ts["d2t"] = ids - np.arange(1024)
    write_tensors(d / "bad", ts, cfg)


def _conv_cases() -> list[Case]:
    two_norms = _edited("d", "dup", _rename("norm.weight", "module.norm.weight", "eagle.norm.weight"))
    onto_kept = _edited("d", "dup", _rename("norm.weight", "model.norm.weight", "module.norm.weight"))
    two_maps = _edited("d", "dup", lambda ts: ts.__setitem__("hot_token_id", ts["d2t"].copy()))
    head_1d = _edited("t", "t1", lambda ts: ts.__setitem__("lm_head.weight", ts["lm_head.weight"][:, 0].copy()))

    def embed_1d(ts: dict) -> None:
        ts.pop("lm_head.weight")
        emb = next(n for n in ts if n.endswith("embed_tokens.weight"))
        ts[emb] = ts[emb][:, 0].copy()

    fill_t = ["--fill", "target", "--target", "t1", "-o", "out"]
    trt = ["--format", "trtllm", "--target", "t"]
    perm = both(_full_vocab("p", PERM), copy_in("t"))
    out = [
        *_twice(
            "conv-fix-two-to-one",
            ["validate", "dup", "--fix", "-o", "out"],
            2,
            two_norms,
            "out",
            "would both be written as 'norm.weight'",
        ),
        *_twice(
            "conv-fix-rename-onto-kept",
            ["validate", "dup", "--fix", "-o", "out"],
            2,
            onto_kept,
            "out",
            "(one name to the engine)",
        ),
        *_twice(
            "conv-export-two-to-one", ["export", "dup", "-o", "out"], 2, two_norms, "out", "would both be written as"
        ),
        *_twice(
            "conv-remap-two-d2t",
            ["remap", "dup", "--to", "m.safetensors", "-o", "out"],
            2,
            both(two_maps, copy_in("m.safetensors")),
            "out",
            "'d2t' and 'hot_token_id'",
        ),
        *_twice(
            "conv-remap-fill-target-1d-head",
            [*REMAP, *fill_t],
            2,
            both(DM, head_1d),
            "out",
            "needs a 2-D [rows, hidden] matrix",
        ),
        *_twice(
            "conv-remap-fill-target-1d-embed",
            [*REMAP, *fill_t],
            2,
            both(DM, _edited("t", "t1", embed_1d)),
            "out",
            "needs a 2-D",
        ),
        Case(
            "conv-trtllm-perm-d2t",
            ["export", "p", "-o", "out", *trt],
            0,
            perm,
            "out",
            stdout_has="rows put in target order",
        ),
        Case(
            "conv-trtllm-perm-d2t-dry",
            ["export", "p", "-o", "out", *trt, *DRY],
            0,
            perm,
            "out",
            stdout_has="lm_head.weight",
        ),
        Case(
            "conv-trtllm-identity-d2t",
            ["export", "p", "-o", "out", *trt],
            0,
            both(_full_vocab("p", np.arange(1024)), copy_in("t")),
            "out",
            stdout_has="it was the identity",
        ),
        Case(
            "conv-trtllm-no-map",
            ["export", "p", "-o", "out", *trt],
            0,
            both(_full_vocab("p", None), copy_in("t")),
            "out",
        ),
        Case(
            "conv-vllm-perm-d2t",
            ["export", "p", "-o", "out", "--format", "vllm", "--target", "t"],
            0,
            perm,
            "out",
            stdout_has="rows put in target order",
        ),
        Case(
            "conv-vllm-perm-d2t-fp16",
            ["export", "p", "-o", "out", "--format", "vllm", "--dtype", "fp16"],
            0,
            _full_vocab("p", PERM),
            "out",
            stdout_has="rows put in target order",
        ),
        Case(
            "conv-vllm-identity-d2t",
            ["export", "p", "-o", "out", "--format", "vllm"],
            0,
            _full_vocab("p", np.arange(1024)),
            "out",
            stdout_has="it was the identity",
        ),
        Case(
            "conv-sglang-perm-d2t-kept",
            ["export", "p", "-o", "out"],
            0,
            _full_vocab("p", PERM),
            "out",
            stdout_has="kept as it is",
        ),
        *_twice(
            "conv-trtllm-perm-no-head",
            ["export", "p2", "-o", "out", *trt],
            2,
            both(perm, _without("p", "lm_head.weight")),
            "out",
            "no lm_head of 1024 rows",
        ),
        *_twice(
            "conv-vllm-perm-no-head",
            ["export", "p2", "-o", "out", "--format", "vllm"],
            2,
            both(_full_vocab("p", PERM), _without("p", "lm_head.weight")),
            "out",
            "no lm_head",
        ),
        *_twice(
            "conv-trtllm-d2t-not-a-permutation",
            ["export", "bad", "-o", "out", *trt],
            2,
            both(_bad_d2t, copy_in("t")),
            "out",
            None,
        ),
    ]
    return out


def dryrun_conv_cases() -> list[Case]:
    return _fs_cases() + _hub_cases() + _conv_cases()
