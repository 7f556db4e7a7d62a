"""Hostile ``--dry-run`` runs (issue 21): a dry run is refused where the run would be, prints
its plan where the run would write, and in every case writes nothing: no output, no
temporary, no change to an input (tests/corpus.py's run_case checks all three)."""

from __future__ import annotations

import os
import shutil

from tests.corpus import Case, both, copy_in, damaged_safetensors, write

REMAP = ["remap", "d", "--to", "m.safetensors", "-o", "out", "--dry-run"]
EXPORT = ["export", "d", "-o", "out", "--dry-run"]
FIX = ["validate", "d", "--target", "t", "--fix", "-o", "out", "--dry-run"]
BUILD = ["vocab", "build", "--frequencies", "freq.npy", "--draft-vocab-size", "16", "-o", "out", "--dry-run"]
DM = both(copy_in("d"), copy_in("m.safetensors"))
DT = both(copy_in("d"), copy_in("t"))


def _aimed_at_inputs() -> list[Case]:
    return [
        Case("dry-out-is-input-remap", [*REMAP[:-3], "-o", "d", "--force", "--dry-run"], 2, DM),
        Case("dry-out-is-mapping-remap", [*REMAP[:-3], "-o", "m.safetensors", "--force", "--dry-run"], 2, DM),
        Case("dry-out-inside-input-export", ["export", "d", "-o", "d/sub", "--force", "--dry-run"], 2, copy_in("d")),
        Case(
            "dry-out-link-to-input-export",
            ["export", "d", "-o", "l", "--force", "--dry-run"],
            2,
            both(copy_in("d"), lambda d, b: (d / "l").symlink_to("d")),
        ),
        Case("dry-out-is-target-fix", [*FIX[:-3], "-o", "t", "--force", "--dry-run"], 2, DT),
        Case("dry-out-is-freq-build", [*BUILD[:-3], "-o", "freq.npy", "--force", "--dry-run"], 2, copy_in("freq.npy")),
        Case("dry-cwd-is-input-export", ["export", ".", "-o", "..", "--force", "--dry-run"], 2, copy_in("d"), cwd="d"),
    ]


def _existing_outputs() -> list[Case]:
    """OUT exists: refused as the run would be; with --force, planned, and OUT left as it was
    (no ``out=``: OUT is part of the tree run_case checks)."""
    keep = write("out/keep.txt", "mine")
    return [
        Case("dry-out-exists-remap", REMAP, 2, both(DM, keep), stderr_has="already exists"),
        Case("dry-out-exists-build", BUILD, 2, both(copy_in("freq.npy"), write("out", "mine"))),
        Case("dry-out-exists-force-remap", [*REMAP, "--force"], 0, both(DM, keep), stdout_has="nothing was written"),
        Case("dry-out-exists-force-export", [*EXPORT, "--force"], 0, both(copy_in("d"), keep)),
        Case("dry-out-exists-force-fix", [*FIX, "--force"], 0, both(DT, keep)),
        Case(
            "dry-out-exists-force-build",
            [*BUILD, "--force"],
            0,
            both(copy_in("freq.npy"), write("out", "mine")),
        ),
        Case("dry-fix-in-place", ["validate", "d", "--fix", "--in-place", "--dry-run"], 0, copy_in("d")),
    ]


def _hostile_inputs() -> list[Case]:
    out = []
    for name in ("short", "not-json", "header-absurd"):
        data = damaged_safetensors()[name]
        dd = both(copy_in("d", "dd"), write("dd/model.safetensors", data))
        out += [
            Case(
                f"dry-st-{name}-remap",
                ["remap", "dd", "--to", "m.safetensors", "-o", "out", "--dry-run"],
                2,
                both(dd, copy_in("m.safetensors")),
                out="out",
            ),
            Case(f"dry-st-{name}-export", ["export", "dd", "-o", "out", "--dry-run"], 2, dd, out="out"),
            Case(f"dry-st-{name}-fix", ["validate", "dd", "--fix", "-o", "out", "--dry-run"], 2, dd, out="out"),
        ]

    def pickles(d, b) -> None:  # type: ignore[no-untyped-def]
        shutil.copytree(b / "d", d / "d")
        for n in ("optimizer.pkl", "state.ckpt", "training_args.bin"):
            (d / "d" / n).write_bytes(b"\x80\x04K\x01.")
        (d / "secret").write_text("outside")
        os.symlink(d / "secret", d / "d" / "tokenizer_config.json")

    out += [
        Case("dry-pickles-export", EXPORT, 0, pickles, out="out", stdout_has="optimizer.pkl (weights or a pickle)"),
        Case(
            "dry-link-outside-remap",
            REMAP,
            0,
            both(pickles, copy_in("m.safetensors")),
            out="out",
            stdout_has="a link that leads outside the checkpoint",
        ),
        Case("dry-json-remap", [*REMAP, "--json"], 0, DM, out="out", stdout_has='"written": false'),
        Case("dry-json-fix", [*FIX, "--json"], 0, DT, out="out", stdout_has='"operation": "fix"'),
        Case("dry-mean-reads-rows", [*REMAP, "--fill", "mean"], 0, DM, out="out", stdout_has="every carried row"),
        Case("dry-fill-target-no-target", [*REMAP, "--fill", "target"], 2, DM, out="out"),
        Case(
            "dry-hub-offline-remap",
            ["remap", "org/x", "--to", "m.safetensors", "-o", "out", "--dry-run"],
            2,
            copy_in("m.safetensors"),
            out="out",
        ),
        Case("dry-without-fix", ["validate", "d", "--dry-run"], 2, copy_in("d")),
        Case(
            "dry-build-too-many",
            [*BUILD[:-3], "-o", "out", "--draft-vocab-size", "5000", "--dry-run"],
            2,
            copy_in("freq.npy"),
            out="out",
        ),
        Case("dry-missing-drafter", ["export", "nope", "-o", "out", "--dry-run"], 2, out="out"),
        Case(
            "dry-sharded-export",
            ["export", "sh", "-o", "out", "--max-shard-size", "50KB", "--dry-run"],
            0,
            copy_in("sh"),
            out="out",
            stdout_has="nothing was written",
        ),
    ]
    return out


def dry_run_cases() -> list[Case]:
    return _aimed_at_inputs() + _existing_outputs() + _hostile_inputs()
