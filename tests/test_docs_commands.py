"""Every command block the documentation marks as runnable runs, as written, and succeeds.

A fenced ``bash`` block right after a ``<!-- docs-test: run -->`` line, in README.md or any page under docs/,
is run by ``bash -euo pipefail`` in a fresh folder: a command that fails fails the test.  A block may start
``satpoint sim`` on port 8765 (loopback): the test gives it a free port instead, the only change made to
what the page says.  Blocks are bounded: 60 s each, and the pages keep them short (offline, or against
``satpoint sim`` for a few seconds)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- docs-test: run -->"
_BLOCK = re.compile(r"^<!-- docs-test: run -->\n```(?:bash|sh|console)\n(.*?)^```", re.S | re.M)
DOC_PORT = "8765"
TIMEOUT_S = 60


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)]


def marked_blocks(text: str) -> list[str]:
    """The runnable blocks of a page; a mark that is not followed by a bash block is an error."""
    blocks = _BLOCK.findall(text)
    assert len(blocks) == text.count(MARK), "a docs-test mark must be followed at once by a ```bash block"
    return blocks


def _cases() -> list[tuple[str, str]]:
    out = []
    for page in pages():
        for i, block in enumerate(marked_blocks(page.read_text())):
            out.append((f"{page.relative_to(ROOT)}#{i + 1}", block))
    return out


CASES = _cases()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = block.replace(DOC_PORT, str(_free_port()))
    env = dict(os.environ)
    # the checkout's package and console script, whichever environment runs the tests
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = "120"
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: whatever the block left running is stopped below
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n(stopped after {TIMEOUT_S} s)"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_pages_mark_runnable_blocks() -> None:
    """The marks are found (a renamed mark or fence would silently run nothing), README included."""
    where = {case.split("#")[0] for case, _ in CASES}
    assert "README.md" in where
    assert len(CASES) >= 5, CASES


@pytest.mark.slow  # each block starts Python processes; some start `satpoint sim`
@pytest.mark.parametrize(("where", "block"), CASES, ids=[c for c, _ in CASES])
def test_marked_block_runs(where: str, block: str, tmp_path: Path) -> None:
    done = run_block(block, tmp_path)
    assert done.returncode == 0, f"{where} exited {done.returncode}:\n{block}\n--- stderr\n{done.stderr[-3000:]}"


def test_a_failing_block_fails(tmp_path: Path) -> None:
    """The runner reports a command that fails inside a block, not only the block's last command."""
    assert run_block("satpoint --help >/dev/null\nsatpoint no-such-command\ntrue\n", tmp_path).returncode != 0
    text = f"x\n{MARK}\n```bash\nsatpoint --help\n```\n{MARK}\n\n```bash\ntrue\n```\n"
    with pytest.raises(AssertionError, match="followed at once"):
        marked_blocks(text)
