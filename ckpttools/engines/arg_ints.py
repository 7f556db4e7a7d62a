"""How an engine reads a whole number given to one of its launch flags (``--max-model-len 1k``).

SGLang and vLLM both take human-readable numbers there, with different grammars: ckpttools reads a
flag's value as the release it launches will (the release table's ``int_flags`` names the grammar and
where it was read), so that what the launch serves is what the axis marks and the advice weighs.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["GRAMMARS", "read_int"]

_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_SI_IEC = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_DEC = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BIN = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_DEC_BIN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def _plain(value: str) -> int | None:
    try:
        return int(value)  # as the engines fall back to it: Python's int()
    except ValueError:
        return None


def _si_iec(value: str) -> int | None:
    """SGLang's ``human_readable_int``: SI suffixes k M G T (decimals allowed), IEC Ki Mi Gi Ti
    (whole numbers only), case-sensitive; else ``int()``."""
    m = _SI_IEC.fullmatch(value)
    if m is None:
        return _plain(value)
    number, suffix = m.groups()
    if suffix in _IEC:
        return None if "." in number else int(number) * _IEC[suffix]
    try:
        return int(Decimal(number) * _SI[suffix])
    except InvalidOperation:
        return None


def _dec_bin_auto(value: str) -> int | None:
    """vLLM's ``human_readable_int_or_auto``: ``-1`` or ``auto`` (any case) for the engine's own
    choice (None here); lower-case k m g t decimal (decimals allowed), upper-case K M G T binary
    (whole numbers only); else ``int()``."""
    if value == "-1" or value.lower() == "auto":
        return None
    m = _DEC_BIN.fullmatch(value)
    if m is None:
        return _plain(value)
    number, suffix = m.groups()
    if suffix in _DEC:
        return int(float(number) * _DEC[suffix])
    return None if "." in number else int(number) * _BIN[suffix]


#: the grammars a release table's ``int_flags`` may name
GRAMMARS = {"si_iec": _si_iec, "dec_bin_auto": _dec_bin_auto}


def read_int(grammar: str, value: str) -> int | None:
    """``value`` as a flag of that grammar reads it: a positive whole number, or None where the
    engine would refuse it, choose for itself (``auto``), or read no positive number."""
    value = value.strip()
    if not value:
        return None
    try:
        n = GRAMMARS[grammar](value)
    except (ValueError, OverflowError):  # a float past its range, int()'s digit limit
        return None
    return n if n is not None and n > 0 else None
