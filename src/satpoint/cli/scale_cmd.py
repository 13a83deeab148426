"""``satpoint scale-test``: a load shape made to exercise an autoscaler, with the replica count watched beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from satpoint import api
from satpoint.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLD,
    HeaderOpt,
    HtmlOpt,
    TimeoutOpt,
    UrlProtocolOpt,
    console,
    fail,
    guarded,
    interruptible,
    parse_headers,
    secrets_of,
)
from satpoint.cli.contract import reasons, refuse_unused
from satpoint.config import LoadOptions
from satpoint.endpoints.spec import Target, resolve_protocol
from satpoint.reports.terminal.progress import EventPrinter
from satpoint.reports.terminal.scale import print_scale

_SOURCES = (
    "give one replica source: --replicas-cmd CMD, --replicas-prom URL with --replicas-query Q, or "
    "--replicas-k8s NAMESPACE/KIND/NAME"
)


_SCALE_ANY = frozenset(
    (
        "url", "model", "from_rps", "to_rps", "ramp_s", "base_s", "hold_s", "down_hold_s", "slo", "capacity_rps",
        "capacity", "settle_s", "predict", "protocol", "header", "timeout", "seed", "max_inflight", "out", "html",
    )
)  # fmt: skip
_SCALE_SOURCE = {
    "cmd": ("replicas_cmd",),
    "prom": ("replicas_prom", "replicas_query", "replicas_desired_query"),
    "k8s": ("replicas_k8s", "replicas_k8s_url", "replicas_k8s_token_file"),
}
_PREDICT = ("predict_sync_s", "predict_window_s", "predict_delay_s", "predict_max")
_SCALE_WHY = reasons(
    (_SCALE_SOURCE["cmd"], "the replica count comes from one source"),
    (_SCALE_SOURCE["prom"][1:], "only with --replicas-prom"),
    (_SCALE_SOURCE["k8s"][1:], "only with --replicas-k8s"),
    (_PREDICT, "only with --predict"),
    (("settle_max_s",), "only with --settle-s"),
)


def refuse_for_scale(ctx: typer.Context, source: str, predict: bool, settle: bool) -> None:
    """``scale-test``: a replica source's options without that source, --predict's and --settle-s's tuning
    without them, are refused in one line before any load."""
    used = set(_SCALE_ANY) | set(_SCALE_SOURCE.get(source, ()))
    used |= set(_PREDICT) if predict else set()
    used |= {"settle_max_s"} if settle else set()
    refuse_unused(ctx, f"scale-test --replicas-{source}" if source else "scale-test", frozenset(used), _SCALE_WHY)


def scale_test(
    ctx: typer.Context,
    url: Annotated[str, typer.Option("--url", "-u", help="the autoscaled service's base URL")],
    model: Annotated[str, typer.Option("--model", "-m", help="the model to call")],
    from_rps: Annotated[float, typer.Option("--from", help="the base rate, rps (held before and after the peak)")],
    to_rps: Annotated[float, typer.Option("--to", help="the peak rate, rps")],
    ramp_s: Annotated[float, typer.Option(help="seconds from the base to the peak (0: a step)")] = 0.0,
    base_s: Annotated[
        float, typer.Option(help="seconds at the base rate before the peak (let the replica count settle)")
    ] = 60.0,
    hold_s: Annotated[float, typer.Option(help="seconds the peak is held")] = 300.0,
    down_hold_s: Annotated[
        float,
        typer.Option(help="seconds back at the base rate (HPA's scale-down window is 300 s; KEDA's cooldown too)"),
    ] = 360.0,
    slo: Annotated[
        str, typer.Option(help="the latency objective per second of due times, e.g. p99<500ms (failed = over)")
    ] = "p99<500ms",
    replicas_cmd: Annotated[
        str | None,
        typer.Option(help="a shell command printing the ready replica count (a second number: the desired count)"),
    ] = None,
    replicas_prom: Annotated[
        str | None, typer.Option(help="a Prometheus server's URL (HTTP API /api/v1/query) to read the count from")
    ] = None,
    replicas_query: Annotated[
        str | None,
        typer.Option(
            help="with --replicas-prom: the ready count (series summed), e.g. "
            'kube_deployment_status_replicas_available{deployment="m"}'
        ),
    ] = None,
    replicas_desired_query: Annotated[
        str | None, typer.Option(help="with --replicas-prom: the desired count, e.g. kube_deployment_spec_replicas")
    ] = None,
    replicas_k8s: Annotated[
        str | None,
        typer.Option(
            help="NAMESPACE/KIND/NAME (KIND: deployment, statefulset, hpa): its ready and desired counts from "
            "the Kubernetes API at --replicas-k8s-url"
        ),
    ] = None,
    replicas_k8s_url: Annotated[
        str, typer.Option(help="the Kubernetes API: kubectl proxy's URL, or the API server with a token")
    ] = "http://127.0.0.1:8001",
    replicas_k8s_token_file: Annotated[
        Path | None, typer.Option(help="a file holding a bearer token for --replicas-k8s-url")
    ] = None,
    capacity_rps: Annotated[
        float | None,
        typer.Option(help="one replica's saturation S (from satpoint find): the margin check m >= r x d / S"),
    ] = None,
    capacity: Annotated[
        Path | None, typer.Option(help="a satpoint find folder: its saturation point is one replica's S")
    ] = None,
    settle_s: Annotated[
        float, typer.Option(help="before any load, wait until the replica count held this long (0: no wait)")
    ] = 0.0,
    settle_max_s: Annotated[float, typer.Option(help="--settle-s: wait at most this long, then test anyway")] = 600.0,
    predict: Annotated[
        float | None,
        typer.Option(
            help="also run the load through a model of the replicas and the HPA rule with this utilisation "
            "target (needs --capacity or --capacity-rps): predicted against measured seconds over the objective"
        ),
    ] = None,
    predict_sync_s: Annotated[float, typer.Option(help="--predict: the HPA's sync period, s")] = 15.0,
    predict_window_s: Annotated[float, typer.Option(help="--predict: the scale-down stabilisation window, s")] = 300.0,
    predict_delay_s: Annotated[
        float | None, typer.Option(help="--predict: decision to ready, s (default: measured)")
    ] = None,
    predict_max: Annotated[int | None, typer.Option(help="--predict: maxReplicas (default: the peak measured)")] = None,
    protocol: UrlProtocolOpt = None,
    header: HeaderOpt = None,
    timeout: TimeoutOpt = 30.0,
    seed: Annotated[int, typer.Option(help="seed for the payloads")] = 0,
    max_inflight: Annotated[int | None, typer.Option(help="in-flight cap (default: from the rate)")] = None,
    out: Annotated[Path | None, typer.Option(help="results folder (default results/scale-TIMESTAMP)")] = None,
    html: HtmlOpt = False,
) -> None:
    """Does the replica count arrive before the users notice?  Open-loop load at --from rps for --base-s, then a
    step (or a --ramp-s ramp) to --to rps held --hold-s, then back to --from held --down-hold-s; every latency
    from the intended send time.  The replica count is read once a second from --replicas-cmd or
    --replicas-prom/--replicas-query (read once before any load: unreachable, or no series, is exit 2).  Reports
    the time from the step to the desired count changing and to each new replica ready, the time to recover
    (the objective --slo holding again per second; errors, timeouts and requests never sent count as over it),
    seconds and requests over the objective, the scale-down, and with --capacity DIR or --capacity-rps the margin
    check (m >= r x d / S against the margin in use at the base rate); all in
    summary.json's scale block.  Exit 3 when the objective did not hold again before the end of the peak."""
    secrets = secrets_of([url, replicas_prom or "", replicas_k8s_url], parse_headers(header))

    chosen = [k for k, v in (("cmd", replicas_cmd), ("prom", replicas_prom), ("k8s", replicas_k8s)) if v is not None]
    if len(chosen) > 1:
        raise fail(f"{' and '.join('--replicas-' + c for c in chosen)}: the replica count comes from one source")
    refuse_for_scale(ctx, chosen[0] if chosen else "", predict is not None, settle_s > 0)

    def body() -> int:
        if len(chosen) != 1:
            raise fail(_SOURCES)
        if (replicas_prom is None) != (replicas_query is None) or (replicas_desired_query and not replicas_prom):
            raise fail("--replicas-prom and --replicas-query go together (and --replicas-desired-query with them)")
        token = replicas_k8s_token_file.read_text().strip() if replicas_k8s_token_file is not None else None
        source = (
            api.CommandSource(replicas_cmd)
            if replicas_cmd is not None
            else api.K8sSource(replicas_k8s_url, replicas_k8s, token)
            if replicas_k8s is not None
            else api.PromSource(replicas_prom or "", replicas_query or "", replicas_desired_query)
        )
        options = api.ScaleOptions(
            from_rps, to_rps, ramp_s=ramp_s, base_s=base_s, hold_s=hold_s, down_hold_s=down_hold_s, slo=slo,
            capacity_rps=capacity_rps, capacity_dir=capacity,
            settle_s=settle_s, settle_max_s=settle_max_s, predict_target=predict, predict_sync_s=predict_sync_s,
            predict_window_s=predict_window_s, predict_delay_s=predict_delay_s, predict_max=predict_max,
        )  # fmt: skip
        target = Target(url, model, protocol=resolve_protocol(url, protocol), headers=parse_headers(header))
        load = LoadOptions(seed=seed, max_inflight=max_inflight, timeout_s=timeout, drain_s=min(10.0, timeout))
        with interruptible() as stop, EventPrinter(console, secrets) as printer:
            result = api.scale_test(target, source, options, load=load, out=out, html=html, on_event=printer, stop=stop)
        print_scale(console, result.scale, str(result.out_dir))
        if stop.is_set():
            return EXIT_INTERRUPTED
        if result.summary.get("target_lost"):
            return EXIT_FAILED
        return EXIT_THRESHOLD if result.scale["recovered"] is False else EXIT_OK

    guarded(body, secrets)
