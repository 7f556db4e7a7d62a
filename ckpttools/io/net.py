"""The network client: every HTTP request ckpttools makes, to serving engines and to the
Hugging Face Hub, goes through :class:`NetClient` (the one module that uses httpx).

Every request gets:

- a **total deadline** (``deadline`` seconds for the whole answer, retries included),
  checked after every chunk; no single read waits longer than what is left of it, so a
  server trickling one byte at a time cannot hold a command;
- a **cap** on the bytes of an answer read into memory (``max_bytes``), counted after
  decoding (a gzip bomb stops at the cap too);
- a **bounded, quiet retry** of idempotent requests (GET, HEAD) on a reset connection or
  a 502/503/504: ``retries`` more tries at most, said in one ``note`` line;
- **one clear error** for each way an answer can be broken: redirect loops, bad
  Content-Encoding, a body shorter than its Content-Length, HTML where JSON was
  expected, and every transport failure, worded by the caller's :class:`Wording`.

:meth:`NetClient.range_get` reads bytes ``[start, end)`` of a file and checks a 206's
Content-Range and length against what it asked for (a wrong range is an error, never
wrong bytes); a server that ignores Range is read only as far as needed, up to a limit.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckpttools.errors import CkptError, ServerError, opt

if TYPE_CHECKING:
    import httpx

__all__ = [
    "Wording",
    "NetResponse",
    "NetClient",
    "parse_url",
    "split_url",
    "quote_segment",
    "transport_exceptions",
    "failure_detail",
    "JSON_ANSWER_LIMIT",
    "MAX_REDIRECTS",
]

#: the largest answer read into memory by default (JSON answers, listings, metrics)
JSON_ANSWER_LIMIT = 64 << 20
#: redirects followed at most; more is a loop
MAX_REDIRECTS = 10
_RETRY_STATUS = (502, 503, 504)
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)$")


@dataclass(frozen=True)
class Wording:
    """How a caller words the transport failures (``{where}``: the server or repo; ``{what}``:
    the request; ``{detail}``: the exception; ``{deadline}``: seconds)."""

    error: type[CkptError] = ServerError
    connect: str = "{where}: cannot connect ({detail})"
    connect_hint: str | None = "is the server up, and is the URL right?"
    timeout: str = "{where}: {what} timed out (no whole answer within {deadline:g} s)"
    timeout_hint: str | None = f"raise {opt('timeout')} or lower {opt('max_new_tokens')}"
    failed: str = "{where}: {what} failed ({detail})"
    failed_hint: str | None = None


@dataclass
class NetResponse:
    """A finished answer: status, headers (lower-case names), the body read whole."""

    status: int
    headers: dict[str, str]
    body: bytes
    url: str
    where: str = ""
    what: str = ""
    wording: Wording = field(default_factory=Wording)
    #: bytes that crossed the network for this answer (a whole file read to reach a range counts whole)
    transferred: int = 0

    @property
    def status_code(self) -> int:
        return self.status

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (through :func:`ckpttools.io.inputs.loads_json`): an HTML page, or
        anything not JSON, is one error of the caller's class."""
        from ckpttools.io.inputs import loads_json

        head = self.body[:512].lstrip().lower()
        ctype = self.headers.get("content-type", "")
        if "text/html" in ctype or head.startswith((b"<!doctype html", b"<html", b"<")):
            raise self.wording.error(
                f"{self.where}: {self.what} answered with an HTML page, not JSON (malformed JSON): {self.text[:80]!r}",
                url=self.url,
                hint="a proxy or a login page may stand in between: check the URL and the network",
            )
        return loads_json(self.body, f"{self.where}: {self.what}", error=self.wording.error)


def parse_url(url: str) -> tuple[str, str]:
    """(scheme, host) of ``url``; ValueError when it is not a URL."""
    import httpx

    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        raise ValueError(str(e)) from None
    return u.scheme, u.host


def split_url(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port or None) of ``url``; ValueError when it is not a URL."""
    import httpx

    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        raise ValueError(str(e)) from None
    return u.scheme, u.host, u.port


def quote_segment(text: str) -> str:
    """``text`` quoted as one URL path segment (a ``/`` too)."""
    from urllib.parse import quote

    return quote(text, safe="")


def _http_clients() -> list[Any]:
    """The HTTP client modules installed: httpx2 (huggingface_hub 2.x) and httpx."""
    import importlib

    mods = []
    for name in ("httpx2", "httpx"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            continue
    return mods


def transport_exceptions() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(timeouts, every other failure of a request) of the HTTP clients installed, for wording what
    a huggingface_hub call raises: each client's whole ``HTTPError`` family (a transport failure,
    and also a redirect loop or a body that does not decode, which are no TransportError) and
    ``InvalidURL``. :func:`failure_detail` words each one."""
    timeouts: list[type[BaseException]] = []
    failures: list[type[BaseException]] = []
    for mod in _http_clients():
        timeouts.append(mod.TimeoutException)
        failures += [mod.HTTPError, mod.InvalidURL]
    return tuple(timeouts), tuple(failures)


def failure_detail(err: BaseException) -> tuple[str, bool]:
    """What a failure of :func:`transport_exceptions` means, in words, and whether it is the
    connection's (the server could not be reached, or hung up) rather than a broken answer."""
    for mod in _http_clients():
        if isinstance(err, mod.TooManyRedirects):
            return f"redirected in a loop ({str(err)[:200]})", False
        if isinstance(err, mod.DecodingError):
            return f"answered a body that does not decode as its Content-Encoding says ({str(err)[:200]})", False
        if isinstance(err, mod.HTTPStatusError):
            return f"answered {str(err)[:200]}", False
    return f"{err.__class__.__name__}: {str(err)[:200]}", True


#: one TLS context per process and CA setting: httpx builds one for each client, loading the CA bundle
#: (~27 ms here), and a measuring run makes several clients, nearly all for plain-HTTP local servers
_SSL_CONTEXTS: dict[tuple[str | None, str | None], Any] = {}


def _ssl_context() -> Any:
    """httpx's own default context (certifi's bundle, or SSL_CERT_FILE / SSL_CERT_DIR as httpx reads
    them), made once per value of those variables."""
    import httpx

    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    if key not in _SSL_CONTEXTS:
        _SSL_CONTEXTS[key] = httpx.create_ssl_context(trust_env=True)
    return _SSL_CONTEXTS[key]


class NetClient:
    """One HTTP client with deadlines, caps, bounded retries and one error per failure.

    ``timeout`` is the default total deadline of a request, ``read_timeout`` the longest
    one read may wait (never more than what is left of the deadline), ``connect`` the
    longest a connection may take.
    """

    def __init__(
        self,
        *,
        timeout: float = 600.0,
        connect: float = 10.0,
        read_timeout: float = 60.0,
        max_bytes: int = JSON_ANSWER_LIMIT,
        retries: int = 1,
        wording: Wording | None = None,
    ) -> None:
        import httpx

        self.timeout, self.connect, self.read_timeout = float(timeout), float(connect), float(read_timeout)
        self.max_bytes, self.retries = max_bytes, retries
        self.wording = wording or Wording()
        self._noted = False
        self._client = httpx.Client(
            follow_redirects=False, timeout=httpx.Timeout(self.timeout, connect=connect), verify=_ssl_context()
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> NetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the public requests ----------------------------------------------------------
    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        headers: dict[str, str] | None = None,
        deadline: float | None = None,
        max_bytes: int | None = None,
        what: str | None = None,
        where: str | None = None,
        wording: Wording | None = None,
        retries: int | None = None,
    ) -> NetResponse:
        """One request, its answer read whole (at most ``max_bytes``) within ``deadline`` seconds."""
        w = wording or self.wording
        ctx = _Ctx.starting(url, where or url, what or url, w, self.timeout if deadline is None else deadline)
        cap = self.max_bytes if max_bytes is None else max_bytes
        read = lambda r: self._read(r, ctx, cap, None)  # noqa: E731
        return self._with_retry(method, url, json, headers or {}, ctx, read, retries)

    def get(self, url: str, **kw: Any) -> NetResponse:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> NetResponse:
        return self.request("POST", url, **kw)

    def range_get(
        self,
        url: str,
        start: int,
        end: int,
        *,
        headers: dict[str, str] | None = None,
        deadline: float | None = None,
        whole_limit: int = 64 << 20,
        what: str | None = None,
        where: str | None = None,
        wording: Wording | None = None,
    ) -> NetResponse:
        """Bytes ``[start, end)`` of ``url``. A 206 must name exactly that range (a shorter one
        only where the file ends) and carry that many bytes; a 200 (Range ignored) is read
        up to ``end`` bytes, at most ``whole_limit``. An answer of 400 or more comes back
        with its status and a short body, for the caller to word."""
        w = wording or self.wording
        ctx = _Ctx.starting(url, where or url, what or url, w, self.timeout if deadline is None else deadline)
        hdrs = {**(headers or {}), "Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}

        def read(r: httpx.Response) -> NetResponse:
            if r.status_code >= 400:
                return self._read(r, ctx, 64 << 10, None)
            if "text/html" in r.headers.get("content-type", ""):
                raise _err(ctx, "answered a range request with an HTML page (a proxy or a login page?)")
            if r.status_code == 206:
                want = _check_content_range(r.headers.get("content-range"), start, end, ctx)
                got = self._read(r, ctx, want, want)
                if len(got.body) != want:
                    raise _err(ctx, f"answered {len(got.body)} bytes for a range of {want} (a truncated answer)")
                return got
            if r.status_code == 200:
                if end > whole_limit:
                    raise _err(
                        ctx,
                        f"the server answered a range request with the whole file; reading {_size(end)} of it "
                        "to reach the bytes asked for was refused",
                        hint="a proxy or mirror in between may drop Range headers: check the endpoint",
                    )
                got = self._read(r, ctx, end, end)
                got.body = got.body[start:end]
                return got
            raise _err(ctx, f"answered HTTP {r.status_code} to a range request")

        return self._with_retry("GET", url, None, hdrs, ctx, read, None)

    # -- the machinery ----------------------------------------------------------------
    def _with_retry(
        self, method: str, url: str, body: Any, headers: dict[str, str], ctx: _Ctx, read: Any, retries: int | None
    ) -> Any:
        """Send (following redirects), read, and retry an idempotent request once or twice; the
        first retry of this client says so in one note, later ones are silent."""
        from ckpttools.io.fsutil import note

        n = self.retries if retries is None else retries
        tries = 1 + (n if method in ("GET", "HEAD") else 0)
        for attempt in range(tries):
            last = attempt == tries - 1
            try:
                resp = self._send(method, url, body, headers, ctx)
            except _Retryable as e:
                if last:
                    raise _err(ctx, e.why) from None
                why = e.why
            else:
                try:
                    if resp.status_code in _RETRY_STATUS and not last:
                        why = f"HTTP {resp.status_code}"
                    else:
                        return read(resp)
                finally:
                    resp.close()
            if not self._noted:
                self._noted = True
                note(f"{ctx.where}: {ctx.what}: {why}; retrying{' once' if tries == 2 else ''}")
            time.sleep(min(0.5, max(0.0, ctx.left() / 4)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, url: str, body: Any, headers: dict[str, str], ctx: _Ctx) -> httpx.Response:
        """The response to a request (headers read, body not), redirects followed at most MAX_REDIRECTS times."""
        import httpx

        try:
            req = self._client.build_request(method, url, json=body, headers=headers)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError, TypeError) as e:
            raise _err(ctx, f"{e.__class__.__name__}: {e}") from None
        seen: list[str] = []
        while True:
            req.extensions["timeout"] = self._timeouts(ctx)
            resp = self._transport(req, ctx)
            if not resp.is_redirect or resp.next_request is None:
                return resp
            resp.close()
            seen.append(str(req.url))
            if len(seen) > MAX_REDIRECTS or str(resp.next_request.url) in seen:
                raise _err(ctx, f"redirected in a loop ({len(seen)} redirects, last to {resp.next_request.url})")
            req = resp.next_request

    def _timeouts(self, ctx: _Ctx) -> dict[str, float]:
        left = ctx.left()
        if left <= 0:
            raise _timeout(ctx)
        t = min(left, self.read_timeout)
        return {"connect": min(left, self.connect), "read": t, "write": t, "pool": t}

    def _transport(self, req: httpx.Request, ctx: _Ctx) -> httpx.Response:
        import httpx

        w = ctx.wording
        try:
            return self._client.send(req, stream=True)
        except httpx.ConnectTimeout:
            raise _timeout(ctx) from None
        except httpx.ConnectError as e:
            raise w.error(
                w.connect.format(where=ctx.where, what=ctx.what, detail=f"{e.__class__.__name__}: {e}"),
                url=ctx.url,
                hint=w.connect_hint,
            ) from None
        except httpx.TimeoutException:
            raise _timeout(ctx) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise _Retryable(f"the connection broke ({e.__class__.__name__}: {e})") from None
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise _err(ctx, f"{e.__class__.__name__}: {e}") from None

    def _read(self, r: httpx.Response, ctx: _Ctx, cap: int, stop_at: int | None) -> NetResponse:
        """The body, decoded, within the deadline and the cap (``stop_at``: enough, close early)."""
        import httpx

        buf = bytearray()
        try:
            for chunk in r.iter_bytes():
                buf += chunk
                if stop_at is not None and len(buf) >= stop_at:
                    break
                if len(buf) > cap:
                    raise _err(ctx, f"answered more than {_size(cap)}: refused (an endless or oversized answer)")
                if ctx.left() <= 0:
                    raise _timeout(ctx)
        except httpx.DecodingError as e:
            enc = r.headers.get("content-encoding", "?")
            raise _err(ctx, f"answered a body that does not decode as {enc} ({e})") from None
        except httpx.TimeoutException:
            raise _timeout(ctx) from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as e:
            raise _err(ctx, f"the answer was cut off: a truncated body ({e.__class__.__name__}: {e})") from None
        except httpx.HTTPError as e:
            raise _err(ctx, f"{e.__class__.__name__}: {e}") from None
        _check_length(r, ctx, stop_at is not None and len(buf) >= stop_at)
        body = bytes(buf[:stop_at]) if stop_at is not None else bytes(buf)
        hdrs = {k.lower(): v for k, v in r.headers.items()}
        return NetResponse(
            r.status_code, hdrs, body, str(r.url), ctx.where, ctx.what, ctx.wording, r.num_bytes_downloaded
        )


@dataclass
class _Ctx:
    url: str
    where: str
    what: str
    wording: Wording
    deadline_at: float
    started: float

    @classmethod
    def starting(cls, url: str, where: str, what: str, wording: Wording, seconds: float) -> _Ctx:
        """A request's context from now, ``seconds`` to its deadline: one reading of the clock for both, so that
        a timeout says the deadline asked for (two readings told "within 1.996 s" for 2 s where the process was
        preempted between them, on a loaded machine: a corpus case that runs both ways read differently, 2026-12-07)."""
        now = time.monotonic()
        return cls(url, where, what, wording, now + seconds, now)

    def left(self) -> float:
        return self.deadline_at - time.monotonic()


class _Retryable(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _err(ctx: _Ctx, detail: str, hint: str | None = None) -> CkptError:
    w = ctx.wording
    msg = w.failed.format(where=ctx.where, what=ctx.what, detail=detail)
    return w.error(msg, url=ctx.url, hint=hint or w.failed_hint)


def _timeout(ctx: _Ctx) -> CkptError:
    w = ctx.wording
    total = round(ctx.deadline_at - ctx.started, 3)  # what was asked: 0.5 s, not the 0.499997 s the clocks give
    err = w.error(w.timeout.format(where=ctx.where, what=ctx.what, deadline=total), url=ctx.url, hint=w.timeout_hint)
    err.timed_out = True
    return err


def _check_content_range(value: str | None, start: int, end: int, ctx: _Ctx) -> int:
    """The length a 206 answer must carry: its Content-Range names ``start`` and ends at
    ``end - 1`` (or earlier, only where the file ends)."""
    m = _CONTENT_RANGE.match((value or "").strip())
    if m is None:
        raise _err(ctx, f"answered a range request with Content-Range {value!r}, not 'bytes a-b/size'")
    a, b, total = int(m[1]), int(m[2]), m[3]
    short_at_end = b < end - 1 and total != "*" and int(total) == b + 1
    if a != start or b < a or (b != end - 1 and not short_at_end):
        raise _err(ctx, f"answered bytes {a}-{b} to a request for bytes {start}-{end - 1}: the wrong range")
    return b + 1 - a


def _check_length(r: httpx.Response, ctx: _Ctx, stopped_early: bool) -> None:
    """A plain body shorter than its Content-Length is a truncated answer."""
    n = r.headers.get("content-length")
    if stopped_early or n is None or not n.isdigit() or r.headers.get("content-encoding", "identity") != "identity":
        return
    if r.num_bytes_downloaded < int(n):
        raise _err(ctx, f"the answer was cut off: a truncated body ({r.num_bytes_downloaded} of {n} bytes)")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"
