"""Another drafter into a running server, without a restart: the client side.

The engine-release table (``EngineRelease.drafter_swap``) says how a release allows it; the code
that runs inside the engine is ``engines/serverside/ckpt_swap.py`` (put on the server's PYTHONPATH
at launch). After each swap every rank holds each parameter it loaded against the file's tensors
on its own device (equal bytes, equal values cast, or a packed layer's output on a fixed input:
serverside/ckpt_digest.py) and says how; a swap that is refused, reaches fewer ranks than the
server has, replaces no cached mapping the drafter needs, leaves a parameter unchecked, or holds
other values, is a failed swap; so is one where more ranks answer than the server has, or any
field of a rank's answer is not of the type and in the range the server-side code gives it
(answers with sha256 digests, as older server-side code gave, are held against the file's bytes
here). :func:`target_digest` digests every target parameter in the server's process, on every rank.

- vLLM (worker extension): ``POST /collective_rpc {"method": "ckpt_swap", "args": [path]}`` runs in
  every worker; then ``POST /reset_prefix_cache``.
- SGLang 0.5.17 (custom weight loader): ``POST /update_weights_from_tensor`` with one payload per TP
  rank: a ``torch.ByteTensor`` of the request's JSON, written here as pickle opcodes (no torch
  needed here); each rank writes its answer to a file; ``flush_cache`` resets the counters.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import math
import os
import pickle
import re
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from ckpttools.engines.opened import OpenedDrafter
from ckpttools.errors import ServerError
from ckpttools.io.inputs import loads_json

__all__ = [
    "SERVERSIDE",
    "SwapResult",
    "TargetDigest",
    "RankDigest",
    "swap_route",
    "prepare_launch",
    "swap_in",
    "target_digest",
    "swappable",
]

SERVERSIDE = Path(__file__).resolve().parent / "serverside"
_TORCH_DTYPES = {"BF16": "torch.bfloat16", "F16": "torch.float16", "F32": "torch.float32", "I64": "torch.int64"}
_IGNORED_CONFIG_KEYS = ("_name_or_path", "transformers_version")
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: the largest rank answer read: digests of a drafter's parameters take a few KiB
_ANSWER_LIMIT = 16 << 20
#: the mechanism of a spec that does not say (one built before the route carried it)
_MECHANISMS = {"vllm": "worker_extension", "sglang": "custom_loader"}


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
    #: where the seconds went: ``request`` (the swap's requests, as the client saw them), ``check``
    #: (the client's own check of the answers) and, from the slowest rank, the server's ``read``
    #: (the file onto the device), ``update`` (load_weights and the maps) and ``read_back``
    timings: dict[str, float] = field(default_factory=dict)
    #: the drafter's bytes the slowest rank read (0: not said)
    bytes: int = 0
    #: how many parameters rank 0 held against the file each way (ckpt_digest.check_param's words:
    #: bytes, cast, applied, sharded, not compared); empty where the ranks sent digests instead
    compared: dict[str, int] = field(default_factory=dict)
    #: the swap's request itself failed (no answer, a broken connection, an HTTP error): the
    #: server may have died, which the caller can see (not in ``to_dict``)
    request_failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("answers")
        d.pop("request_failed")
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


def server_spec(release: Any, drafter: str | Path | OpenedDrafter) -> dict[str, Any]:
    """What the server-side code reaches inside the engine: the route's facts and the name rules
    of the loader the drafter's class uses (both from the release table). ``drafter``: its directory
    (its config.json read here), or the drafter opened already (its config as parsed then)."""
    if isinstance(drafter, OpenedDrafter) and drafter.config is not None:
        cfg = drafter.config
    else:
        from ckpttools.io.inputs import read_json

        cfg = read_json(_path(drafter) / "config.json", "config")
    archs = cfg.get("architectures") or [None]
    dc = release.drafter_class(archs[0])
    rules = release.loaders.value.get(dc.loader) if dc is not None else None
    route = dict(swap_route(release) or {})
    out: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in route.items() if k != "flags"}
    loader = route.get("flags", {}).get("custom-weight-loader")
    if loader:  # the load_format a request names: the loader registered at launch
        out["load_format"] = loader
    if rules is not None:
        out["renames"] = [list(r) for r in rules.substr_renames if not r[0].startswith("^")]
        out["stacked"] = [list(s) for s in rules.stacked]
        out["prefix"] = rules.prefix
        out["no_prefix"] = ["lm_head."]
        out["d2t_to"] = rules.d2t_to
        out["never_loaded"] = sorted({*route.get("never_loaded", ()), *rules.skip})
    return out


def prepare_launch(spec: Any, release: Any, drafter: OpenedDrafter | str | None = None) -> Any:
    """The launch spec with the swap route enabled: its flags, its environment, the server-side
    code on PYTHONPATH, and the facts it needs in CKPT_SWAP_SPEC (``drafter``: the spec's drafter
    opened already, whose config is read as parsed; else its config.json is read)."""
    route = swap_route(release)
    assert route is not None and spec.drafter is not None
    inherited = spec.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # the server's own path stays
    path = os.pathsep.join(p for p in (str(SERVERSIDE), inherited) if p)
    env = {**spec.env, **route.get("env", {}), "PYTHONPATH": path}
    env["CKPT_SWAP_SPEC"] = json.dumps(server_spec(release, drafter if drafter is not None else spec.drafter))
    flags = [a for k, v in route["flags"].items() for a in ("--" + k, v)]
    return dataclasses.replace(spec, engine_args=[*spec.engine_args, *flags], env=env)


def swappable(running: str | Path | OpenedDrafter, other: str | Path | OpenedDrafter) -> str | None:
    """Why ``other`` cannot take ``running``'s place on its server (None: it can): its config
    or its tensors' names, shapes and dtypes differ, so the running model would not be it.
    Each is a directory (opened here) or a drafter opened already (its index read as it is)."""
    with _checkpoint(running) as a, _checkpoint(other) as b:
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


@contextlib.contextmanager
def _checkpoint(drafter: str | Path | OpenedDrafter) -> Iterator[Any]:
    """The drafter's checkpoint: one opened already (its maps dropped after), else opened here and closed."""
    if isinstance(drafter, OpenedDrafter):
        ck = drafter.require_checkpoint()
        try:
            yield ck
        finally:
            ck.close()  # the maps a read made; the index stays
        return
    from ckpttools.io.checkpoint import open_checkpoint

    with open_checkpoint(drafter) as ck:
        yield ck


def _path(drafter: str | Path | OpenedDrafter) -> Path:
    return drafter.path if isinstance(drafter, OpenedDrafter) else Path(drafter)


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


def _what(x: Any) -> str:
    """A short, one-line description of a value a server sent (parsed JSON)."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return f"bool {json.dumps(x)}"
    if isinstance(x, str):
        return f"text {x[:60]!r}"
    if isinstance(x, (int, float)):
        return f"{type(x).__name__} {x!r}"[:80]
    kind = "a list" if isinstance(x, list) else "an object" if isinstance(x, dict) else type(x).__name__
    return f"{kind} {json.dumps(x, default=str)[:60]!r}"


_KIND_WORDS = {list: "a list", int: "a count", dict: "an object"}


class _BadAnswer(ServerError):
    """The server answered, but not as ckpt_swap.py answers: a failed swap (not a failed request)."""


def _json(resp: Any) -> Any:
    """The answer's JSON; an answer that is not JSON is a bad answer, not a failed request."""
    try:
        return resp.json()
    except ServerError as e:
        raise _BadAnswer(str(e), url=e.url) from None


def _results(resp: Any, where: str) -> list[Any]:
    """The ``results`` of a ``/collective_rpc`` answer, each worker's answer parsed (JSON text or a value)."""
    body = _json(resp)
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list):
        raise _BadAnswer(f"{where}: the answer is {_what(body)}, not an object with a results list")
    return [loads_json(r, where, error=_BadAnswer) if isinstance(r, str) else r for r in results]


def _ranks(n: int) -> str:
    return f"{n} rank{'s' if n != 1 else ''}"


def _count(x: Any) -> TypeGuard[int]:
    """A whole number of zero or more (a bool is not one)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


@dataclass(frozen=True)
class _Asked:
    """What each rank's answer is held to: the server's rank count, the drafter sent, its tensors."""

    ranks: int
    path: str
    tensors: frozenset[str]
    has_d2t: bool


def _answer_fault(a: Any, asked: _Asked) -> str | None:
    """Why one rank's answer is not one that ckpt_swap.py writes for this request (None: it is).

    Every field is held to the type and range that code gives it: ``rank`` one of the server's,
    ``path`` the drafter sent (an answer for another path is another swap's), tensor names the
    file's, sha256 digests as hex, counts whole and not negative, and no map replaced where the
    drafter has none. A refused answer needs only its reason; an accepted one needs every field."""
    if not isinstance(a, dict):
        return f"a rank answered {_what(a)}, not an object"
    rank = a.get("rank")
    if not _count(rank) or rank >= asked.ranks:
        return f"a rank's 'rank' is {_what(rank)}, not one of the server's {asked.ranks} (0 to {asked.ranks - 1})"
    who = f"rank {rank}"
    if a.get("path") != asked.path:
        return f"{who} answered for {_what(a.get('path'))}, not for {asked.path}"
    refused = a.get("refused")
    if refused is not None and (not isinstance(refused, str) or not refused.strip()):
        return f"{who}'s 'refused' is {_what(refused)}, not a reason"
    device_checked = "checks" in a
    read = (
        (("checks", dict), ("numel", dict))
        if device_checked
        else (("digests", dict), ("dtypes", dict), ("numel", dict))
    )
    for key, kind in (("loaded", list), ("skipped", list), ("maps_replaced", int), *read):
        if key not in a:
            if refused:
                continue
            return f"{who}'s answer has no {key!r}"
        v = a[key]
        if not isinstance(v, kind) or isinstance(v, bool):
            return f"{who}'s {key!r} is {_what(v)}, not {_KIND_WORDS[kind]}"
    for key in ("loaded", "skipped"):
        for n in a.get(key, []):
            if not isinstance(n, str) or n not in asked.tensors:
                return f"{who}'s {key!r} names {_what(n)}, which is no tensor of the drafter's file"
    maps = a.get("maps_replaced", 0)
    if not _count(maps):
        return f"{who}'s 'maps_replaced' is {_what(maps)}, not a count"
    if maps and not asked.has_d2t:
        return f"{who} says it replaced {maps} draft-to-target maps, but the drafter has no d2t"
    timings = a.get("timings", {})
    if not isinstance(timings, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e6 for v in timings.values()
    ):
        return f"{who}'s 'timings' is {_what(timings)}, not seconds by phase"
    if "bytes" in a and not _count(a["bytes"]):
        return f"{who}'s 'bytes' is {_what(a['bytes'])}, not a count"
    if device_checked:
        checks, numel = a.get("checks", {}), a.get("numel", {})
        if set(numel) != set(checks):
            return f"{who}'s 'checks' and 'numel' name different parameters"
        for p, c in checks.items():
            ok = isinstance(c, list) and len(c) == 2 and c[0] in _HOWS and isinstance(c[1], bool)
            if not ok or not _count(numel[p]):
                return f"{who}'s check of {p} is {_what(c)} / size {_what(numel[p])}, not one of ckpt_swap.py's"
        return None
    digests, dtypes, numel = a.get("digests", {}), a.get("dtypes", {}), a.get("numel", {})
    if set(dtypes) != set(digests) or set(numel) != set(digests):
        return f"{who}'s 'digests', 'dtypes' and 'numel' name different parameters"
    for p, d in digests.items():
        if not isinstance(d, str) or not _HEX64.fullmatch(d):
            return f"{who}'s digest of {p} is {_what(d)}, not a sha256 in hex"
        if not isinstance(dtypes[p], str) or not _count(numel[p]):
            return f"{who}'s dtype or size of {p} is {_what(dtypes[p])} / {_what(numel[p])}"
    return None


def _check(
    answers: list[Any], ck: Any, spec: dict[str, Any], asked: _Asked, file_ranks: list[int] | None = None
) -> tuple[str | None, str]:
    """(why the swap failed or None, how it was checked), against the drafter ``ck`` (open).

    More answers than the server has ranks is a failed swap, as are fewer; so is any rank whose
    parameter, held whole (in the file's dtype and size), reads back other bytes than the file's,
    at any rank count. A parameter held as a shard, in another dtype or in a kernel format is not
    compared, and the words say how many."""
    ranks = asked.ranks
    if len(answers) > ranks:
        return (
            f"{len(answers)} ranks answered, but the server has {_ranks(ranks)}: some answer is no rank's",
            "not checked",
        )
    for i, a in enumerate(answers):
        fault = _answer_fault(a, asked)
        if fault is None and file_ranks is not None and a["rank"] != file_ranks[i]:
            fault = f"the answer of rank {file_ranks[i]} says it is rank {a['rank']}'s"
        if fault is not None:
            return fault, "not checked"
    seen = [a["rank"] for a in answers]
    if len(set(seen)) < len(seen):
        return f"rank {next(r for r in seen if seen.count(r) > 1)} answered twice", "not checked"
    if len(answers) < ranks:
        return f"the swap reached {len(answers)} of the server's {ranks} ranks", "not checked"
    answers = sorted(answers, key=lambda a: a["rank"])
    for a in answers:
        if a.get("refused"):
            return f"rank {a['rank']}: {a['refused']}", "not checked"
    if all("checks" in a for a in answers):
        return _device_checked(answers, ck, spec, ranks)
    params: set[str] = set().union(*(a.get("digests", {}) for a in answers))
    want = _file_digests(ck, _server_module()._expected({n: None for n in ck.tensors}, spec, params))
    same: set[str] = set()
    for a in answers:
        for p, got in a["digests"].items():
            if p not in want:
                return f"read back on rank {a['rank']}, {p} is filled by no tensor of the drafter's file", "read back"
            digest, dtype, numel = want[p]
            if a["dtypes"][p] != _TORCH_DTYPES.get(dtype) or a["numel"][p] != numel:
                continue  # a shard, another dtype, or processed into a kernel format after loading (other size)
            if got != digest:
                return f"read back on rank {a['rank']}, {p} does not hold the file's bytes", "read back"
            same.add(p)
    if not same:
        return "no parameter could be read back and held against the file", "not checked"
    on = f" on {ranks} ranks" if ranks > 1 else ""
    how = f"read back{on}: {len(same)} parameters equal the file's bytes"
    if params - same:
        held = "sharded, in another dtype or a kernel format" if ranks > 1 else "in another dtype or a kernel format"
        how += f"; {len(params - same)} held {held}, not compared"
    return None, how


#: how ckpt_digest.check_param held a parameter against the file
_HOWS = ("bytes", "cast", "applied", "sharded", "not compared")
_HOW_WORDS = {
    "bytes": "equal the file's bytes",
    "cast": "equal the file's values cast to their dtype",
    "applied": "held in a kernel format give the file's weight times a fixed random input",
    "sharded": "sharded, not compared",
    "not compared": "not compared",
}


def _device_checked(answers: list[dict[str, Any]], ck: Any, spec: dict[str, Any], ranks: int) -> tuple[str | None, str]:
    """The ranks' own checks, made on the device against the file they loaded: every parameter the
    loaded tensors fill must have been checked on every rank, and held."""
    for a in answers:
        params = set(a["checks"])
        loaded = [n for n in a["loaded"] if n in ck.tensors]
        want = _server_module()._expected({n: None for n in loaded}, spec, params)
        missing = sorted(set(want) - params)
        if missing:
            return f"rank {a['rank']} did not read back {missing[0]} (filled by {want[missing[0]][0][0]})", "read back"
        for p, (how, ok) in sorted(a["checks"].items()):
            if p not in want:
                return f"read back on rank {a['rank']}, {p} is filled by no tensor of the drafter's file", "read back"
            if not ok:
                return f"read back on rank {a['rank']}, {p} does not hold the file's values ({how})", "read back"
    count: dict[str, int] = {}
    for how, _ in answers[0]["checks"].values():
        count[how] = count.get(how, 0) + 1
    if not answers[0]["checks"]:
        return "no parameter could be read back and held against the file", "not checked"
    on = f" on {ranks} ranks" if ranks > 1 else ""
    n = len(answers[0]["checks"])
    parts = [f"{count[h]} {_HOW_WORDS[h]}" for h in _HOWS if count.get(h)]
    return None, f"read back{on} on the device: {n} parameters, {', '.join(parts)}"


def swap_in(
    engine: str,
    net: Any,
    url: str,
    drafter: str | Path | OpenedDrafter,
    spec: dict[str, Any],
    ranks: int = 1,
    *,
    timeout: float = 600.0,
) -> SwapResult:
    """Put ``drafter`` in place of the running one, check it, and reset the caches it leaves stale.

    ``ranks`` is the server's tensor-parallel size: exactly that many ranks must answer.
    ``timeout`` bounds each request of the swap (seconds, the run's ``timeout``). ``drafter``: its
    directory, or the drafter opened already (its index is what the answers are held against)."""
    given = drafter
    drafter = Path(os.path.realpath(_path(given)))
    t0 = time.monotonic()
    try:
        if spec.get("mechanism", _MECHANISMS.get(engine)) == "worker_extension":  # the table's route
            answers, file_ranks, how = _vllm_swap(net, url, drafter, spec, timeout)
        else:
            answers, file_ranks, how = _sglang_swap(net, url, drafter, spec, ranks, timeout)
    except _BadAnswer as e:
        return SwapResult(False, time.monotonic() - t0, engine, why=str(e))
    except ServerError as e:
        return SwapResult(False, time.monotonic() - t0, engine, why=str(e), request_failed=True)
    t1 = time.monotonic()
    held = given if isinstance(given, OpenedDrafter) else drafter
    with _checkpoint(held) as ck:  # headers, and the bytes the read-back is held against
        asked = _Asked(ranks, str(drafter), frozenset(ck.tensors), "d2t" in ck.tensors)
        why, checked = _check(answers, ck, spec, asked, file_ranks)
    seconds = time.monotonic() - t0
    timings = {"request": t1 - t0, "check": seconds - (t1 - t0), **_server_timings(answers)}
    size = max((a.get("bytes", 0) for a in answers if isinstance(a, dict) and _count(a.get("bytes"))), default=0)
    first = answers[0] if answers and isinstance(answers[0], dict) else {}
    compared: dict[str, int] = {}
    for c in first.get("checks", {}).values() if isinstance(first.get("checks"), dict) else ():
        if isinstance(c, list) and c and isinstance(c[0], str):
            compared[c[0]] = compared.get(c[0], 0) + 1
    if why is not None:
        return SwapResult(False, seconds, how, len(answers), 0, checked, why, answers, timings, size, compared)
    maps = [int(a.get("maps_replaced", 0)) for a in answers]
    if asked.has_d2t and min(maps, default=0) < 1:
        why = "no rank replaced the cached draft-to-target map: the figures would be measured under the old mapping"
    return SwapResult(
        why is None, seconds, how, len(answers), sum(maps), checked, why, answers, timings, size, compared
    )


#: the ranks' phases as a swap's timings name them: the read (and its own parts: the file's bytes,
#: the move to the device, the digest's last pieces), the update, the read-back
_PHASES = (
    ("read", "read"),
    ("read_file", "read_file"),
    ("read_device", "read_device"),
    ("read_digest", "read_digest"),
    ("update", "update"),
    ("check", "read_back"),
)


def _server_timings(answers: list[Any]) -> dict[str, float]:
    """The slowest rank's seconds by phase (the server side of the swap), as the ranks timed them."""
    out: dict[str, float] = {}
    for a in answers:
        t = a.get("timings") if isinstance(a, dict) else None
        if isinstance(t, dict):
            for k, name in _PHASES:
                v = t.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[name] = max(out.get(name, 0.0), float(v))
    return out


def _post(net: Any, url: str, path: str, body: dict[str, Any] | None, deadline: float) -> Any:
    resp = net.request("POST", url + path, json=body, what=path, deadline=deadline, retries=0)
    if resp.status >= 400:
        raise ServerError(f"{url}{path}: HTTP {resp.status}: {resp.text[:300]}", url=url)
    return resp


def _vllm_swap(net: Any, url: str, drafter: Path, spec: dict[str, Any], deadline: float) -> tuple[list[Any], None, str]:
    resp = _post(net, url, spec["endpoint"], {"method": "ckpt_swap", "args": [str(drafter)]}, deadline)
    answers = _results(resp, url + spec["endpoint"])
    _post(net, url, spec["flush"], None, deadline)
    return answers, None, f"worker extension through {spec['endpoint']}"


def byte_tensor_payload(text: str) -> str:
    """``[(SWAP_TAG, torch.ByteTensor(list(text's UTF-8)))]`` pickled (protocol 2) and base64-encoded,
    as SGLang's MultiprocessingSerializer.deserialize reads it: built from opcodes, so no torch here."""
    tag = _server_module().SWAP_TAG
    body = pickle.dumps(tag, 2)[2:-1]  # the string, without PROTO and STOP
    body += b"ctorch\nByteTensor\n" + pickle.dumps((list(text.encode()),), 2)[2:-1] + b"R\x86"
    return base64.b64encode(b"\x80\x02](" + body + b"e.").decode()


def _sglang_swap(
    net: Any, url: str, drafter: Path, spec: dict[str, Any], ranks: int, deadline: float
) -> tuple[list[Any], list[int], str]:
    answers, found = _sglang_call(net, url, {"path": str(drafter)}, spec, ranks, deadline, flush=True)
    return answers, found, f"custom weight loader through {spec['endpoint']}"


def _sglang_call(
    net: Any, url: str, req: dict[str, Any], spec: dict[str, Any], ranks: int, deadline: float, *, flush: bool
) -> tuple[list[Any], list[int]]:
    """One request to the custom loader (``req`` and where to answer, one payload per rank), and the
    ranks' answers with the rank each file was written for."""
    # mkdtemp's folder is 0o700: only this user can write an answer there, and the server is this
    # user's (ckpt started it); each answer read is checked to be this user's own regular file
    with tempfile.TemporaryDirectory(prefix="ckpt-swap-") as d:
        answer = os.path.join(d, "rank{rank}.json")
        payload = byte_tensor_payload(json.dumps({**req, "answer": answer}))
        body = {
            "serialized_named_tensors": [payload] * ranks,
            "load_format": spec.get("load_format", "ckpt_swap.sglang_load_drafter"),
            "flush_cache": flush,
        }
        where = url + spec["endpoint"]
        done = _json(_post(net, url, spec["endpoint"], body, deadline))
        if not isinstance(done, dict) or done.get("success") is not True:  # {success, message}: http_server.py:1367
            raise _BadAnswer(f"{where}: the server did not apply the update: {_what(done)}")
        ours = {f"rank{r}.json": r for r in range(ranks)}
        names = sorted(os.listdir(d))
        stray = [n for n in names if n not in ours]
        if stray:
            raise _BadAnswer(
                f"an answer came back as {stray[0]!r}, but the server has {_ranks(ranks)}: it is no rank's answer"
            )
        found = sorted((ours[n], n) for n in names)
        answers = [_read_answer(os.path.join(d, n)) for _, n in found]
    return answers, [r for r, _ in found]


def _read_answer(path: str) -> Any:
    """One rank's answer file: this user's own regular file (no link), of at most 16 MiB, as JSON."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _BadAnswer(f"{path}: not a regular file, so no rank's answer")
    if st.st_uid != os.geteuid():
        raise _BadAnswer(f"{path}: owned by user {st.st_uid}, not by this user ({os.geteuid()}): no rank's answer")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise _BadAnswer(f"{path}: cannot be read ({e.strerror})") from None
    try:
        after = os.fstat(fd)
        if (after.st_ino, after.st_dev, after.st_uid) != (st.st_ino, st.st_dev, st.st_uid):
            raise _BadAnswer(f"{path}: replaced while it was read")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(_ANSWER_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > _ANSWER_LIMIT:
        raise _BadAnswer(f"{path}: larger than {_ANSWER_LIMIT >> 20} MiB, no rank's answer")
    return loads_json(data, path, error=_BadAnswer)


_HEX16 = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class RankDigest:
    """One rank's digest of the target model it holds (engines/serverside/ckpt_digest.py)."""

    rank: int
    #: the target model's class, as the server names it
    target_class: str
    parameters: int
    #: persistent buffers (the ones a checkpoint fills)
    buffers: int
    #: layers whose weight the engine keeps in a kernel format: their output on a fixed input summed
    packed: int
    bytes: int
    digest: str
    #: the server's seconds for the digest
    seconds: float
    #: each tensor's own short digest, so that two digests that differ say where
    sums: dict[str, str] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class TargetDigest:
    """The target's weights as every rank holds them, digested in the server's own process."""

    ranks: tuple[RankDigest, ...]
    how: str

    @property
    def parameters(self) -> int:
        return sum(r.parameters for r in self.ranks)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.ranks)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps([[r.rank, r.digest] for r in self.ranks]).encode()).hexdigest()

    def changed(self, other: TargetDigest) -> list[str]:
        """The tensors whose digests differ between ``self`` and ``other`` (``rank N: name`` at TP > 1),
        those present in one only included."""
        out = []
        for a, b in zip(self.ranks, other.ranks):
            where = f"rank {a.rank}: " if len(self.ranks) > 1 else ""
            out += [where + n for n in sorted({*a.sums, *b.sums}) if a.sums.get(n) != b.sums.get(n)]
        return out

    def compared(self) -> dict[str, Any]:
        """What the digest covers, as the report gives it."""
        return {
            "parameters": self.parameters,
            "buffers": sum(r.buffers for r in self.ranks),
            "packed_layers": sum(r.packed for r in self.ranks),
            "bytes": self.bytes,
            "ranks": len(self.ranks),
            "target_class": self.ranks[0].target_class if self.ranks else None,
            "seconds": max((r.seconds for r in self.ranks), default=0.0),
        }


def _rank_digest(a: Any, ranks: int, where: str) -> RankDigest:
    """One rank's digest answer, every field held to what ckpt_digest.model_digest gives."""
    if not isinstance(a, dict):
        raise _BadAnswer(f"{where}: a rank answered {_what(a)}, not its target digest")
    rank = a.get("rank")
    if not _count(rank) or rank >= ranks:
        raise _BadAnswer(f"{where}: a rank's 'rank' is {_what(rank)}, not one of the server's {ranks}")
    if a.get("refused") is not None:
        raise _BadAnswer(f"{where}: rank {rank} could not digest the target: {str(a['refused'])[:200]}")
    for k in ("parameters", "buffers", "packed", "bytes"):
        if not _count(a.get(k)):
            raise _BadAnswer(f"{where}: rank {rank}'s {k!r} is {_what(a.get(k))}, not a count")
    if not isinstance(a.get("digest"), str) or not _HEX64.fullmatch(a["digest"]):
        raise _BadAnswer(f"{where}: rank {rank}'s 'digest' is {_what(a.get('digest'))}, not a sha256 in hex")
    sums = a.get("sums", {})
    if not isinstance(sums, dict) or not all(isinstance(v, str) and _HEX16.fullmatch(v) for v in sums.values()):
        raise _BadAnswer(f"{where}: rank {rank}'s 'sums' is {_what(sums)}, not each tensor's digest")
    secs = a.get("seconds", 0.0)
    if not isinstance(secs, (int, float)) or isinstance(secs, bool) or not 0 <= secs < 1e6:
        raise _BadAnswer(f"{where}: rank {rank}'s 'seconds' is {_what(secs)}")
    if a["parameters"] == 0:
        raise _BadAnswer(f"{where}: rank {rank} digested no parameter: a digest of nothing proves nothing")
    return RankDigest(
        rank, str(a.get("class", "?"))[:100], a["parameters"], a["buffers"], a["packed"], a["bytes"], a["digest"],
        float(secs), sums,
    )  # fmt: skip


def target_digest(net: Any, url: str, spec: dict[str, Any], ranks: int = 1, *, timeout: float = 600.0) -> TargetDigest:
    """Every target parameter and persistent buffer, digested where the weights live: in the
    server's own process, on every rank (exactly ``ranks`` of them), through the swap route
    ``spec`` records (``server_spec``): the worker extension's ``ckpt_target_digest`` (vLLM), or
    the custom loader's ``target_digest`` op, run on the loader's call for the target model
    (SGLang). A digest that could not be read raises: it never stands for one.

    Raises:
        ServerError: a request failed, an answer is not what was asked, or a rank digested nothing.
    """
    if spec.get("mechanism") == "worker_extension":
        where = url + spec["endpoint"]
        raw = _results(_post(net, url, spec["endpoint"], {"method": "ckpt_target_digest"}, timeout), where)
        how = f"every target parameter digested on the device by the worker extension, on {_ranks(ranks)}"
    elif spec.get("mechanism") == "custom_loader":
        where = url + spec["endpoint"]
        raw, _ = _sglang_call(net, url, {"op": "target_digest"}, spec, ranks, timeout, flush=False)
        how = f"every target parameter digested on the device by the custom loader, on {_ranks(ranks)}"
    else:
        raise _BadAnswer(f"{url}: the swap route {spec.get('mechanism')!r} has no target digest")
    return digest_of_answers(raw, ranks, where, how)


def digest_of_answers(raw: list[Any], ranks: int, where: str, how: str) -> TargetDigest:
    """The target's digest from every rank's answer (``where``: the endpoint asked, for the errors),
    each held to what ckpt_digest.model_digest gives; raises _BadAnswer."""
    if len(raw) != ranks:
        raise _BadAnswer(f"{where}: {len(raw)} ranks answered the target digest, but the server has {_ranks(ranks)}")
    got = sorted((_rank_digest(a, ranks, where) for a in raw), key=lambda r: r.rank)
    if len({r.rank for r in got}) < len(got):
        raise _BadAnswer(f"{where}: a rank answered the target digest twice")
    return TargetDigest(tuple(got), how)
