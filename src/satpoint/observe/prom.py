"""Prometheus endpoints: fetch the text exposition and parse it with ``prometheus_client``'s parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from satpoint.metrics.observed import PromSample
from satpoint.observe.triton_stats import is_stats_url, parse_stats


def parse_prometheus_text(text: str) -> list[PromSample]:
    """Samples ``(name, labels, value)`` of a text exposition, parsed with ``prometheus_client``.  A
    document the parser refuses is parsed again line by line and the lines it refuses are skipped (one
    odd exporter must not hide the rest)."""
    try:
        return _parse(text)
    except ValueError:
        pass
    out: list[PromSample] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            out.extend(_parse(line + "\n"))
        except ValueError:
            continue
    return out


def _parse(text: str) -> list[PromSample]:
    out: list[PromSample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels), float(s.value)))
    return out


def fetch(url: str, timeout_s: float = 2.0, headers: dict[str, str] | None = None) -> str:
    """GET a metrics endpoint (no proxy: an ``http_proxy`` must not capture a loopback scrape), with ``headers``.
    Raises ``OSError`` (``urllib.error.URLError`` included) when it cannot."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=timeout_s) as resp:
        data: bytes = resp.read()
    return data.decode("utf-8", errors="replace")


def scrape(url: str, timeout_s: float = 2.0) -> list[PromSample]:
    """Every sample an endpoint returns now (a Triton statistics endpoint's JSON as samples too)."""
    if is_stats_url(url):
        return parse_stats(fetch(url, timeout_s))
    return parse_prometheus_text(fetch(url, timeout_s))
