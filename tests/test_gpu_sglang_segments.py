"""SGLang 0.5.17 on the GPU machine (marker gpu): three drafters (4.0, 1.0, 4.0) swapped into one
server, then ``ckpt logs`` on that server's log: one segment per swap, each with the figure the
swap's own measurement gave, where before the log read as one merged figure (issue 33 item 4).
Prints the segments and writes them to $CKPT_GPU_LOGS/segments.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckpttools.measuring.compare import compare_drafters
from ckpttools.measuring.logs import read_logs

from .swap_pairs import build
from .test_gpu_sglang_swap import KW, LOGS, _launch

pytestmark = pytest.mark.gpu


def test_the_servers_log_splits_at_each_swap(tmp_path: Path) -> None:
    tp, ds, prompts = build(tmp_path / "pairs", "sglang")
    order = ["id", "swap", "perm"]
    rep = compare_drafters(
        _launch(tp, ds["id"], "segments.log"),
        [str(ds[k]) for k in order],
        engine="sglang",
        **{**KW, "prompts": str(prompts)},
    )
    measured = {Path(e["drafter"]).name: e["accept_length"] for e in rep.drafters}
    lr = read_logs([str(LOGS / "segments.log")])
    (LOGS / "segments.json").write_text(json.dumps(lr.to_dict()["segments"], indent=1))
    print("compare:", measured)
    print("ckpt logs:", lr.verdict)
    for s in lr.segments:
        print(f"  {s['verdict']}  lines {s['first_line']}-{s['last_line']}, event {s['event']} {s['event_status']}")
    swapped = [s for s in lr.segments if s["event"] is not None and s["accept_length"] is not None]
    assert len(swapped) >= 3, "one segment with figures per drafter swapped in"
    got = [s["accept_length"] for s in swapped[-3:]]
    want = [measured[f"sglang-{k}"] for k in order]
    assert got[0] == pytest.approx(4.0, abs=0.05) and got[2] == pytest.approx(4.0, abs=0.05) and got[1] < 1.1
    assert got == pytest.approx(want, abs=0.15), (got, want)  # windows (estimated) against the requests' counts
    assert lr.accept_length is not None and lr.accept_length < 3.9  # the one merged figure of before
