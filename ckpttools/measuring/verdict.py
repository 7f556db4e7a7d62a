"""The verdict of a measurement, shared by ``ckpt verify`` and ``ckpt logs``: the exit code of a
figure against its bar, and the statistics both state it with (the 95% interval, percentiles)."""

from __future__ import annotations

import math
import statistics

from ckpttools.errors import EXIT_FINDINGS, EXIT_UNMEASURED

__all__ = ["verdict_exit_code", "ci95", "t95", "pct"]

# two-sided 95% t critical values, df 1..30 (beyond: normal 1.96)
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def verdict_exit_code(accept_length: float | None, passed: bool | None) -> int:
    """The exit code of a measurement (verify's, and ckpt logs'): 3 nothing measured, 1 below the bar."""
    if accept_length is None:
        return EXIT_UNMEASURED
    return EXIT_FINDINGS if passed is False else 0


def t95(n: int) -> float:
    """The two-sided 95% t critical value for the mean of ``n`` values (n >= 2)."""
    return _T95[n - 2] if n - 1 <= len(_T95) else 1.96


def ci95(values: list[float]) -> list[float] | None:
    """The 95% interval of the mean of ``values`` (None: fewer than two)."""
    if len(values) < 2:
        return None
    m = statistics.fmean(values)
    h = t95(len(values)) * statistics.stdev(values) / math.sqrt(len(values))
    return [m - h, m + h]


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values``, linearly interpolated."""
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
