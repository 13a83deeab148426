"""satpoint.observe.prom: Prometheus text parsed with prometheus_client's parser, a scrape over loopback."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from satpoint.observe.prom import parse_prometheus_text, scrape
from tests.http_stub import QuietHandler, serving

MLSERVER_TEXT = textwrap.dedent(
    """
    # HELP model_infer_request_success Model infer request success count
    # TYPE model_infer_request_success counter
    model_infer_request_success_total{model="iris",version=""} 7.0
    model_infer_request_success_total{model="other",version=""} 2.0
    # HELP model_infer_request_duration Model infer request duration
    # TYPE model_infer_request_duration summary
    model_infer_request_duration_count{model="iris",version="None"} 7.0
    model_infer_request_duration_sum{model="iris",version="None"} 0.0285
    model_infer_request_duration_count{model="other",version="None"} 3.0
    # TYPE parallel_request_queue histogram
    parallel_request_queue_bucket{le="+Inf"} 7.0
    parallel_request_queue_count 10.0 1700000000000
    parallel_request_queue_sum 12.0
    """
)


def test_the_library_parser_reads_mlserver_text() -> None:
    samples = parse_prometheus_text(MLSERVER_TEXT)
    assert ("model_infer_request_duration_sum", {"model": "iris", "version": "None"}, 0.0285) in samples
    assert ("model_infer_request_success_total", {"model": "iris", "version": ""}, 7.0) in samples
    assert ("parallel_request_queue_count", {}, 10.0) in samples


def test_a_line_the_parser_refuses_does_not_hide_the_others() -> None:
    text = 'weird{path="/a b,c}",q="x\\"y"} 2\nbroken{oops 1\nfine_total 3\n'
    samples = parse_prometheus_text(text)
    assert ("weird", {"path": "/a b,c}", "q": 'x"y'}, 2.0) in samples
    assert ("fine_total", {}, 3.0) in samples
    assert all(not name.startswith("broken") for name, _, _ in samples)


@pytest.fixture
def endpoint() -> Iterator[str]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, MLSERVER_TEXT.encode(), {"Content-Type": "text/plain; version=0.0.4"})

    with serving(Handler) as url:
        yield f"{url}/metrics"


def test_scrape_over_loopback(endpoint: str) -> None:
    samples = scrape(endpoint)
    assert len(samples) == 8
    assert ("model_infer_request_duration_count", {"model": "iris", "version": "None"}, 7.0) in samples
    assert ("parallel_request_queue_count", {}, 10.0) in samples


def test_scrape_of_nothing_raises_os_error() -> None:
    with pytest.raises(OSError):
        scrape("http://127.0.0.1:9/metrics", timeout_s=1)
