"""Real JupyterLab and real Chromium for the UI benchmarks: the harness the browser tests
use (:mod:`chongming_nb.testing.lab`), plus the statistics the benchmarks print."""

from __future__ import annotations

from chongming_nb.testing.lab import UnavailableError, chromium, jupyter_lab

__all__ = ["UnavailableError", "chromium", "jupyter_lab", "percentile"]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
