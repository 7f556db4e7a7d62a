"""Another drafter into a running server, without a restart: the client side.

The engine-release table (``EngineRelease.drafter_swap``) says how a release allows it; the code
that runs inside the engine is ``engines/serverside/ckpt_swap.py`` (put on the server's PYTHONPATH
at launch). After each swap the drafter's weights are read back, where the engine allows, and held
against the file's bytes; a swap that is refused, reaches fewer ranks than the server has, replaces
no cached mapping the drafter needs, or reads back other bytes, is a failed swap.

- vLLM (worker extension): ``POST /collective_rpc {"method": "ckpt_swap", "args": [path]}`` runs in
  every worker; then ``POST /reset_prefix_cache``.
- SGLang 0.5.17 (custom weight loader): ``POST /update_weights_from_tensor`` with one payload per TP
  rank: a ``torch.ByteTensor`` of the request's JSON, written here as pickle opcodes (no torch
  needed here); each rank writes its answer to a file; ``flush_cache`` resets the counters.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import importlib.util
import json
import math
import os
import pickle
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpttools.errors import ServerError
from ckpttools.io.inputs import loads_json, read_json

__all__ = ["SERVERSIDE", "SwapResult", "swap_route", "prepare_launch", "swap_in", "target_checksum", "swappable"]

SERVERSIDE = Path(__file__).resolve().parent / "serverside"
_TORCH_DTYPES = {"BF16": "torch.bfloat16", "F16": "torch.float16", "F32": "torch.float32", "I64": "torch.int64"}
_IGNORED_CONFIG_KEYS = ("_name_or_path", "transformers_version")


@dataclass
class SwapResult:
    """How one drafter was put in place on a running server."""

    ok: bool
    seconds: float
    how: str
    ranks: int = 0
    maps_replaced: int = 0
    checked: str = "not checked"
    why: str | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("answers")
        return d


def swap_route(release: Any) -> dict[str, Any] | None:
    """The release's swap route (None: it has none, each drafter needs its own server)."""
    return release.drafter_swap.value if release is not None else None


@functools.cache
def _server_module() -> Any:
    """engines/serverside/ckpt_swap.py, loaded here too: the same name rules on both sides."""
    spec = importlib.util.spec_from_file_location("ckpttools_serverside_ckpt_swap", SERVERSIDE / "ckpt_swap.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def server_spec(release: Any, drafter: str | Path) -> dict[str, Any]:
    """What the server-side code reaches inside the engine: the route's facts and the name rules
    of the loader the drafter's class uses (both from the release table)."""
    from ckpttools.io.inputs import read_json

    cfg = read_json(Path(drafter) / "config.json", "config")
    archs = cfg.get("architectures") or [None]
    dc = release.drafter_class(archs[0])
    rules = release.loaders.value.get(dc.loader) if dc is not None else None
    route = dict(swap_route(release) or {})
    out: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in route.items() if k != "flags"}
    if rules is not None:
        out["renames"] = [list(r) for r in rules.substr_renames if not r[0].startswith("^")]
        out["stacked"] = [list(s) for s in rules.stacked]
        out["prefix"] = rules.prefix
        out["no_prefix"] = ["lm_head."]
        out["d2t_to"] = rules.d2t_to
        out["never_loaded"] = sorted({*route.get("never_loaded", ()), *rules.skip})
    return out


def prepare_launch(spec: Any, release: Any) -> Any:
    """The launch spec with the swap route enabled: its flags, its environment, the server-side
    code on PYTHONPATH, and the facts it needs in CKPT_SWAP_SPEC."""
    route = swap_route(release)
    assert route is not None and spec.drafter is not None
    inherited = spec.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # the server's own path stays
    path = os.pathsep.join(p for p in (str(SERVERSIDE), inherited) if p)
    env = {**spec.env, **route.get("env", {}), "PYTHONPATH": path}
    env["CKPT_SWAP_SPEC"] = json.dumps(server_spec(release, spec.drafter))
    flags = [a for k, v in route["flags"].items() for a in ("--" + k, v)]
    return dataclasses.replace(spec, engine_args=[*spec.engine_args, *flags], env=env)


def swappable(running: str | Path, other: str | Path) -> str | None:
    """Why ``other`` cannot take ``running``'s place on its server (None: it can): its config
    or its tensors' names, shapes and dtypes differ, so the running model would not be it."""
    from ckpttools.io.checkpoint import open_checkpoint

    with open_checkpoint(running) as a, open_checkpoint(other) as b:
        ca = {k: v for k, v in (a.config or {}).items() if k not in _IGNORED_CONFIG_KEYS}
        cb = {k: v for k, v in (b.config or {}).items() if k not in _IGNORED_CONFIG_KEYS}
        if ca != cb:
            keys = sorted(k for k in {*ca, *cb} if ca.get(k) != cb.get(k))
            return f"its config differs from the running drafter's in {', '.join(keys[:5])}"
        ta = {n: (t.dtype, tuple(t.shape)) for n, t in a.tensors.items()}
        tb = {n: (t.dtype, tuple(t.shape)) for n, t in b.tensors.items()}
        if ta != tb:
            diff = sorted(n for n in {*ta, *tb} if ta.get(n) != tb.get(n))
            return f"its tensors differ from the running drafter's in names, shapes or dtypes ({', '.join(diff[:3])})"
    return None


def _file_digests(ck: Any, expected: dict[str, list[tuple[str, Any]]]) -> dict[str, tuple[str, str, int]]:
    """Each parameter's sha256 as the file's bytes make it (stacked parts concatenated in shard
    order, as the engine fuses them along their first dimension), its dtype and element count."""
    out = {}
    for pname, parts in expected.items():
        names = [n for n, _ in parts]
        if not all(n in ck.tensors for n in names):
            continue
        h = hashlib.sha256()
        for n in names:
            h.update(bytes(ck.read_bytes(n)))
        numel = sum(math.prod(ck.tensors[n].shape) for n in names)
        out[pname] = (h.hexdigest(), ck.tensors[names[0]].dtype, numel)
    return out


def _rank_answer(a: Any, where: str) -> dict[str, Any]:
    """One rank's answer, its fields of the types ckpt_swap.py writes; anything else is a ServerError."""
    if not isinstance(a, dict):
        raise ServerError(f"{where}: a rank answered {str(a)[:80]!r}, not an object")
    for key, kind in (("digests", dict), ("dtypes", dict), ("numel", dict), ("loaded", list), ("skipped", list)):
        if key in a and not isinstance(a[key], kind):
            raise ServerError(f"{where}: a rank's {key!r} is {type(a[key]).__name__}, not {kind.__name__}")
    maps = a.get("maps_replaced", 0)
    if isinstance(maps, bool) or not isinstance(maps, int) or maps < 0:
        raise ServerError(f"{where}: a rank's 'maps_replaced' is {maps!r}, not a count")
    if a.get("refused") is not None and not isinstance(a["refused"], str):
        raise ServerError(f"{where}: a rank's 'refused' is {type(a['refused']).__name__}, not text")
    return a


def _check(answers: list[dict[str, Any]], ck: Any, spec: dict[str, Any], ranks: int) -> tuple[str | None, str]:
    """(why the swap failed or None, how it was checked), against the drafter ``ck`` (open)."""
    if len(answers) < ranks:
        return f"the swap reached {len(answers)} of the server's {ranks} ranks", "not checked"
    for a in answers:
        if a.get("refused"):
            return f"rank {a.get('rank')}: {a['refused']}", "not checked"
    if ranks > 1:  # each rank holds its shard: the file's bytes are not any one rank's
        return None, f"read back on {ranks} ranks; sharded weights are not compared with the file"
    got, held, numel = answers[0].get("digests", {}), answers[0].get("dtypes", {}), answers[0].get("numel", {})
    want = _file_digests(ck, _server_module()._expected({n: None for n in ck.tensors}, spec, set(got)))
    same = [p for p in got if p in want and want[p][0] == got[p]]
    # held otherwise: in another dtype, or processed into a kernel format after loading (other size)
    other = [
        p for p in got if p in want and (held.get(p) != _TORCH_DTYPES.get(want[p][1]) or numel.get(p) != want[p][2])
    ]
    bad = [p for p in got if p in want and p not in same and p not in other]
    if bad:
        return f"read back, {bad[0]} does not hold the file's bytes", "read back"
    if not same:
        return "no parameter could be read back and held against the file", "not checked"
    how = f"read back: {len(same)} parameters equal the file's bytes"
    if other:
        how += f"; {len(other)} held in another dtype or a kernel format, not compared"
    return None, how


def swap_in(engine: str, net: Any, url: str, drafter: str | Path, spec: dict[str, Any], ranks: int = 1) -> SwapResult:
    """Put ``drafter`` in place of the running one, check it, and reset the caches it leaves stale."""
    from ckpttools.io.checkpoint import open_checkpoint

    drafter = Path(os.path.realpath(drafter))
    t0 = time.monotonic()
    try:
        if engine == "vllm":
            answers, how = _vllm_swap(net, url, drafter, spec)
        else:
            answers, how = _sglang_swap(net, url, drafter, spec, ranks)
    except ServerError as e:
        return SwapResult(False, time.monotonic() - t0, engine, why=str(e))
    seconds = time.monotonic() - t0
    ranks = max(ranks, len(answers)) if engine == "vllm" else ranks
    with open_checkpoint(drafter) as ck:  # headers, and the bytes the read-back is held against
        why, checked = _check(answers, ck, spec, ranks)
        has_d2t = "d2t" in ck.tensors
    maps = sum(int(a.get("maps_replaced", 0)) for a in answers)
    if why is None and has_d2t and min((int(a.get("maps_replaced", 0)) for a in answers), default=0) < 1:
        why = "no rank replaced the cached draft-to-target map: the figures would be measured under the old mapping"
    return SwapResult(why is None, seconds, how, len(answers), maps, checked, why, answers)


def _post(net: Any, url: str, path: str, body: dict[str, Any] | None, deadline: float = 600.0) -> Any:
    resp = net.request("POST", url + path, json=body, what=path, deadline=deadline, retries=0)
    if resp.status >= 400:
        raise ServerError(f"{url}{path}: HTTP {resp.status}: {resp.text[:300]}", url=url)
    return resp


def _vllm_swap(net: Any, url: str, drafter: Path, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    resp = _post(net, url, spec["endpoint"], {"method": "ckpt_swap", "args": [str(drafter)]})
    results = resp.json().get("results")
    if not isinstance(results, list):
        raise ServerError(f"{url}{spec['endpoint']}: no results list in the answer", url=url)
    where = url + spec["endpoint"]
    answers = [
        _rank_answer(loads_json(r, where, error=ServerError) if isinstance(r, str) else r, where) for r in results
    ]
    _post(net, url, spec["flush"], None)
    return answers, f"worker extension through {spec['endpoint']}"


def byte_tensor_payload(text: str) -> str:
    """``[(SWAP_TAG, torch.ByteTensor(list(text's UTF-8)))]`` pickled (protocol 2) and base64-encoded,
    as SGLang's MultiprocessingSerializer.deserialize reads it: built from opcodes, so no torch here."""
    tag = _server_module().SWAP_TAG
    body = pickle.dumps(tag, 2)[2:-1]  # the string, without PROTO and STOP
    body += b"ctorch\nByteTensor\n" + pickle.dumps((list(text.encode()),), 2)[2:-1] + b"R\x86"
    return base64.b64encode(b"\x80\x02](" + body + b"e.").decode()


def _sglang_swap(
    net: Any, url: str, drafter: Path, spec: dict[str, Any], ranks: int
) -> tuple[list[dict[str, Any]], str]:
    with tempfile.TemporaryDirectory(prefix="ckpt-swap-") as d:
        os.chmod(d, 0o777)  # the server may run as another user
        answer = os.path.join(d, "rank{rank}.json")
        payload = byte_tensor_payload(json.dumps({"path": str(drafter), "answer": answer}))
        body = {
            "serialized_named_tensors": [payload] * ranks,
            "load_format": "ckpt_swap.sglang_load_drafter",
            "flush_cache": True,
        }
        _post(net, url, spec["endpoint"], body)
        answers = []
        for r in range(ranks):
            p = Path(answer.replace("{rank}", str(r)))
            if p.is_file():
                answers.append(_rank_answer(read_json(p, "swap answer", error=ServerError), str(p)))
    return answers, f"custom weight loader through {spec['endpoint']}"


def target_checksum(engine: str, net: Any, url: str, target: str | Path | None = None) -> str | None:
    """A digest of the target's weights as the server holds them (None: the engine gives no way).

    vLLM: through the worker extension, every worker's. SGLang: ``/get_weights_by_name`` of the
    target's embedding, head and first tensors (the first 64 values of each)."""
    if engine == "vllm":
        resp = _post(net, url, "/collective_rpc", {"method": "ckpt_target_checksum"})
        where = url + "/collective_rpc"
        raw = resp.json().get("results")
        if not isinstance(raw, list):
            raise ServerError(f"{where}: no results list in the answer", url=url)
        results = [loads_json(r, where, error=ServerError) if isinstance(r, str) else r for r in raw]
        return hashlib.sha256(json.dumps([_rank_answer(r, where).get("target") for r in results]).encode()).hexdigest()
    if target is None:
        return None
    from ckpttools.io.checkpoint import open_checkpoint

    with open_checkpoint(target) as ck:
        names = [n for n in ck.tensors if n.endswith(("embed_tokens.weight", "lm_head.weight"))]
        names += [n for n in ck.tensors if n.endswith("norm.weight") and n not in names][:2]  # never fused
    got = []
    for n in names:
        resp = _post(net, url, "/get_weights_by_name", {"name": n, "truncate_size": 64})
        got.append([n, resp.text])
    return hashlib.sha256(json.dumps(got).encode()).hexdigest()
