"""``--reconfigure``: every ``{knob}`` arrives as exactly its value wherever it stands in the command
(unquoted, in single or double quotes: the sweep guide's JSON patch verbatim), nothing in a value is ever run
by the shell, the command stays out of argv, and what ``sweep.json`` and the terminal get of it, of the
server's URLs and of its environment is redacted; ``--resume`` runs no command read from the folder."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path

import pytest

from satpoint.analysis.sweep.space import parse_set, placeholders
from satpoint.experiments.reconfigure import render_command, run_reconfigure
from satpoint.experiments.sweep_servers import BaseServer
from satpoint.redact import REDACTED

SWEEP_GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "tuning-sweeps.md"
TOKEN = "tok-RECONF-SECRET-7"
HOSTILE = "a b $(touch PWNED) `touch PWNED2` \"q\" 'r' \\ ${HOME} ; exit 9"


def _readme_command() -> str:
    """The ``--reconfigure`` argument of the sweep guide's remote example, as a shell would pass it."""
    text = SWEEP_GUIDE.read_text()
    (arg,) = re.findall(r"--reconfigure '([^']*)'\n", text)
    return arg


@pytest.fixture
def fake_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``kubectl`` first on PATH that prints its arguments as JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "kubectl"
    exe.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    return exe


def test_the_sweep_guide_example_runs_verbatim(fake_kubectl: Path) -> None:
    cmd = _readme_command()
    assert placeholders(cmd) == ["replicas"]
    parse_set(["replicas=1,2"], "remote", cmd)
    rec = run_reconfigure(cmd, {"replicas": 2}, stop=threading.Event(), timeout_s=20)
    argv = json.loads(rec["output"])
    assert argv[:5] == ["patch", "model", "m", "--type", "merge"]
    assert json.loads(argv[argv.index("-p") + 1]) == {"spec": {"replicas": 2}}


def test_a_placeholder_in_quotes_or_not_arrives_as_its_value_and_nothing_runs(tmp_path: Path) -> None:
    template = "cd {dir} && printf '%s\\n' {v} \"v={v}\" 'w={v}' \"$SATPOINT_KNOB_v\""
    rec = run_reconfigure(template, {"v": HOSTILE, "dir": str(tmp_path)}, stop=threading.Event(), timeout_s=20)
    assert rec["output"].splitlines() == [HOSTILE, f"v={HOSTILE}", f"w={HOSTILE}", HOSTILE]
    assert not list(tmp_path.iterdir())  # neither $(...) nor `...` ran
    assert rec["exit_code"] == 0


def test_render_command_quotes_per_context() -> None:
    assert render_command("echo {a} {b}", {"a": "x y", "b": "$(rm -rf /)"}) == "echo 'x y' '$(rm -rf /)'"
    assert render_command('echo "n={a}"', {"a": "x y"}) == 'echo "n="\'x y\'""'
    assert render_command("echo 'n={a}'", {"a": "x"}) == "echo 'n='x''"
    with pytest.raises(ValueError, match=r"literal brace as \{\{"):
        placeholders('kubectl patch -p "{\\"spec\\":{\\"replicas\\":{replicas}}}"')


def test_the_command_and_its_output_are_redacted_and_stay_out_of_argv() -> None:
    base = BaseServer(kind="remote", url=f"http://h:1/?token={TOKEN}", model="m")
    cmd = "ps -o args= -p $$; echo applied {n} with $SATPOINT_KNOB_n --token=" + TOKEN
    shown: list[str] = []
    rec = run_reconfigure(
        cmd, {"n": 3}, stop=threading.Event(), timeout_s=20, secrets=base.secret_values(),
        on_event=lambda e: shown.append(str(getattr(e, "text", e))),
    )  # fmt: skip
    text = json.dumps(rec) + "".join(shown)
    assert TOKEN not in text, text
    assert "applied 3 with 3 --token=***" in rec["output"]
    shell_argv = rec["output"].splitlines()[0]
    assert "applied" not in shell_argv and "SATPOINT_RECONFIGURE" in shell_argv


def test_sweep_json_holds_no_secret_and_resume_asks_for_them_again() -> None:
    base = BaseServer(
        kind="remote",
        url=f"http://u:{TOKEN}@h:1/v2",
        grpc_url=f"grpc://u:{TOKEN}@h:2",
        model="m",
        metrics_urls=(f"http://h:3/metrics?token={TOKEN}",),
        env=(("HF_TOKEN", TOKEN), ("OMP_NUM_THREADS", "2")),
        headers=(("Authorization", f"Bearer {TOKEN}"),),
        reconfigure="deploy --token " + TOKEN + " --replicas {replicas}",
    )
    d = base.to_dict()
    assert TOKEN not in json.dumps(d)
    assert d["url"] == f"http://u:{REDACTED}@h:1/v2" and d["metrics_urls"] == [f"http://h:3/metrics?token={REDACTED}"]
    assert d["env"] == {"HF_TOKEN": REDACTED, "OMP_NUM_THREADS": "2"}
    assert d["reconfigure"] == f"deploy --token {REDACTED} --replicas {{replicas}}"
    stored = BaseServer.from_dict(json.loads(json.dumps(d)), base.headers)
    with pytest.raises(ValueError, match="give --url again"):
        stored.resumed()
    again = {
        "url": base.url, "grpc_url": base.grpc_url, "metrics_urls": base.metrics_urls,
        "env": [("HF_TOKEN", TOKEN)],
    }  # fmt: skip
    with pytest.raises(
        ValueError, match=r"(?s)as recorded\): deploy --token \*\*\* --replicas \{replicas\}.*--reconfigure"
    ):
        stored.resumed(**again)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not the sweep's command"):
        stored.resumed(**again, reconfigure="rm -rf / {replicas}")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="HF_TOKEN"):
        stored.resumed(**{**again, "env": []}, reconfigure=base.reconfigure)  # type: ignore[arg-type]
    assert stored.resumed(**again, reconfigure=base.reconfigure) == base  # type: ignore[arg-type]
