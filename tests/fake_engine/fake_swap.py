"""What the fake engines here (``sglang.launch_server``, ``vllm.entrypoints.openai.api_server``)
share: their misbehaviour modes, and a rank's answer to a swap as
ckpttools/engines/serverside/ckpt_swap.py writes it (digests of the drafter's bytes).

``CKPT_FAKE_ENGINE=MODE`` picks the misbehaviour (several joined by ``+``); a number at the end
of one is the swap request it happens at (1: the first drafter's). Unset: the sglang fake dies on
its first request, as a server killed for memory does.

- ``honest``: no misbehaviour.
- ``extra-rank-N``: at swap N an answer also comes for a rank 1 the server does not have, every
  digest in both answers wrong (a TP-1 server answering for 2 ranks).
- ``rpc-list-N`` (vLLM): swap N's ``/collective_rpc`` answer is a list, not ``{"results": [...]}``.
- ``die-in-swap-N``: at swap N the process is killed (SIGKILL), after an out-of-memory line.
- ``die-in-measure-N``: the first request measured after swap N kills the process so.
- ``stall-swap-N``: swap N is answered after 30 s.
- ``refuse-swap-N``: swap N is refused by its rank (``refused`` in the answer).
- ``weights-null``: the target digest is refused by its rank (nothing digested).
- ``tamper-target-N``: from swap N on, the target digest differs in one tensor (a swap that wrote
  the target).
- ``own-fails``: a server started without the swap route (a drafter's own server) exits at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from typing import Any

MODES = [m for m in (os.environ.get("CKPT_FAKE_ENGINE") or "").split("+") if m]

_DTYPES = {"BF16": ("torch.bfloat16", 2), "F32": ("torch.float32", 4), "F16": ("torch.float16", 2)}
_DTYPES |= {"I64": ("torch.int64", 8), "BOOL": ("torch.bool", 1)}


def at(kind: str) -> int | None:
    """The swap number the modes misbehave at for ``kind`` (None: they do not)."""
    for mode in MODES:
        m = re.fullmatch(rf"{kind}-(\d+)", mode)
        if m:
            return int(m.group(1))
    return None


def kill(line: str) -> None:
    """Die as a server the kernel killed for memory: its last log lines, then SIGKILL."""
    print(line, flush=True)
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 79.00 GiB", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def answers(path: str, n: int, custom_loader: bool) -> list[dict[str, Any]]:
    """The rank answers to swap ``n`` of the drafter at ``path`` on a TP-1 server, as the modes bend them."""
    import ckpt_swap  # on PYTHONPATH: ckpttools puts the server-side code there at launch

    from ckpttools.io.checkpoint import open_checkpoint

    spec = json.loads(os.environ.get("CKPT_SWAP_SPEC") or "{}")
    with open_checkpoint(path) as ck:
        files = [n for n in ck.tensors if not (custom_loader and n in ("d2t", "t2d"))]  # the loader pops both
        skipped = [n for n in files if ckpt_swap._never(n, spec)]
        loaded = [n for n in files if n not in skipped]
        digests, dtypes, numel = {}, {}, {}
        for p, parts in ckpt_swap._expected(loaded, spec, set()).items():
            data = b"".join(bytes(ck.read_bytes(name)) for name, _ in parts)
            dtype, size = _DTYPES[ck.tensors[parts[0][0]].dtype]
            digests[p], dtypes[p], numel[p] = hashlib.sha256(data).hexdigest(), dtype, len(data) // size
        maps = int("d2t" in ck.tensors)
    one = {"rank": 0, "path": path, "skipped": skipped, "refused": None, "loaded": loaded, "maps_replaced": maps}
    out = [{**one, "digests": digests, "dtypes": dtypes, "numel": numel}]
    if at("extra-rank") == n:
        out = [{**a, "digests": {p: "0" * 64 for p in digests}} for a in (out[0], {**out[0], "rank": 1})]
    if at("refuse-swap") == n:
        out = [{"rank": 0, "path": path, "refused": "RuntimeError: the fake engine refuses this swap"}]
    return out


def target_answer(swaps: int) -> dict[str, Any]:
    """Rank 0's target digest (ckpt_digest.model_digest's fields) after ``swaps`` swaps, as the modes bend it."""
    if "weights-null" in MODES:
        return {"rank": 0, "op": "target_digest", "refused": "RuntimeError: the fake engine digests nothing"}
    tampered = at("tamper-target") is not None and swaps >= (at("tamper-target") or 0)
    sums = {"model.embed_tokens.weight": ("1" if tampered else "0") * 16, "model.norm.weight": "2" * 16}
    digest = hashlib.sha256(json.dumps(sums, sort_keys=True).encode()).hexdigest()
    one = {"rank": 0, "op": "target_digest", "class": "LlamaForCausalLM", "parameters": 2, "buffers": 0}
    return one | {"packed": 0, "bytes": 4096, "digest": digest, "sums": sums, "seconds": 0.001}
