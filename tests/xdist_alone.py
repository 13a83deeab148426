"""The suite's pytest-xdist scheduler: the tests run on parallel workers (``-n`` in ``pyproject.toml``), except those
marked ``alone``, which run afterwards on one worker while no other test runs.

A test is marked ``alone`` when what it asserts depends on the machine being otherwise idle: the CPU other processes
use (the observer counts it as other work, the diff holds figures back as measured on a busy machine), the machine's
speed, or a capacity, a latency or a generator lag that a sibling worker's load would move.

The controller does not collect: each worker writes the node ids of its tests marked ``alone`` (and ``slow``) to a
file in a folder the controller made and named in the worker's input, before it reports its collection.  (xdist's own
groups travel as a suffix of the node id, which pytest 9.2 no longer lets a plugin change.)

The other tests go out a module at a time (its module-scoped servers start once), the modules with a test marked
``slow`` first, each to the worker that is about to run out: the quick modules even out the workers' ends.  Once
none is left, every worker but the one asking for more is shut down (each finishes what it holds); when they are
gone and the kept worker holds at most the test it cannot start before it knows the next one, the ``alone`` tests
go to it, in collection order.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from xdist.scheduler import LoadScheduling

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.workermanage import WorkerController

#: the marker
ALONE = "alone"
#: the folder where the workers write the node ids of their tests marked ``alone`` (in the controller)
_FOLDER = pytest.StashKey[Path]()
#: the key of that folder in a worker's input
_INPUT_KEY = "satpoint_alone_folder"


def configure(config: pytest.Config) -> None:
    """In the controller of a parallel run: the folder the workers write to."""
    if not hasattr(config, "workerinput") and config.getvalue("dist") == "loadgroup":
        config.stash[_FOLDER] = Path(tempfile.mkdtemp(prefix="pytest-alone-"))


def unconfigure(config: pytest.Config) -> None:
    if (folder := config.stash.get(_FOLDER, None)) is not None:
        shutil.rmtree(folder, ignore_errors=True)


def configure_node(node: Any) -> None:
    """The folder, named in the input of each worker the controller starts."""
    if (folder := node.config.stash.get(_FOLDER, None)) is not None:
        node.workerinput[_INPUT_KEY] = str(folder)


def collection_finish(session: pytest.Session) -> None:
    """In a worker, before it reports its collection: the node ids of its tests marked ``alone`` and of those
    marked ``slow``, one a line."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is None or _INPUT_KEY not in workerinput:
        return
    for marker in (ALONE, "slow"):
        marked = [item.nodeid for item in session.items if item.get_closest_marker(marker) is not None]
        (Path(workerinput[_INPUT_KEY]) / f"{workerinput['workerid']}.{marker}").write_text(
            "".join(f"{i}\n" for i in marked)
        )


def _marked(config: pytest.Config, marker: str) -> set[str]:
    folder = config.stash.get(_FOLDER, None)
    if folder is None:
        return set()
    return {line for f in folder.glob(f"*.{marker}") for line in f.read_text().splitlines() if line}


class AloneLastScheduling(LoadScheduling):
    """The tests not marked ``alone`` a module at a time to whichever worker runs out; then the ``alone`` ones, on one
    worker, by themselves.  (``LoadScheduling`` keeps the collections, the nodes and what each holds.)"""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.units: deque[list[int]] = deque()
        self.alone: list[int] = []
        self.alone_sent = False
        self.keep: WorkerController | None = None

    @property
    def tests_finished(self) -> bool:
        if self.collection is None or self.units or (self.alone and not self.alone_sent):
            return False
        return super().tests_finished

    @property
    def has_pending(self) -> bool:
        return bool(self.units) or bool(self.alone and not self.alone_sent) or super().has_pending

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is None:
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = next(iter(self.node2collection.values()))
            alone, slow = _marked(self.config, ALONE), _marked(self.config, "slow")
            self.alone = [i for i, nodeid in enumerate(self.collection) if nodeid in alone]
            modules: dict[str, list[int]] = {}
            for i, nodeid in enumerate(self.collection):
                if nodeid not in alone:
                    modules.setdefault(nodeid.split("::")[0], []).append(i)
            has_slow = [m for m in modules.values() if any(self.collection[i] in slow for i in m)]
            self.units.extend(has_slow + [m for m in modules.values() if m not in has_slow])
        for node in self.nodes:
            self.check_schedule(node)

    def check_schedule(self, node: WorkerController, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:  # what a crashed worker held, handed out again first
            self.units.appendleft(self.pending[:])
            self.pending.clear()
        if self.units:
            if len(self.node2pending[node]) < 2:  # it cannot start the one test it holds before it knows the next
                self._send(node, self.units.popleft())
            return
        if not self.alone or self.alone_sent:
            if not self.node2pending[node]:
                node.shutdown()
            return
        # nothing left but the ``alone`` tests: keep this worker, let the others finish and stop
        if self.keep is None or self.keep not in self.node2pending:
            self.keep = node
        for other in self.nodes:
            if other is not self.keep and not other.shutting_down:
                other.shutdown()
        self._send_alone_when_by_itself()

    def _send(self, node: WorkerController, indices: list[int]) -> None:
        self.node2pending[node].extend(indices)
        node.send_runtest_some(indices)

    def _send_alone_when_by_itself(self) -> None:
        keep = self.keep
        if keep is None or self.alone_sent or self.nodes != [keep] or len(self.node2pending[keep]) >= 2:
            return
        self.log(f"{len(self.alone)} tests marked {ALONE} to {keep.gateway.id}, the other workers stopped")
        self.alone_sent = True
        self._send(keep, self.alone)

    def remove_node(self, node: WorkerController) -> str | None:
        crashitem = super().remove_node(node)
        if node is self.keep:
            self.keep = None
        if self.nodes and not self.units and not self.pending and self.alone and not self.alone_sent:
            self.keep = self.keep or self.nodes[0]
            self._send_alone_when_by_itself()
        return crashitem
