"""``ckpt serve`` and ``ckpt swap`` on SGLang 0.5.17, one H200 (marker gpu; run by hand, see
../shared/device/sglang/README.md): one server started by ``ckpt serve`` with the guarded hook,
then the vLLM CPU test's sequence (the matched drafter 4.0; the noise drafter under
``--min-accept-len 2`` rolled back, checked, exit 1; the drafter in another mapping 4.0; a wrong key
refused by SGLang's admin key, a drafter outside the root by the hook), then 100 swaps on the same
server, each checked (every rank, the read-back, the cached map, the digest, /server_info's
weight_version naming it), and GPU memory after the loop within 1% of before. Prints the figures
and writes them to $CKPT_GPU_LOGS/serve-*.json."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .procs import ledger_pids
from .swap_pairs import build
from .test_gpu_sglang import SGL_ARGS

pytestmark = pytest.mark.gpu
from .test_gpu_sglang import LOGS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
KEY = "gpu-rl-key"
LOOP = 100


def _gpu_used_mib() -> float:
    """Memory in use on GPU 0, all processes (nvidia-smi; the server's pool and allocator included)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return float(out.stdout.strip().splitlines()[0])


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import httpx

    t0 = time.monotonic()
    while time.monotonic() - t0 < 400:
        assert proc.poll() is None, log.read_text()[-4000:] if log.exists() else "ckpt serve exited"
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise AssertionError("not ready: " + log.read_text()[-4000:])


def _label(url: str) -> str | None:
    import httpx

    return httpx.get(url + "/server_info", timeout=30).json().get("weight_version")


def test_ckpt_serve_sequence_then_100_checked_swaps_with_flat_memory(tmp_path: Path) -> None:
    from ckpttools.engines.guarded import drafter_digest
    from ckpttools.engines.launch import free_port
    from ckpttools.errors import ServerError
    from ckpttools.measuring.serve import swap_drafter

    LOGS.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "drafters"
    tp, ds, prompts = build(root, "sglang")
    outside = tmp_path / "elsewhere"
    shutil.copytree(ds["id"], outside)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log, ledger = LOGS / "serve-sglang.log", tmp_path / "ledger.jsonl"
    log.unlink(missing_ok=True)
    env = {**os.environ, "CKPT_LAUNCH_LEDGER": str(ledger), "CKPT_API_KEY": KEY, "SGLANG_ENABLE_JIT_DEEPGEMM": "0"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(REPO)) if p)
    argv = [sys.executable, "-m", "ckpttools", "serve", "--engine", "sglang", "--engine-python", sys.executable]
    argv += ["--target", str(tp), "--drafter", str(ds["id"]), "--swap-root", str(root), "--port", str(port)]
    argv += ["--steps", "3", "--log", str(log), *[f"--engine-arg={a}" for a in SGL_ARGS]]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
    kw = {"api_key": KEY, "prompts": str(prompts), "max_new_tokens": 32, "ignore_eos": True}
    figures: dict[str, object] = {}
    try:
        _wait(url, proc, log)
        figures["ready_s"] = round(time.monotonic() - t0, 1)
        first = swap_drafter(url, ds["id"], check=6, **kw)
        noise = swap_drafter(url, ds["swap"], check=6, min_accept_len=2.0, **kw)
        perm = swap_drafter(url, ds["perm"], check=6, **kw)
        with pytest.raises(ServerError, match="HTTP 401"):
            swap_drafter(url, ds["id"], api_key="not-the-key")
        with pytest.raises(ServerError, match="not under the swap root"):
            swap_drafter(url, outside, api_key=KEY)
        seq = [(r.swap.drafter, r.check.accept_length if r.check else None, r.exit_code) for r in (first, noise, perm)]
        figures["sequence"] = seq
        print("\nsequence:", seq, "label after:", _label(url))
        before_mib = _gpu_used_mib()
        digests = {k: drafter_digest(ds[k]) for k in ("id", "perm")}
        secs = []
        t1 = time.monotonic()
        for i in range(LOOP):
            k = ("id", "perm")[i % 2]
            r = swap_drafter(url, ds[k], api_key=KEY)
            assert r.exit_code == 0 and r.swap.ok and r.after.digest == digests[k], r
            assert r.swap.maps_replaced >= 1 and "read back" in r.swap.checked
            assert _label(url) == digests[k][:16]
            secs.append(r.swap.seconds)
        loop_s = time.monotonic() - t1
        after_mib = _gpu_used_mib()
        last = swap_drafter(url, ds["perm"], check=6, **kw)
        figures |= {
            "loop_swaps": LOOP,
            "loop_s": round(loop_s, 1),
            "swap_s_min_median_max": [round(min(secs), 3), round(sorted(secs)[LOOP // 2], 3), round(max(secs), 3)],
            "gpu_used_mib_before": before_mib,
            "gpu_used_mib_after": after_mib,
            "gpu_used_change_pct": round(100 * (after_mib - before_mib) / before_mib, 3),
            "accept_length_after_loop": last.check.accept_length if last.check else None,
        }
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        for pid in ledger_pids(ledger):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    lines = [ln for ln in log.read_text().splitlines() if "ckpttools swap: drafter=" in ln]
    figures["hook_lines"] = len(lines)
    logs = subprocess.run(
        [sys.executable, "-m", "ckpttools", "logs", str(log), "--json"], capture_output=True, text=True, env=env
    )
    segs = json.loads(logs.stdout).get("segments") if logs.stdout.strip().startswith("{") else None
    figures["segments"] = None if segs is None else [s.get("accept_length") for s in segs[:4]] + [f"... {len(segs)}"]
    (LOGS / "serve-sglang.json").write_text(json.dumps(figures, indent=1))
    print("figures:", json.dumps(figures, indent=1))
    assert first.check is not None and first.check.accept_length == 4.0
    assert noise.exit_code == 1 and noise.rolled_back and noise.rollback is not None and noise.rollback.ok
    assert noise.check is not None and noise.check.accept_length is not None and noise.check.accept_length < 1.1
    assert noise.after.digest == drafter_digest(ds["id"])
    assert perm.check is not None and perm.check.accept_length == 4.0
    assert abs(figures["gpu_used_change_pct"]) <= 1.0  # type: ignore[arg-type]
    assert figures["accept_length_after_loop"] == 4.0
    assert len(lines) == 4 + LOOP + 1  # id, swap, id (rollback), perm; the loop; the last perm
    # segments land from the logs engineer (issue 33 item 4): one per drafter loaded, launch included
    assert segs is not None and len(segs) == len(lines) + 1 and all("accept_length" in s for s in segs)
