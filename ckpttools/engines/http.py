"""Talking to serving engines: SGLang's native API and vLLM's OpenAI API plus its
Prometheus counters. Each request's acceptance is read from what the engine reports,
and every result says which fields it was computed from.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ckpttools.errors import CkptError, ImpossibleFiguresError, ServerError, opt
from ckpttools.io import figures as FIG
from ckpttools.io.net import NetClient, NetResponse, parse_url

__all__ = [
    "Prompt",
    "RequestResult",
    "SGLangClient",
    "VLLMClient",
    "detect_engine",
    "parse_sglang_meta",
    "parse_vllm_metrics",
    "accept_limit",
    "check_figures",
    "check_url",
    "MAX_DRAFT_STEPS",
    "MAX_COUNT",
]


@dataclass
class Prompt:
    """A prompt as text or token ids, with a category for the report."""

    text: str | None = None
    input_ids: list[int] | None = None
    category: str = "custom"
    messages: list[dict[str, str]] | None = None  # chat format, rendered with the target's template


@dataclass
class RequestResult:
    """One request's figures. accept_length is tokens per verify step (engine convention)."""

    index: int
    category: str
    completion_tokens: int = 0
    verify_steps: int | None = None
    accepted_drafts: int | None = None
    proposed_drafts: int | None = None
    accept_length: float | None = None
    latency_s: float = 0.0
    source: str = ""
    histogram: list[int] | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _sglang_roles(release: Any) -> dict[str, tuple[str, ...]]:
    """The meta_info field of each role for a release (the engine tables); for a server that
    names no release, every name a known release uses, plus the late-2025 spellings."""
    if release is not None and release.acceptance_roles.value:
        return dict(release.acceptance_roles.value)
    from ckpttools.engines.releases import ENGINES

    roles: dict[str, tuple[str, ...]] = {"accepted": (), "proposed": (), "histogram": ()}
    for rel in reversed(ENGINES["sglang"]):
        for k, names in rel.acceptance_roles.value.items():
            roles[k] = tuple(dict.fromkeys(roles.get(k, ()) + names))
    roles["accepted"] += ("spec_accept_token_num",)
    roles["proposed"] += ("spec_draft_token_num",)
    return roles


def parse_sglang_meta(meta: dict[str, Any], r: RequestResult, release: Any = None) -> RequestResult:
    """Fill ``r`` from a finished /generate response's meta_info, read with ``release``'s field
    names (:mod:`ckpttools.engines.releases`; None: any known release's).

    Tokens per verify step = 1 + accepted drafts / verify steps when the server reports
    accepted drafts (0.5.17 and 0.5.23: spec_num_correct_drafts); otherwise completion_tokens
    / spec_verify_ct, which counts the token that prefill produced and so runs slightly high.

    Raises:
        ServerError: the answer carries none of the fields the release reports acceptance in.
    """
    roles = _sglang_roles(release)
    known = {n for k, names in roles.items() if k != "tokens" for n in names}
    if release is not None and not known & set(meta):
        raise ServerError(
            f"meta_info carries none of the fields {release.spec} reports acceptance in "
            f"({', '.join(sorted(known))}); it has: {', '.join(sorted(map(str, meta))[:20]) or 'nothing'}",
            hint=f"is the server another release? name it with {opt('engine')} sglang==VERSION",
        )
    r.completion_tokens = _count(meta, "completion_tokens") or 0
    r.verify_steps = _count(meta, "spec_verify_ct")
    acc_key = next((k for k in roles["accepted"] if meta.get(k) is not None), None)
    prop_key = next((k for k in roles["proposed"] if meta.get(k) is not None), None)
    hist_key = next((k for k in roles["histogram"] if meta.get(k) is not None), None)
    if prop_key:
        r.proposed_drafts = _count(meta, prop_key)
    if hist_key:
        r.histogram = _histogram(meta[hist_key], f"meta_info.{hist_key}")
    if "spec_accept_length" in meta:
        r.extra["server_spec_accept_length"] = meta["spec_accept_length"]
    if not r.verify_steps:
        r.source = "no spec_verify_ct: speculative decoding did not run for this request"
        return r
    if acc_key:
        r.accepted_drafts = _count(meta, acc_key)
        r.accept_length = 1 + r.accepted_drafts / r.verify_steps  # type: ignore[operator]
        r.source = f"1 + {acc_key} / spec_verify_ct"
    else:
        r.accept_length = r.completion_tokens / r.verify_steps
        r.accepted_drafts = max(0, r.completion_tokens - r.verify_steps)
        r.source = "completion_tokens / spec_verify_ct (includes the prefill token)"
    if r.histogram is not None:
        _check_sglang_histogram(r, f"meta_info.{hist_key}", acc_key)
    return r


def _check_sglang_histogram(r: RequestResult, where: str, acc_key: str | None) -> None:
    """SGLang counts each verify step once, in ``spec_verify_ct`` and in the histogram's bin of its
    correct drafts, and adds those drafts to ``spec_num_correct_drafts`` (sglang 0.5.17:
    srt/managers/scheduler_components/batch_result_processor.py:685-689, schedule_batch.py:1192-1202;
    the recorded 0.5.17 responses agree): a histogram that disagrees with the counts is impossible.

    Raises:
        ImpossibleFiguresError: its bins do not add up to the verify steps, or to the correct drafts.
    """
    h = r.histogram or []
    if sum(h) != r.verify_steps:
        raise ImpossibleFiguresError(
            f"impossible figures from the server for request {r.index}: {where} counts {sum(h)} verify steps, "
            f"spec_verify_ct {r.verify_steps} (SGLang counts each step once in both)"
        )
    drafts = sum(i * c for i, c in enumerate(h))
    if acc_key is not None and drafts != r.accepted_drafts:
        raise ImpossibleFiguresError(
            f"impossible figures from the server for request {r.index}: {where} adds up to {drafts} correct "
            f"drafts, {acc_key} {r.accepted_drafts} (SGLang counts each step's correct drafts in both)"
        )


#: the most draft steps a server is taken to run: a steps setting, a histogram's bins or a
#: per-position counter's position past it is no count of a real chain (the numeric reader's bound)
MAX_DRAFT_STEPS = FIG.MAX_STEPS
#: the largest count read from a server (tokens, verify steps, drafts, vLLM's lifetime counters):
#: 2**53, past which a float counter no longer counts by one
MAX_COUNT = 1 << 53

_BROKEN = "the server's figures are broken: report it to the engine, and measure on another build"


def _count(d: dict[str, Any], key: str, hi: int = MAX_COUNT, where: str = "") -> int | None:
    """A counter from a server's JSON (None when absent), read as a count (:mod:`ckpttools.io.figures`:
    a JSON integer, not a float, in [0, 2^53]) no larger than ``hi``."""
    v = d.get(key)
    if v is None:
        return None
    try:
        n = int(FIG.value(v, "count"))
    except FIG.FigureError as e:
        raise ServerError(
            f"the server reported {where}{key} = {str(v)[:40]}: {e.reason}, not a count", hint=_BROKEN
        ) from None
    if n > hi:
        raise ServerError(
            f"the server reported {where}{key} = {n}: not a count (an integer from 0 to {hi})", hint=_BROKEN
        )
    return n


def _is_count(v: Any) -> bool:
    try:
        FIG.value(v, "count")
    except FIG.FigureError:
        return False
    return True


def _is_length(v: Any) -> bool:
    try:
        FIG.value(v, "length")
    except FIG.FigureError:
        return False
    return True


def _over_bins(h: Any) -> bool:
    """A list of more bins than any chain has (MAX_DRAFT_STEPS + 1)."""
    return isinstance(h, list) and len(h) > MAX_DRAFT_STEPS + 1


def _histogram(h: Any, where: str) -> list[int]:
    """An acceptance histogram from a server: at most MAX_DRAFT_STEPS + 1 bins of counts (the length
    checked first: a list of 300,000 bins is refused without a look at each)."""
    if _over_bins(h):
        raise ServerError(
            f"{where} has {len(h)} bins: no chain has more than {MAX_DRAFT_STEPS} draft steps "
            f"({MAX_DRAFT_STEPS + 1} bins)",
            hint=_BROKEN,
        )
    if not isinstance(h, list) or not h or not all(_is_count(x) for x in h):
        raise ServerError(f"{where} is {str(h)[:60]!r}: expected a list of counts")
    return list(h)


def accept_limit(steps: int | None) -> tuple[int, str]:
    """The draft steps a figure is judged against, and the range as the error says it: the server's
    steps, else (a server that names none, or none usable) the most any chain runs."""
    if steps is not None:
        return steps, f"[1, {steps + 1}] for {steps} draft steps"
    return MAX_DRAFT_STEPS, (
        f"[1, {MAX_DRAFT_STEPS + 1}] (the server names no draft steps; no chain runs more than {MAX_DRAFT_STEPS})"
    )


def check_figures(r: RequestResult, steps: int | None) -> None:
    """Refuse figures no server can produce: accept length outside [1, steps + 1] (steps: the
    server's, else MAX_DRAFT_STEPS), more verify
    steps than completion tokens, a histogram longer than steps + 1, more accepted drafts than
    proposed ones, or a value that is not finite.

    The completion_tokens / spec_verify_ct fallback counts the prefill token too, so it
    may run one token over per request.

    Raises:
        ImpossibleFiguresError: one such request makes the whole run an error.
    """
    _check_consistent(r, steps)
    if r.accept_length is None or r.verify_steps is None:
        return
    bound, limit = accept_limit(steps)
    hi = bound + 1 + (1 / r.verify_steps if "prefill" in r.source else 0)
    if r.accept_length < 1 or r.accept_length > hi + 1e-9:
        raise ImpossibleFiguresError(
            f"impossible figures from the server: accept length {r.accept_length:.3f} ({r.source}) must lie in {limit}"
        )


def _check_consistent(r: RequestResult, steps: int | None) -> None:
    """The figures of one request agree with each other (counter deltas of a shared server excepted)."""

    def bad(what: str) -> ImpossibleFiguresError:
        return ImpossibleFiguresError(f"impossible figures from the server for request {r.index}: {what}")

    for name in ("accept_length", "latency_s"):
        v = getattr(r, name)
        if v is not None and not math.isfinite(v):
            raise bad(f"{name} is {v}, not a finite number")
    per_request = "delta" not in r.source
    if per_request and r.verify_steps is not None and r.verify_steps > r.completion_tokens:
        raise bad(f"{r.verify_steps} verify steps for {r.completion_tokens} completion tokens (each step makes one)")
    if r.histogram is not None and steps is not None and len(r.histogram) > steps + 1:
        raise bad(f"an acceptance histogram of {len(r.histogram)} bins for {steps} draft steps (at most {steps + 1})")
    if r.accepted_drafts is not None and r.proposed_drafts is not None and r.accepted_drafts > r.proposed_drafts:
        raise bad(f"{r.accepted_drafts} accepted drafts of {r.proposed_drafts} proposed")


def _net(client: Any) -> NetClient:
    """The client to send through: ``client`` itself, or (for any other object) a shared default one."""
    global _DEFAULT
    if isinstance(client, NetClient):
        return client
    if _DEFAULT is None:
        _DEFAULT = NetClient()
    return _DEFAULT


_DEFAULT: NetClient | None = None


def _request(client: Any, method: str, url: str, what: str, body: dict[str, Any] | None = None) -> Any:
    """One JSON request; every failure becomes a ServerError saying what went wrong."""

    resp = _send(client, method, url, what, body)
    if resp.status_code >= 400:
        raise ServerError(f"{url}: HTTP {resp.status_code} for {what}: {resp.text[:300]}", url=url)
    return resp.json()


def _send(client: Any, method: str, url: str, what: str, body: dict[str, Any] | None = None) -> NetResponse:
    """One HTTP request through the network client (total deadline, capped answer); every
    transport failure becomes one ServerError saying which."""
    return _net(client).request(method, url, json=body, what=what, where=url)


class SGLangClient:
    """SGLang's native API: /server_info, /generate, /flush_cache."""

    name = "sglang"

    def __init__(self, url: str, client: Any, release: Any = None) -> None:
        self.url = url.rstrip("/")
        self.client = client
        self._info: dict[str, Any] | None = None
        self.release = release  # the engine table answers are read with (None: found from the server)

    def server_release(self) -> Any:
        """The table of the release the server reports (``version`` in /server_info), or None when it
        reports none; a version no table knows is an error listing the known ones."""
        from ckpttools.engines.releases import release_from_version_string

        v = self.info().get("version")
        return release_from_version_string("sglang", v) if isinstance(v, str) and v else None

    def info(self) -> dict[str, Any]:
        if self._info is None:
            resp = _send(self.client, "GET", self.url + "/server_info", "/server_info")
            if resp.status_code == 404:
                resp = _send(self.client, "GET", self.url + "/get_server_info", "/get_server_info")
            if resp.status_code >= 400:
                raise ServerError(f"{self.url}/server_info: HTTP {resp.status_code}", url=self.url)
            info = resp.json()
            if not isinstance(info, dict) or not info:
                raise ServerError(
                    f"{self.url}/server_info is {str(info)[:80]!r}, not an object of server settings", url=self.url
                )
            self._info = info
        return self._info

    def spec_settings(self) -> dict[str, Any]:
        """The server's speculative settings from /server_info; a count there (draft steps, topk,
        draft tokens, tp size) that is an integer must lie within limits (what verify sizes by it).

        Raises:
            ServerError: such a count out of range.
        """
        i = self.info()
        keys = (
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "tp_size",
            "model_path",
            "speculative_draft_model_path",
            "skip_tokenizer_init",
        )
        limits = {
            "speculative_num_steps": MAX_DRAFT_STEPS,
            "speculative_eagle_topk": 1 << 10,
            "speculative_num_draft_tokens": 1 << 16,
            "tp_size": 1 << 16,
        }
        for k, hi in limits.items():
            v = i.get(k)
            if type(v) is int and not 0 <= v <= hi:  # another type is no count, and is left unused
                _count(i, k, hi, "/server_info ")
        return {k: i.get(k) for k in keys}

    def spec_enabled(self) -> bool:
        return bool(self.info().get("speculative_algorithm"))

    def server_avg_accept_length(self) -> float | None:
        try:
            self._info = None  # fresh figures
            states = self.info().get("internal_states") or []
        except ServerError:
            return None
        if not isinstance(states, list):
            return None
        vals = [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
        nums = [float(v) for v in vals if v is not None and _is_length(v)]
        return nums[0] if nums else None

    def flush_cache(self) -> None:
        try:
            _send(self.client, "POST", self.url + "/flush_cache", "/flush_cache")
        except ServerError:
            pass  # best effort: a busy server refuses, and the measurement does not depend on it

    def run(self, i: int, p: Prompt, max_new_tokens: int, temperature: float, ignore_eos: bool) -> RequestResult:
        body: dict[str, Any] = {
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
        }
        if p.input_ids is not None:
            body["input_ids"] = p.input_ids
        else:
            body["text"] = p.text
        r = RequestResult(i, p.category)
        t = time.perf_counter()
        out = _request(self.client, "POST", self.url + "/generate", "/generate", body)
        r.latency_s = time.perf_counter() - t
        if isinstance(out, list):
            out = out[0] if out else None
        meta = out.get("meta_info") if isinstance(out, dict) else None
        if not isinstance(meta, dict):
            raise ServerError(f"{self.url}/generate: no meta_info in the response", url=self.url)
        return parse_sglang_meta(meta, r, self.release)


# vLLM Prometheus counters (names without the _total suffix the text format adds)
VLLM_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
    "accepted_per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
}


def parse_vllm_metrics(text: str) -> dict[str, Any]:
    """Sum vLLM's speculative-decoding counters over label sets (per position kept apart).

    Raises:
        ValueError: not Prometheus text, or a counter negative or not finite.
        ServerError: a counter past :data:`MAX_COUNT`, or a position past :data:`MAX_DRAFT_STEPS`.
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {
        "drafts": 0.0,
        "draft_tokens": 0.0,
        "accepted": 0.0,
        "accepted_per_pos": {},
        "generation_tokens": 0.0,
        "present": False,
    }
    names = {v: k for k, v in VLLM_COUNTERS.items()}
    for fam in text_string_to_metric_families(text):
        key = names.get(fam.name) or names.get(fam.name.removesuffix("_total"))
        if fam.name.removesuffix("_total") == "vllm:generation_tokens":
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out["generation_tokens"] += float(FIG.whole(s.value))
        if key is None:
            continue
        out["present"] = True
        for s in fam.samples:
            if not s.name.endswith("_total"):
                continue
            try:
                v = float(FIG.whole(s.value))  # (a counter: whole, finite, within 2^53)
                pos = int(FIG.read(str(s.labels.get("position", 0)), "count")) if key == "accepted_per_pos" else 0
            except FIG.FigureError as e:
                raise ServerError(f"/metrics: {fam.name}: {e}: not a count", hint=_BROKEN) from None
            if key == "accepted_per_pos":
                if pos >= MAX_DRAFT_STEPS:
                    raise ServerError(
                        f"/metrics: {fam.name} counts draft position {pos}: no chain has more than "
                        f"{MAX_DRAFT_STEPS} drafts",
                        hint=_BROKEN,
                    )
                out["accepted_per_pos"][pos] = out["accepted_per_pos"].get(pos, 0.0) + v
            else:
                out[key] += v
    vals = [out["drafts"], out["draft_tokens"], out["accepted"], *out["accepted_per_pos"].values()]
    if not all(math.isfinite(v) and v >= 0 for v in vals):
        raise ValueError("a speculative-decoding counter is negative or not finite")
    if not all(v <= MAX_COUNT for v in vals):
        raise ServerError("/metrics: a speculative-decoding counter is past 2**53: not a count", hint=_BROKEN)
    return out


class VLLMClient:
    """vLLM's OpenAI API for requests, /metrics counters for acceptance."""

    name = "vllm"

    def __init__(self, url: str, client: Any, release: Any = None) -> None:
        self.url = url.rstrip("/")
        self.client = client
        self._model: str | None = None
        self._max_model_len: int | None = None
        self.release = release

    def server_release(self) -> Any:
        """The table of the release /version names, or None when the server has no /version."""
        from ckpttools.engines.releases import release_from_version_string

        resp = _send(self.client, "GET", self.url + "/version", "/version")
        if resp.status_code >= 400:
            return None
        try:
            v = resp.json().get("version")
        except (ServerError, AttributeError, ValueError):
            return None
        return release_from_version_string("vllm", v) if isinstance(v, str) and v else None

    def model(self) -> str:
        if self._model is None:
            d = _request(self.client, "GET", self.url + "/v1/models", "/v1/models")
            try:
                model = d["data"][0]["id"]
            except (KeyError, IndexError, TypeError):
                model = None
            if not isinstance(model, str):
                raise ServerError(f"{self.url}/v1/models lists no model", url=self.url)
            self._model = model
            # the context the server runs at (vllm 0.32 entrypoints/openai/models/serving.py:64-75)
            n = d["data"][0].get("max_model_len") if isinstance(d["data"][0], dict) else None
            self._max_model_len = n if type(n) is int and 0 < n <= 1 << 31 else None
        return self._model

    def metrics(self) -> dict[str, Any]:
        resp = _send(self.client, "GET", self.url + "/metrics", "/metrics")
        if resp.status_code >= 400:
            raise ServerError(f"{self.url}/metrics: HTTP {resp.status_code}", url=self.url)
        try:
            return parse_vllm_metrics(resp.text)
        except (ValueError, IndexError, KeyError, TypeError) as e:
            raise ServerError(f"{self.url}/metrics is not Prometheus text ({e})", url=self.url) from None

    def spec_settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model()}
        if self._max_model_len is not None:
            out["max_model_len"] = self._max_model_len
        return out

    def spec_enabled(self) -> bool:
        return bool(self.metrics()["present"])

    def run(self, i: int, p: Prompt, max_new_tokens: int, temperature: float, ignore_eos: bool) -> RequestResult:
        body = {
            "model": self.model(),
            "prompt": p.input_ids if p.input_ids is not None else p.text,
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
        }
        r = RequestResult(i, p.category)
        t = time.perf_counter()
        out = _request(self.client, "POST", self.url + "/v1/completions", "/v1/completions", body)
        r.latency_s = time.perf_counter() - t
        usage = out.get("usage") if isinstance(out, dict) else None
        n = _count(usage, "completion_tokens") if isinstance(usage, dict) else None
        if n is None:
            raise ServerError(f"{self.url}/v1/completions: no usage.completion_tokens", url=self.url)
        r.completion_tokens = n
        r.source = "vLLM /metrics counters"
        metrics = out.get("metrics") if isinstance(out, dict) else None
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        if isinstance(spec, dict):
            parse_vllm_request_metrics(spec, r)
        return r


def parse_vllm_request_metrics(spec: dict[str, Any], r: RequestResult) -> RequestResult:
    """vLLM's per-request figures (``metrics.speculative_decoding`` of a completion, given
    when the server runs with ``--per-request-spec-decode-metrics summary``; vllm 0.32.0:
    vllm/entrypoints/generate/base/protocol.py:100-129, vllm/v1/metrics/stats.py:350-420).
    Its histogram counts verify steps by accepted drafts, bonus token excluded."""
    steps, acc = _count(spec, "num_spec_steps"), _count(spec, "num_accepted_draft_tokens")
    hist = spec.get("acceptance_histogram")
    if steps is None or acc is None:
        raise ServerError("vLLM's metrics.speculative_decoding is incomplete")
    if acc > (_count(spec, "num_draft_tokens") or 0):
        raise ImpossibleFiguresError(
            f"impossible figures from vLLM: {acc} accepted draft tokens of {_count(spec, 'num_draft_tokens') or 0} "
            "proposed (metrics.speculative_decoding)"
        )
    r.proposed_drafts = _count(spec, "num_draft_tokens")
    if steps > 0:
        r.verify_steps, r.accepted_drafts = steps, acc
        r.accept_length = 1 + acc / steps
        if _over_bins(hist) or (isinstance(hist, list) and all(_is_count(x) for x in hist)):
            r.histogram = _histogram(hist, "metrics.speculative_decoding.acceptance_histogram")
    r.source = "vLLM per-request metrics.speculative_decoding (1 + num_accepted_draft_tokens / num_spec_steps)"
    return r


def check_url(url: str) -> str:
    """A server base URL, checked: http(s) scheme and a host.

    Raises:
        ServerError
    """
    hint = "give the server's URL with its scheme, e.g. http://127.0.0.1:30000"
    try:
        scheme, host = parse_url(url)
    except ValueError as e:
        raise ServerError(f"{url!r} is not a URL ({e})", url=url, hint=hint) from None
    if scheme not in ("http", "https") or not host:
        raise ServerError(f"{url!r} is not an http(s) URL with a host", url=url, hint=hint)
    return url.rstrip("/")


def detect_engine(url: str, client: Any) -> str:
    """``sglang`` if /server_info (or /get_server_info) answers with SGLang's settings, ``vllm`` if
    /metrics has vllm: counters. vLLM 0.32 answers /server_info too under VLLM_SERVER_DEV_MODE=1 (the
    mode ckpttools' swap route runs it in), with ``vllm_config``, ``vllm_env`` and ``system_env``
    (vllm/entrypoints/serve/dev/server_info/api_router.py:43-58): that answer is vLLM's."""

    base = url.rstrip("/")
    for path in ("/server_info", "/get_server_info"):
        resp = _send(client, "GET", base + path, path)
        if resp.status_code == 200:
            try:
                info = resp.json()
            except CkptError:
                continue
            if isinstance(info, dict) and "vllm_config" in info:
                break
            if isinstance(info, dict):
                return "sglang"
    resp = _send(client, "GET", base + "/metrics", "/metrics")
    if resp.status_code == 200 and "vllm:" in resp.text:
        return "vllm"
    raise ServerError(
        f"{base}: answers neither as SGLang (/server_info) nor as vLLM (/metrics)",
        url=base,
        hint=f"say which engine it is: {opt('engine')} sglang or vllm",
    )
