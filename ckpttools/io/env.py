"""The environment variables ckpttools and huggingface_hub read, checked before either uses one.

huggingface_hub reads its variables once, when ``huggingface_hub.constants`` is first
imported (by ckpttools, or by transformers): an ``HF_HUB_DOWNLOAD_TIMEOUT`` of ``1.5`` is a
ValueError raised from inside that import, an unknown ``HF_HUB_VERBOSITY`` a stray warning
line, ``HF_HUB_OFFLINE=y`` silently means online, an empty ``HF_HOME`` puts the cache in the
working directory. So :func:`check_hub_env` checks every variable of :data:`HUB_VARS` (a bad
value is one :class:`~ckpttools.errors.EnvVarError` naming it) and :func:`hub_constants`
imports the module only after that check; ckpttools calls one of them before anything that
imports huggingface_hub. ckpttools' own variables are read by :func:`env_seconds` and
:func:`debug`.

The values accepted are those huggingface_hub gives a meaning to (huggingface_hub 2.4.0,
``constants.py:16-25`` ``_is_true`` and ``_as_int``, ``utils/logging.py:32-38``); a flag may also
be written off (``0``, ``false``, ``no``, ``off``, or empty), which it reads as false too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from types import ModuleType

from ckpttools.errors import EnvVarError

__all__ = ["HUB_VARS", "check_hub_env", "hub_constants", "env_seconds", "debug"]

_TRUE = frozenset({"1", "ON", "YES", "TRUE"})  # huggingface_hub constants.py:13 ENV_VARS_TRUE_VALUES
_FALSE = frozenset({"", "0", "OFF", "NO", "FALSE"})
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # huggingface_hub utils/logging.py:32-38
#: the longest read timeout accepted: a day (every Hub deadline is a few times it)
_MAX_TIMEOUT_S = 86_400


def _flag(value: str) -> str | None:
    if value.upper() in _TRUE | _FALSE:  # huggingface_hub compares the value as it is, unstripped
        return None
    return "is not a flag: give 1 (or true, yes, on) to set it, 0 (or false, no, off) to clear it"


def _timeout(value: str) -> str | None:
    try:
        n = int(value)  # as huggingface_hub reads it
    except ValueError:
        return f"is not a whole number of seconds (huggingface_hub reads it with int()), from 1 to {_MAX_TIMEOUT_S}"
    if not 1 <= n <= _MAX_TIMEOUT_S:  # 0 would silently mean huggingface_hub's default
        return f"is out of range: a whole number of seconds from 1 to {_MAX_TIMEOUT_S}"
    return None


def _verbosity(value: str) -> str | None:
    return None if value in _LOG_LEVELS or value == "" else f"is not one of {', '.join(_LOG_LEVELS)}"


def _endpoint(value: str) -> str | None:
    from ckpttools.io.net import split_url

    try:
        scheme, host, port = split_url(value)
    except ValueError:  # a port that is no number, a bracket left open
        return "is not a URL, e.g. https://huggingface.co"
    if scheme not in ("http", "https") or not host or value != value.strip():
        return "is not an http(s) URL with a host, e.g. https://huggingface.co"
    if port is not None and not 0 < port < 65536:
        return f"names port {port}: ports run from 1 to 65535"
    return None


def _path(value: str) -> str | None:
    return "is set but empty: huggingface_hub would put its files in the working directory" if value == "" else None


def _folder(value: str) -> str | None:
    p = os.path.expanduser(os.path.expandvars(value))  # as huggingface_hub expands it
    if value and os.path.exists(p) and not os.path.isdir(p):
        return "names a file, not a folder: huggingface_hub keeps its cache and token under it"
    return _path(value)


def _token(value: str) -> str | None:
    t = value.replace("\r", "").replace("\n", "").strip()  # huggingface_hub utils/_auth.py _clean_token
    if t and not all("!" <= c <= "~" for c in t):
        return "holds characters no token has (tokens are printable ASCII without spaces); it cannot be sent"
    return None


#: every variable huggingface_hub reads that changes what a ckpttools command does, and its check
HUB_VARS: dict[str, Callable[[str], str | None]] = {
    "HF_ENDPOINT": _endpoint,
    "HF_HUB_DOWNLOAD_TIMEOUT": _timeout,
    "HF_HUB_ETAG_TIMEOUT": _timeout,
    "HF_HUB_VERBOSITY": _verbosity,
    "HF_TOKEN": _token,
    "HUGGING_FACE_HUB_TOKEN": _token,
    **dict.fromkeys(
        (
            "HF_HOME",
            "XDG_CACHE_HOME",
            "HF_HUB_CACHE",
            "HUGGINGFACE_HUB_CACHE",
            "HF_ASSETS_CACHE",
            "HUGGINGFACE_ASSETS_CACHE",
            "HF_XET_CACHE",
        ),
        _folder,
    ),
    "HF_TOKEN_PATH": _path,
    **dict.fromkeys(
        (
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE",
            "HF_HUB_DISABLE_PROGRESS_BARS",
            "HF_HUB_DISABLE_TELEMETRY",
            "HF_HUB_DISABLE_XET",
            "HF_HUB_DISABLE_SYMLINKS",
            "HF_HUB_DISABLE_SYMLINKS_WARNING",
            "HF_HUB_DISABLE_EXPERIMENTAL_WARNING",
            "HF_HUB_DISABLE_IMPLICIT_TOKEN",
            "HF_HUB_DISABLE_SHARED_BLOBS",
            "HF_HUB_DISABLE_UPDATE_CHECK",
            "HF_HUB_ENABLE_HF_TRANSFER",
            "HF_XET_HIGH_PERFORMANCE",
            "HF_DEBUG",
            "HUGGINGFACE_CO_STAGING",
        ),
        _flag,
    ),
}


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 80 else repr(value[:80]) + f" ({len(value)} characters)"


def check_hub_env() -> None:
    """Every variable of :data:`HUB_VARS` that is set holds a value huggingface_hub can use.

    Raises:
        EnvVarError: the first bad one, by name (a token's value is never shown).
    """
    for name, check in HUB_VARS.items():
        value = os.environ.get(name)
        if value is None:
            continue
        why = check(value)
        if why is not None:
            shown = "" if check is _token else f"={_shown(value)}"
            raise EnvVarError(name, f"environment variable {name}{shown} {why}", hint=f"fix or unset {name}")


def hub_constants() -> ModuleType:
    """``huggingface_hub.constants``, imported after :func:`check_hub_env`. What its import warns
    (a deprecated variable that is set) becomes one ``note`` line, not a Python warning.

    Raises:
        EnvVarError
    """
    import sys

    check_hub_env()
    mod = sys.modules.get("huggingface_hub.constants")
    if mod is not None:
        return mod
    import warnings

    from ckpttools.io.fsutil import note

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from huggingface_hub import constants
    for w in caught:
        note(f"huggingface_hub: {str(w.message).split('. ')[0]}")
    return constants


def env_seconds(name: str, *, hi: float = 1e6) -> float | None:
    """The variable ``name`` as a number of seconds in ``(0, hi]``; None when it is unset or empty.

    Raises:
        EnvVarError: set to anything else.
    """
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        v = float(value)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= hi):
        raise EnvVarError(
            name,
            f"environment variable {name}={_shown(value)} is not a number of seconds more than 0 and at most {hi:g}",
            hint=f"fix or unset {name}",
        )
    return v


def debug() -> bool:
    """Whether ``CKPT_DEBUG`` asks for tracebacks: ``1`` yes; unset, empty or ``0`` no.

    Raises:
        EnvVarError: any other value.
    """
    value = os.environ.get("CKPT_DEBUG")
    if value is None or value in ("", "0"):
        return False
    if value == "1":
        return True
    raise EnvVarError(
        "CKPT_DEBUG",
        f"environment variable CKPT_DEBUG={_shown(value)} is not 0 or 1",
        hint="set CKPT_DEBUG=1 or unset it",
    )
