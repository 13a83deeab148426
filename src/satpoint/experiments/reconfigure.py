"""The ``--reconfigure`` command of a sweep point: its placeholders filled in as literal shell words
(whatever quotes they stand in), the knobs also given as ``SATPOINT_KNOB_*`` variables, the command passed
to the shell through its environment rather than its argv, and its output recorded redacted."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from satpoint.analysis.sweep.space import template_parts
from satpoint.errors import SatpointError
from satpoint.procedures.progress import OnEvent, say
from satpoint.redact import redact_text

_OUTPUT_TAIL = 4000  # characters of a reconfigure command's output kept in sweep.json


def _quote_state(text: str, state: str) -> str:
    """The POSIX shell's quoting after ``text`` when it starts in ``state`` (``""``, ``"'"`` or ``'"'``)."""
    i = 0
    while i < len(text):
        c = text[i]
        if state == "'":
            if c == "'":
                state = ""
        elif c == "\\":
            if i + 1 == len(text):
                raise ValueError("--reconfigure: a placeholder right after a backslash cannot be quoted")
            i += 1  # the next character is escaped (outside quotes, and in double quotes before $ ` " \\)
        elif state == '"':
            if c == '"':
                state = ""
        elif c in "'\"":
            state = c
        i += 1
    return state


def render_command(template: str, knobs: Mapping[str, Any]) -> str:
    """The command for a point: each ``{knob}`` replaced by its value as one literal shell word part,
    wherever it stands: unquoted, in single quotes or in double quotes (the quotes are closed around the
    shell-quoted value and reopened), so no value is ever expanded or executed by the shell."""
    out: list[str] = []
    state = ""
    for literal, name in template_parts(template):
        out.append(literal)
        state = _quote_state(literal, state)
        if name is None:
            continue
        if name not in knobs:
            raise ValueError(f"--reconfigure uses {{{name}}} but the point gives it no value")
        quoted = shlex.quote(str(knobs[name]))
        out.append(f"{state}{quoted}{state}")
    return "".join(out)


def knob_env(knobs: Mapping[str, Any]) -> dict[str, str]:
    """The point's knobs for the command's environment: ``SATPOINT_KNOB_<name>`` (``.`` → ``_``)."""
    return {"SATPOINT_KNOB_" + re.sub(r"[^A-Za-z0-9_]", "_", k): str(v) for k, v in knobs.items()}


#: the command goes to the shell through its (private) environment, not its (world-readable) argv
_SHELL = ["/bin/sh", "-c", 'eval "$SATPOINT_RECONFIGURE"']


def run_reconfigure(
    template: str,
    knobs: Mapping[str, Any],
    *,
    stop: threading.Event,
    on_event: OnEvent | None = None,
    timeout_s: float = 600.0,
    secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """Run the reconfigure command for a point; its command line, exit code, time and output are returned
    (and recorded), redacted (``satpoint.redact``, also of the literal ``secrets``). A failing command
    raises ``SatpointError`` quoting the end of its output."""
    command = render_command(template, knobs)
    shown = redact_text(command, secrets)
    say(on_event, f"reconfigure: {shown}")
    env = {**os.environ, **knob_env(knobs), "SATPOINT_RECONFIGURE": command}
    t0 = time.monotonic()
    # the output goes to a file, not a pipe: a command that leaves a background child (``kubectl
    # port-forward … &``) is done when its shell exits, not when that child closes its end of a pipe
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(_SHELL, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                try:
                    proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    if stop.is_set() or time.monotonic() - t0 > timeout_s:
                        os.killpg(proc.pid, 9)
                        proc.wait()
                        why = "interrupted" if stop.is_set() else f"timed out after {timeout_s:g} s"
                        raise SatpointError(f"reconfigure command {why}: {shown}") from None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
        log.seek(0)
        out = log.read()
    text = redact_text(out.decode(errors="replace"), secrets)
    record = {
        "command": shown,
        "exit_code": proc.returncode,
        "seconds": round(time.monotonic() - t0, 3),
        "output": text[-_OUTPUT_TAIL:],
    }
    if proc.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise SatpointError(f"reconfigure command exited with {proc.returncode}: {shown}\n{tail}")
    return record
