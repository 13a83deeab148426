"""Did two results folders measure the same load?  ``satpoint diff`` compares what the versions did under
one load; a difference of the load itself (REST against gRPC, Poisson against constant arrivals, another
payload or batch size, another model mix, streamed answers against whole ones, another in-flight cap or
number of generator processes) would be reported as a regression or an improvement of the version.  So the
two folders' headers are compared first (``config.mode``, ``config.load``, ``target``, ``mix``) and a
difference is refused, each one named, before anything is judged (``load_differences``); so are two
summaries whose stages were judged by different rules (``--max-error-rate``, ``--slo``: ``rules_differences``),
since a looser rule turns the new version's failing stages into stable ones.

Not compared: what a version change may change (the URL, the model's name and version, the server, its
settings), the search's own parameters (its rates are matched rate by rate) and what only paces or bounds
the measurement (seed, timeouts, the generator's CPUs).  A key a folder written by an older satpoint lacks
reads as that key's default (what that satpoint did).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

Header = Mapping[str, Any]


def _load(h: Header) -> Mapping[str, Any]:
    return ((h.get("config") or {}).get("load")) or {}


def _target(h: Header) -> Mapping[str, Any]:
    return h.get("target") or {}


def _payload(h: Header) -> str:
    p = _target(h).get("payload_file")
    return PurePath(str(p)).name if p else "generated from the model's metadata"


def _procs(h: Header) -> str:
    ray = _load(h).get("ray")
    if isinstance(ray, Mapping):
        return f"{ray.get('hosts') or 'every'} Ray host(s) x {ray.get('procs_per_host', 1)}"
    return str(_load(h).get("procs") or 1)


def _mix(h: Header) -> str:
    block = h.get("mix")
    if not isinstance(block, Mapping) or not block.get("models"):
        return "one model"
    pairs = sorted(zip(block["models"], block.get("weights") or [], strict=False))
    return ", ".join(f"{m}={float(w):.4g}" for m, w in pairs)


def _resident(h: Header) -> str:
    mix = _target(h).get("mix")
    k = mix.get("resident") if isinstance(mix, Mapping) else None
    return "all" if k is None else str(k)


def _inflight(h: Header) -> str:
    cap = _load(h).get("max_inflight")
    return "automatic" if cap is None else str(cap)


def _grpc_connections(h: Header) -> str:
    if str(_target(h).get("protocol") or "rest") != "grpc":
        return "-"  # REST has none: compared only between two gRPC folders (the protocol says the rest)
    n = _load(h).get("grpc_connections")
    return "automatic" if n is None else str(n)


#: (what, how it reads from a header): each compared as text, a missing key read as its default
FIELDS: tuple[tuple[str, Callable[[Header], str]], ...] = (
    ("mode", lambda h: str((h.get("config") or {}).get("mode") or "open_loop")),
    ("protocol", lambda h: str(_target(h).get("protocol") or "rest")),
    ("arrival", lambda h: str(_load(h).get("arrival") or "constant")),
    ("payload", _payload),
    ("batch size", lambda h: str(_target(h).get("batch_size") or 1)),
    ("binary data", lambda h: str(bool(_target(h).get("binary_data")))),
    ("stream", lambda h: str(bool(_target(h).get("stream")))),
    ("model mix", _mix),
    ("resident models", _resident),
    ("max in-flight", _inflight),
    ("generator processes", _procs),
    ("gRPC connections", _grpc_connections),
)


def load_differences(base: Header, new: Header) -> list[str]:
    """What differs between the loads two results headers measured, one phrase each (empty: the same)."""
    out = []
    for what, read in FIELDS:
        b, n = read(base), read(new)
        if b != n:
            out.append(f"{what} {b} (base) vs {n} (new)")
    return out


def _slo(summary: Header) -> str:
    slo = (summary.get("rules") or {}).get("slo_ms") or {}
    return ", ".join(f"{k}<{float(v):g}ms" for k, v in sorted(slo.items())) or "none"


def _max_error_rate(summary: Header) -> str:
    v = (summary.get("rules") or {}).get("max_error_rate")
    return "default" if v is None else f"{float(v):.4g}"


#: the rules a stage's verdict is judged by (``summary.json``'s ``rules``): another --max-error-rate or --slo
#: turns a failing stage into a stable one, so a saturation point or a rate held would be the rule's change
RULES: tuple[tuple[str, Callable[[Header], str]], ...] = (("max error rate", _max_error_rate), ("SLO", _slo))


def rules_differences(base: Header, new: Header) -> list[str]:
    """What differs between the verdict rules two summaries were judged by (empty: the same)."""
    return [f"{what} {read(base)} (base) vs {read(new)} (new)" for what, read in RULES if read(base) != read(new)]


def refusal(base: Header, new: Header, base_summary: Header | None = None, new_summary: Header | None = None) -> str:
    """The one line ``satpoint diff`` refuses two folders with ("" when they measured the same load and
    judged their stages by the same rules)."""
    diffs = load_differences(base, new)
    if base_summary is not None and new_summary is not None:
        diffs += rules_differences(base_summary, new_summary)
    if not diffs:
        return ""
    return (
        "the two folders measured different loads, so a difference would be the configuration's, not the "
        f"version's: {'; '.join(diffs)}. Measure both with the same options"
    )


def _sweep(doc: Header, *path: str) -> str:
    v: Any = doc.get("config") or {}
    for key in path:
        v = v.get(key) if isinstance(v, Mapping) else None
    if isinstance(v, list | tuple):
        return ", ".join(sorted(str(x) for x in v)) or "none"
    if path[-1] == "payload_file" and v:
        return PurePath(str(v)).name
    return "default" if v is None else str(v)


#: two sweeps' configurations (``sweep.json``'s ``config``): what each point was measured and judged with
SWEEP_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("--at-rps", ("at_rps",)),
    ("SLO", ("slo",)),
    ("max error rate", ("max_error_rate",)),
    ("protocol", ("server", "protocol")),
    ("batch size", ("server", "batch")),
    ("payload", ("server", "payload_file")),
    ("stream", ("server", "stream")),
    ("model mix", ("server", "mix_models")),
    ("model weights", ("server", "mix")),
    ("arrival", ("load", "arrival")),
    ("max in-flight", ("load", "max_inflight")),
    ("generator processes", ("load", "procs")),
)


def sweep_refusal(base: Header, new: Header) -> str:
    """The one line ``satpoint diff`` refuses two sweep folders with ("" when their points were measured and
    judged alike): latency at another ``--at-rps`` is latency at another offered load."""
    diffs = [
        f"{what} {_sweep(base, *path)} (base) vs {_sweep(new, *path)} (new)"
        for what, path in SWEEP_FIELDS
        if _sweep(base, *path) != _sweep(new, *path)
    ]
    if not diffs:
        return ""
    return (
        "the two sweeps measured or judged their points differently, so a difference would be the "
        f"configuration's, not the version's: {'; '.join(diffs)}. Sweep both with the same options"
    )
