"""The guarded swap hook on a server ckpttools did not start for one run (``ckpt serve``): the
launch's guard settings, and the client of the hook's state and swap with a key.

The hook itself is ``engines/serverside/ckpt_swap.py``; what guards it per engine is the release
table's ``drafter_swap`` route (``key_flag``, ``loopback_only``, ``version_label``):

- SGLang 0.5.17: ``/update_weights_from_tensor`` is an ADMIN_OPTIONAL endpoint
  (sglang/srt/entrypoints/http_server.py:1351-1352): with ``--admin-api-key`` set it needs that key
  as a bearer token (sglang/srt/utils/auth.py:128-138). ``ckpt serve`` sets it; the hook checks the
  key again (its sha256 in ``CKPT_SWAP_KEY_SHA256``). ``weight_version`` (a field of the request,
  sglang/srt/managers/io_struct.py:1715, set only on success, tokenizer_control_mixin.py:524-526)
  is set to the drafter's short digest, so /server_info names it.
- vLLM 0.32: ``--api-key`` guards only paths under /v1, /v2, /inference and /cohere
  (vllm/entrypoints/serve/middleware/authenticate.py:11 and 59), never the development endpoints
  (/collective_rpc, /reset_prefix_cache, /sleep...). So ``ckpt serve`` refuses a host that is not
  loopback for vLLM, and the hook checks the key itself on every swap (a state read needs none).

Every answer is held to what the hook writes (``engines/swap.py``'s checks: every rank, the read
back, the cached maps), and further to the digest of the drafter sent: an answer for other bytes
is a failed swap.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckpttools.errors import CheckpointFormatError, CheckpointNotFoundError, ServerError, UnsafePathError, opt
from ckpttools.io.inputs import loads_json

__all__ = [
    "HookState",
    "drafter_digest",
    "guarded_target_digest",
    "guard_env",
    "hook_state",
    "guarded_swap",
    "is_loopback",
    "loaded_drafter",
    "set_label",
    "NoHookError",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
#: how long a state read may take (it changes nothing and answers at once)
STATE_DEADLINE = 30.0


class NoHookError(ServerError):
    """The server answers, but not as a server started with ckpttools' swap hook."""

    default_hint = "start it with ckpt serve (or with the argv and environment ckpt serve --print gives)"


def _mod() -> Any:
    from ckpttools.engines.swap import _server_module

    return _server_module()


def drafter_digest(path: str | Path) -> str:
    """The drafter's digest as the hook computes it (``ckpt_swap.Digest``): its ``*.safetensors``
    files in name order, each as name, NUL, size, NUL, bytes; only regular, non-empty files are
    read (a FIFO is never opened blocking)."""
    mod = _mod()
    path = str(path)
    try:
        names = mod.weight_files(path)
    except FileNotFoundError:
        raise CheckpointNotFoundError(
            f"{path}: no such drafter", path=path, hint="give the drafter's directory (it is served from disk)"
        ) from None
    except OSError as e:
        raise CheckpointFormatError(
            f"{path}: cannot be read ({e.strerror})", path=path, hint="give a drafter directory this user may read"
        ) from None
    if not names:
        raise CheckpointFormatError(f"{path}: no .safetensors files", path=path)
    dg = mod.Digest()
    for n in names:
        p = os.path.join(path, n)
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:
            raise CheckpointFormatError(f"{p}: cannot be read ({e.strerror})", path=p) from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "0 bytes" if stat.S_ISREG(st.st_mode) else "special"
                raise CheckpointFormatError(f"{p}: {what}, not a safetensors file", path=p)
            dg.file(n, st.st_size)
            got = dg.stream(f, st.st_size)
            if got != st.st_size or f.read(1):
                raise CheckpointFormatError(f"{p}: changed while it was read", path=p)
    return str(dg.hexdigest())


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) names this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def guard_env(root: str | Path, key: str | None, drafter: str | Path) -> dict[str, str]:
    """The hook's guard settings for a launch: the swap root, the key's sha256, the launch drafter
    (its path and digest, so the first ``ckpt swap`` knows what runs)."""
    mod = _mod()
    env = {mod.ROOT_ENV: os.path.realpath(root)}
    if key:
        env[mod.KEY_ENV] = hashlib.sha256(key.encode()).hexdigest()
    d = os.path.abspath(drafter)
    env[mod.INITIAL_ENV] = json.dumps({"path": d, "digest": drafter_digest(d)})
    return env


@dataclass(frozen=True)
class HookState:
    """What every rank of the server says it serves (they agree, or it is an error)."""

    path: str | None
    digest: str | None
    #: "launch" (ckpt serve's word at start-up), "swap" (a swap this hook committed), "unknown"
    source: str
    generation: int
    ranks: int


def _post(net: Any, url: str, path: str, body: Any, deadline: float, key: str | None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return net.request("POST", url + path, json=body, headers=headers, what=path, deadline=deadline, retries=0)


def _unauthorized(resp: Any, where: str) -> None:
    if resp.status in (401, 403):
        raise ServerError(
            f"{where}: HTTP {resp.status}: the server refused the key"
            + (" (none given)" if resp.status == 401 else ""),
            hint=f"give the key the server was started with ({opt('api_key')}, or CKPT_API_KEY)",
        )


def _rank_answers(engine: str, net: Any, url: str, route: dict[str, Any], req: dict[str, Any], **kw: Any) -> Any:
    """Each rank's answer to one hook request (``op`` swap or state)."""
    if engine == "vllm":
        return _vllm_call(net, url, route, req, **kw)
    return _sglang_call(net, url, route, req, **kw)


def _vllm_call(
    net: Any,
    url: str,
    route: dict[str, Any],
    req: dict[str, Any],
    *,
    key: str | None,
    ranks: int,
    deadline: float,
    label: str | None = None,
) -> list[Any]:
    from ckpttools.engines.swap import _BadAnswer, _results

    where = url + route["endpoint"]
    if req["op"] == "state":
        body: dict[str, Any] = {"method": "ckpt_state"}
    elif req["op"] == "target_digest":
        body = {"method": "ckpt_target_digest"}
    else:
        body = {"method": "ckpt_swap", "args": [req["path"], key or ""]}
    resp = _post(net, url, route["endpoint"], body, deadline, None)
    if resp.status in (404, 405):
        raise NoHookError(f"{where}: HTTP {resp.status}: no development endpoints, so no ckpttools swap hook", url=url)
    if resp.status >= 400:
        raise NoHookError(
            f"{where}: HTTP {resp.status} for {body['method']}: the workers have no ckpttools swap hook, or it failed "
            f"({resp.text[:120]!r})",
            url=url,
        )
    try:
        return _results(resp, where)
    except _BadAnswer as e:
        raise ServerError(str(e), url=url) from None


def _sglang_call(
    net: Any,
    url: str,
    route: dict[str, Any],
    req: dict[str, Any],
    *,
    key: str | None,
    ranks: int,
    deadline: float,
    label: str | None = None,
) -> list[Any]:
    from ckpttools.engines.swap import _read_answer, byte_tensor_payload

    with tempfile.TemporaryDirectory(prefix="ckpt-swap-") as d:
        payload = byte_tensor_payload(
            json.dumps({**req, "key": key or "", "answer": os.path.join(d, "rank{rank}.json")})
        )
        body: dict[str, Any] = {
            "serialized_named_tensors": [payload] * ranks,
            "load_format": route["flags"]["custom-weight-loader"],
            "flush_cache": req["op"] == "swap",
        }
        if label is not None:
            body[route["version_label"]] = label
        where = url + route["endpoint"]
        resp = _post(net, url, route["endpoint"], body, deadline, key)
        _unauthorized(resp, where)
        if resp.status >= 400:
            raise ServerError(f"{where}: HTTP {resp.status}: {resp.text[:200]}", url=url)
        ours = {f"rank{r}.json": r for r in range(ranks)}
        names = sorted(os.listdir(d))
        if any(n not in ours for n in names):
            raise ServerError(f"{where}: an answer came back as {names[0]!r}, no rank's of {ranks}", url=url)
        return [_read_answer(os.path.join(d, n)) for n in names]


def _has_sglang_hook(net: Any, url: str, route: dict[str, Any]) -> None:
    """SGLang runs an unknown load_format as an error inside its scheduler: ask /server_info first
    whether the loader was named at launch (``custom_weight_loader``)."""
    from ckpttools.engines.http import SGLangClient

    info = SGLangClient(url, net).info()
    loaders = info.get("custom_weight_loader") or []
    want = route["flags"]["custom-weight-loader"]
    if want not in (loaders if isinstance(loaders, list) else [loaders]):
        raise NoHookError(
            f"{url}: the server's custom_weight_loader is {loaders!r}, not {want}: no ckpttools swap hook", url=url
        )


def _agree(answers: list[Any], ranks: int | None, url: str) -> HookState:
    """One state from every rank's, or the error that they differ or are not the hook's."""
    if not answers:
        raise NoHookError(f"{url}: no rank answered the state request", url=url)
    got = []
    for a in answers:
        ok = isinstance(a, dict) and type(a.get("rank")) is int and type(a.get("generation")) is int
        ok = ok and all(a.get(k) is None or isinstance(a.get(k), str) for k in ("path", "digest", "source"))
        if ok and a.get("digest") is not None and not _HEX64.fullmatch(a["digest"]):
            ok = False
        if not ok:
            raise ServerError(f"{url}: a rank's state is {json.dumps(a, default=str)[:100]!r}, not the hook's", url=url)
        got.append(a)
    n = ranks if ranks is not None else got[0].get("world")
    if type(n) is not int or sorted(a["rank"] for a in got) != list(range(n)):
        raise ServerError(f"{url}: ranks {sorted(a['rank'] for a in got)} answered, not each of {n} once", url=url)
    first = {k: got[0].get(k) for k in ("path", "digest", "generation")}
    for a in got[1:]:
        if {k: a.get(k) for k in first} != first:
            raise ServerError(
                f"{url}: rank {a['rank']} serves {a.get('digest')} ({a.get('path')}), rank {got[0]['rank']} "
                f"{first['digest']} ({first['path']}): the ranks disagree",
                url=url,
                hint="swap a drafter in again, or restart the server",
            )
    return HookState(first["path"], first["digest"], str(got[0].get("source")), first["generation"], n)


def hook_state(
    engine: str, net: Any, url: str, route: dict[str, Any], *, key: str | None, ranks: int | None = None
) -> HookState:
    """What the server's hook says it serves, every rank's agreeing.

    ``ranks``: the server's own rank count where it says one (SGLang's tp_size); None takes the
    count the ranks answer with (vLLM: every worker answers /collective_rpc).

    Raises:
        NoHookError: the server has no ckpttools swap hook.
        ServerError: the ranks disagree, or an answer is not the hook's.
    """
    if engine != "vllm":
        _has_sglang_hook(net, url, route)
    req = {"op": "state", "path": None}
    answers = _rank_answers(engine, net, url, route, req, key=key, ranks=ranks or 1, deadline=STATE_DEADLINE)
    return _agree(answers, ranks, url)


def guarded_target_digest(
    engine: str, net: Any, url: str, route: dict[str, Any], *, key: str | None, ranks: int, timeout: float
) -> Any:
    """Every target parameter digested by the hook where the weights live, on every rank, through a
    guarded server's route (SGLang's admin key sent): a ``TargetDigest``.

    Raises:
        ServerError: the request failed, or an answer is not the hook's digest.
    """
    from ckpttools.engines.swap import _BadAnswer, _ranks, digest_of_answers

    req = {"op": "target_digest", "path": None}
    raw = _rank_answers(engine, net, url, route, req, key=key, ranks=ranks, deadline=timeout)
    how = f"every target parameter digested on the device by the hook, on {_ranks(ranks)}"
    try:
        return digest_of_answers(raw, ranks, url + route["endpoint"], how)
    except _BadAnswer as e:
        raise ServerError(str(e), url=url) from None


def guarded_swap(
    engine: str,
    net: Any,
    url: str,
    drafter: str,
    route: dict[str, Any],
    spec: dict[str, Any],
    *,
    key: str | None,
    ranks: int,
    digest: str,
    timeout: float,
) -> Any:
    """One swap through the hook, checked as ``engines.swap.swap_in`` checks it, and further: each
    rank answered for the digest sent. Returns a ``SwapResult``; its ``why`` starts with "the server
    refused" where the hook refused (its reason follows)."""
    from ckpttools.engines.swap import SwapResult, _BadAnswer

    t0 = time.monotonic()
    label = digest[:16] if route.get("version_label") else None
    try:
        answers = _rank_answers(
            engine,
            net,
            url,
            route,
            {"op": "swap", "path": drafter},
            key=key,
            ranks=ranks,
            deadline=timeout,
            label=label,
        )
        if engine == "vllm":
            _post(net, url, route["flush"], None, timeout, None)
    except _BadAnswer as e:
        return SwapResult(False, time.monotonic() - t0, engine, why=str(e))
    except ServerError as e:
        return SwapResult(False, time.monotonic() - t0, engine, why=str(e), request_failed=True)
    return _judge(answers, drafter, spec, ranks, digest, time.monotonic() - t0, route)


def _judge(
    answers: list[Any], drafter: str, spec: dict[str, Any], ranks: int, digest: str, seconds: float, route: Any
) -> Any:
    """The swap's result from every rank's answer: refused, or checked as swap_in checks it, and for the digest."""
    from ckpttools.engines.swap import SwapResult, _Asked, _check
    from ckpttools.io.checkpoint import open_checkpoint

    how = f"the ckpttools hook through {route['endpoint']}"
    refused = [a for a in answers if isinstance(a, dict) and a.get("refused")]
    if refused:
        a = refused[0]
        said = f"the server refused the swap: rank {a.get('rank')}: {a['refused']}"
        return SwapResult(False, seconds, how, len(answers), 0, "not checked", said, answers)
    with open_checkpoint(drafter) as ck:
        asked = _Asked(ranks, drafter, frozenset(ck.tensors), "d2t" in ck.tensors)
        why, checked = _check(answers, ck, spec, asked)
    if why is None:
        other = [a for a in answers if a.get("digest") != digest]
        if other:
            why = f"rank {other[0]['rank']} answered for digest {str(other[0].get('digest'))[:16]!r}, not {digest[:16]}"
    maps = [int(a.get("maps_replaced", 0)) for a in answers] if why is None else [0]
    if why is None and asked.has_d2t and min(maps, default=0) < 1:
        why = "no rank replaced the cached draft-to-target map"
    return SwapResult(why is None, seconds, how, len(answers), sum(maps), checked, why, answers)


def set_label(net: Any, url: str, route: dict[str, Any], label: str, key: str | None) -> None:
    """Name the drafter loaded where the engine keeps a label (SGLang's weight_version), no request aborted."""
    if not route.get("version_label"):
        return
    resp = _post(net, url, "/update_weight_version", {"new_version": label, "abort_all_requests": False}, 30.0, key)
    _unauthorized(resp, url + "/update_weight_version")


def loaded_drafter(engine: str, net: Any, url: str, info: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Which drafter the server says it serves, for ``verify --host`` (None: it cannot say).

    SGLang: /server_info's ``weight_version`` when it is a short digest (the hook's swaps set it;
    ``info`` is that answer, already read). vLLM: the hook's state (a read, no key), when the
    server has the hook; any failure is "cannot say"."""
    if engine == "sglang":
        v = (info or {}).get("weight_version")
        if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{16}", v):
            return {"digest16": v, "from": "/server_info weight_version (set by ckpt swap)"}
        return None
    try:
        resp = _post(net, url, "/collective_rpc", {"method": "ckpt_state"}, 5.0, None)
        if resp.status != 200:
            return None
        where = f"{url}/collective_rpc"  # a rank's answer as text: parsed as any untrusted JSON (depth bounded)
        answers = [
            loads_json(r, where, error=ServerError) if isinstance(r, str) else r for r in resp.json().get("results", [])
        ]
        st = _agree(answers, None, url)
    except (ServerError, ValueError, AttributeError, TypeError):
        return None
    if st.digest is None:
        return None
    return {"digest16": st.digest[:16], "path": st.path, "from": f"the ckpttools hook ({st.source})"}


def check_inside(root: str | Path, drafter: str | Path) -> None:
    """The launch drafter must pass the guard the hook applies, so that a rollback to it can."""
    r, d = os.path.realpath(root), os.path.realpath(drafter)
    if not os.path.isdir(r):
        raise UnsafePathError(
            f"{root}: the swap root is not a folder",
            path=str(root),
            hint=f"give {opt('swap_root')} the folder that holds the drafters the server may swap in",
        )
    if os.path.commonpath([r, d]) != r:
        raise UnsafePathError(
            f"{drafter}: not under the swap root {root}: the hook could never swap it back in",
            path=str(drafter),
            hint="put the drafter under the swap root, or give a root above it",
        )


@dataclass(frozen=True)
class Server:
    """A running server as ``ckpt swap`` meets it: its engine, release, swap route, target, ranks."""

    url: str
    engine: str
    release: Any
    route: dict[str, Any]
    target: str | None
    steps: int | None
    #: the rank count the server itself states (SGLang's tp_size); None: the hook's answers give it
    ranks: int | None


def connect(url: str, engine: str, net: Any) -> Server:
    """Which engine and release answer at ``url``, and their swap route (None route: an error).

    Raises:
        ServerError: not reachable, no known release, or a release without a swap route.
    """
    from ckpttools.engines.http import SGLangClient, VLLMClient, check_url, detect_engine
    from ckpttools.engines.swap import swap_route

    url = check_url(url)
    engine = detect_engine(url, net) if engine == "auto" else engine
    if engine == "sglang":
        sg = SGLangClient(url, net)
        release, info = sg.server_release(), sg.spec_settings()
        target, steps, ranks = info.get("model_path"), info.get("speculative_num_steps"), info.get("tp_size")
    else:
        vl = VLLMClient(url, net)
        release, target, steps, ranks = vl.server_release(), vl.model(), None, None
    route = swap_route(release)
    if route is None:
        raise ServerError(
            f"{url}: {release.spec if release is not None else engine + ' (no version reported)'} has no swap route "
            "in ckpttools' release tables",
            url=url,
            hint="serve it with a release whose table has one (ckpt serve refuses the others)",
        )
    return Server(
        url,
        engine,
        release,
        dict(route),
        target if isinstance(target, str) else None,
        steps if type(steps) is int else None,
        ranks if type(ranks) is int and ranks > 0 else None,
    )
