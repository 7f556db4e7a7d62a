"""SGLang 0.5.17 on the GPU machine (marker gpu): several drafters measured on one server by
swapping each in (ckpttools.engines.swap's custom-loader route), against each on its own
server. Figures are printed and written to $CKPT_GPU_LOGS/swap-*.json for the closing note."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from ckpttools.engines.launch import LaunchSpec, free_port
from ckpttools.measuring.compare import compare_drafters
from ckpttools.measuring.verify import verify

from .swap_pairs import build
from .test_gpu_sglang import LOGS, SGL_ARGS

pytestmark = pytest.mark.gpu
KW = {"prompts": None, "num_prompts": 6, "max_new_tokens": 32, "ignore_eos": True}


def _launch(target: Path, drafter: Path, log: str) -> LaunchSpec:
    LOGS.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(
        "sglang",
        str(target),
        str(drafter),
        port=free_port(),
        steps=3,
        engine_args=list(SGL_ARGS),
        python=sys.executable,
        log_path=str(LOGS / log),
        ready_timeout=400,
    )


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    tp, ds, prompts = build(tmp_path_factory.mktemp("swap"), "sglang")
    return tp, ds, {**KW, "prompts": str(prompts)}


def _figures(rep) -> list[tuple[str, str, float | None]]:
    return [(Path(e["drafter"]).name, e["placed"], e["accept_length"]) for e in rep.drafters]


def test_swaps_on_one_server_in_either_order(known):
    tp, ds, kw = known
    order = ["id", "swap", "perm", "half", "twolayer"]
    fwd = compare_drafters(_launch(tp, ds["id"], "swap-fwd.log"), [str(ds[k]) for k in order], engine="sglang", **kw)
    back = compare_drafters(
        _launch(tp, ds["half"], "swap-back.log"), [str(ds[k]) for k in reversed(order[:4])], engine="sglang", **kw
    )
    for name, rep in (("fwd", fwd), ("back", back)):
        (LOGS / f"swap-{name}.json").write_text(json.dumps(rep.to_dict(), indent=1))
        print(name, rep.seconds, rep.server_starts, rep.target_check, _figures(rep))
        for e in rep.drafters:
            print("  ", Path(e["drafter"]).name, e["placed"], e["swap"])
    f = {Path(e["drafter"]).name: e for e in fwd.drafters}
    b = {Path(e["drafter"]).name: e for e in back.drafters}
    assert f["sglang-id"]["accept_length"] == 4.0 and f["sglang-perm"]["accept_length"] == 4.0
    assert f["sglang-swap"]["accept_length"] < 1.1
    assert [f[k]["placed"] for k in ("sglang-id", "sglang-swap", "sglang-perm", "sglang-half")] == ["swap"] * 4
    assert f["sglang-twolayer"]["placed"] == "own server" and "config differs" in f["sglang-twolayer"]["swap"]["why"]
    assert fwd.server_starts == 2 and back.server_starts == 1
    assert fwd.target_unchanged is True and back.target_unchanged is True
    for k in ("sglang-id", "sglang-swap", "sglang-perm", "sglang-half"):
        assert b[k]["placed"] == "swap" and b[k]["accept_length"] == f[k]["accept_length"], k


def test_each_on_its_own_server_gives_the_same_figures(known):
    tp, ds, kw = known
    got, t0 = {}, time.monotonic()
    for k in ("id", "swap", "perm", "half"):
        rep = verify(None, engine="sglang", launch=_launch(tp, ds[k], f"own-{k}.log"), **kw)
        got[k] = rep.accept_length
    seconds = time.monotonic() - t0
    (LOGS / "swap-own.json").write_text(json.dumps({"accept_length": got, "seconds": seconds}, indent=1))
    print("own servers:", got, f"{seconds:.1f} s for 4 launches")
    assert got["id"] == got["perm"] == 4.0 and got["swap"] < 1.1  # by construction; "half" is measured
    fwd = LOGS / "swap-fwd.json"  # the swap run's figures, when it ran in the same session
    if fwd.exists():
        swapped = {
            Path(e["drafter"]).name.removeprefix("sglang-"): e["accept_length"]
            for e in json.loads(fwd.read_text())["drafters"]
        }
        assert all(swapped[k] == got[k] for k in got), (swapped, got)


def test_a_swap_that_cannot_replace_the_map_falls_back_to_its_own_server(known, monkeypatch):
    """The loader is told a worker class the release does not have (as a renamed class in a newer
    release would be): it loads the weights but replaces no cached map, so the drafter with another
    mapping is not measured there; it gets its own server, and the report says why."""
    from ckpttools.engines import swap

    real = swap.server_spec
    monkeypatch.setattr(swap, "server_spec", lambda r, d: {**real(r, d), "worker_classes": ["NoSuchDraftWorker"]})
    tp, ds, kw = known
    rep = compare_drafters(_launch(tp, ds["id"], "swap-nomap.log"), [str(ds["perm"])], engine="sglang", **kw)
    (LOGS / "swap-nomap.json").write_text(json.dumps(rep.to_dict(), indent=1))
    e = rep.drafters[0]
    print("no map:", e["placed"], e["swap"]["why"], e["accept_length"])
    assert e["placed"] == "own server" and "cached draft-to-target map" in e["swap"]["why"]
    assert e["accept_length"] == 4.0 and rep.server_starts == 2
