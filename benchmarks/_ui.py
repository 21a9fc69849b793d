"""Real JupyterLab and real Chromium for the UI benchmarks: the harness the browser tests
use (:mod:`chongming_nb.testing.lab`), plus the statistics the benchmarks print."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from chongming_nb.testing.lab import UnavailableError, chromium, jupyter_lab

__all__ = ["UnavailableError", "chromium", "jupyter_lab", "percentile", "static_page"]


@contextlib.contextmanager
def static_page(
    files: Mapping[str, tuple[str, str]], width: int, height: int = 900
) -> Iterator[Any]:
    """A Chromium page showing ``files["index.html"]`` of a made-up origin that serves
    ``files`` (name -> (body, content type)); closed on exit."""

    def serve(route: Any) -> None:
        name = route.request.url.rsplit("/", 1)[-1].split("?")[0] or "index.html"
        body, ctype = files.get(name, ("not found", "text/plain"))
        route.fulfill(status=200 if name in files else 404, body=body, content_type=ctype)

    with chromium() as browser:
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.route("http://bench.invalid/**", serve)
        page.goto("http://bench.invalid/index.html")
        try:
            yield page
        finally:
            context.close()


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)
