"""The replica sources: a command's numbers, its failures as one line, and the wait for a settled count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satpoint.errors import ConfigError
from satpoint.observe.replicas import CommandSource, K8sSource, settle


class _Counts:
    name = "test"

    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.i = 0

    def read(self) -> tuple[float, float | None]:
        v = self.values[min(self.i, len(self.values) - 1)]
        self.i += 1
        return v, None


def test_a_command_gives_the_ready_and_the_desired_count() -> None:
    assert CommandSource("echo 3 5").read() == (3.0, 5.0)
    assert CommandSource("printf 'replicas: 2\\n'").read() == (2.0, None)
    with pytest.raises(ConfigError, match="printed no number"):
        CommandSource("echo none").read()
    with pytest.raises(ConfigError, match=r"failed \(exit 3\): oops"):
        CommandSource("echo oops >&2; exit 3").read()
    with pytest.raises(ConfigError, match="did not finish"):
        CommandSource("sleep 5", timeout_s=0.2).read()


def test_settle_waits_until_the_count_holds() -> None:
    source = _Counts([4, 4, 3, 2, 1, 1, 1, 1, 1, 1])
    settled, readings = settle(source, quiet_s=0.05, max_s=5.0, every_s=0.02)
    assert settled and readings[-1].ready == 1 and len(readings) >= 6


def test_settle_gives_up_at_its_bound() -> None:
    source = _Counts([float(i % 2) for i in range(1000)])  # flapping for ever
    settled, readings = settle(source, quiet_s=0.2, max_s=0.1, every_s=0.02)
    assert not settled and len(readings) >= 3


def _k8s_api(state: dict[str, object]) -> type:
    from tests.http_stub import QuietHandler

    class Api(QuietHandler):
        def do_GET(self) -> None:
            state["path"] = self.path
            if self.headers.get("Authorization") != "Bearer s3cret":
                self.reply(401, b'{"kind":"Status","code":401}')
                return
            docs = {
                "/apis/apps/v1/namespaces/prod/deployments/iris": {"spec": {"replicas": 4},
                                                                    "status": {"readyReplicas": 2}},
                "/apis/autoscaling/v2/namespaces/prod/horizontalpodautoscalers/iris": {
                    "status": {"currentReplicas": 3, "desiredReplicas": 5}},
                "/apis/apps/v1/namespaces/prod/statefulsets/cold": {"spec": {"replicas": 1}, "status": {}},
            }  # fmt: skip
            doc = docs.get(self.path)
            self.reply(200 if doc else 404, json.dumps(doc or {"kind": "Status", "code": 404}).encode())

    return Api


def test_the_kubernetes_source_reads_the_resources_status() -> None:
    from tests.http_stub import serving

    state: dict[str, object] = {}
    with serving(_k8s_api(state)) as url:
        assert K8sSource(url, "prod/deployment/iris", "s3cret").read() == (2.0, 4.0)
        assert K8sSource(url, "prod/HorizontalPodAutoscaler/iris", "s3cret").read() == (3.0, 5.0)
        assert K8sSource(url, "prod/statefulsets/cold", "s3cret").read() == (0.0, 1.0)  # none ready yet
        with pytest.raises(ConfigError, match="HTTP 401"):
            K8sSource(url, "prod/deployment/iris").read()
        with pytest.raises(ConfigError, match="HTTP 404"):
            K8sSource(url, "prod/deployment/nope", "s3cret").read()
    with pytest.raises(ConfigError, match="cannot reach the Kubernetes API"):
        K8sSource("http://127.0.0.1:9", "prod/deployment/iris").read()
    with pytest.raises(ConfigError, match="NAMESPACE/KIND/NAME"):
        K8sSource("http://127.0.0.1:9", "prod/pod/iris")


def test_an_unreadable_kubernetes_source_is_one_line_before_any_load(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from satpoint.cli.main import app
    from tests.http_stub import serving

    token = tmp_path / "token"
    token.write_text("wrong\n")
    with serving(_k8s_api({})) as api:
        r = CliRunner().invoke(app, ["scale-test", "--url", "http://127.0.0.1:9", "-m", "m", "--from", "1", "--to",
                                     "2", "--replicas-k8s", "prod/deployment/iris", "--replicas-k8s-url", api,
                                     "--replicas-k8s-token-file", str(token)])  # fmt: skip
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "HTTP 401" in lines[0], r.output
    assert "wrong" not in r.output
