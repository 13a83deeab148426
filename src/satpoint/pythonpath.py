"""The ``PYTHONPATH`` of the processes satpoint starts (servers, the observer): they import this satpoint.

Imports nothing of satpoint: every layer may use it.
"""

from __future__ import annotations

import os
from pathlib import Path


def satpoint_root() -> Path:
    """The folder satpoint was imported from (the server's processes must import the same satpoint)."""
    return Path(__file__).resolve().parent.parent


def prepend_pythonpath(env: dict[str, str], root: Path) -> None:
    """Put ``root`` first on the server's PYTHONPATH, unless it is a site directory (already on the path,
    and putting it before the standard library could shadow it) or already there.  Relative entries are
    made absolute: the server runs in a folder of its own."""
    import site

    sites = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    parts = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in sites and all(Path(p).resolve() != root for p in parts):
        parts.insert(0, str(root))
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
