"""The simulated server as a pipeline (``satpoint sim --pipeline SPEC``): each step a model with its own slots.

Every model a step calls is served on its own (``/v2/models/STEP/infer``: one request, one service on that
model's slots, as ``--model-queues``) with its own slots and service time (``--step-service MODEL=CxMS``; the
others take ``--slots`` and ``--service-ms``).  The pipeline itself is served as ``NAME`` and ``NAME.pipeline``
(Seldon Core 2 calls ``/v2/models/NAME.pipeline/infer`` with the header ``Seldon-Model: NAME.pipeline``; the sim
routes by the path and accepts the header): a pipeline request runs the DAG (``satpoint.pipeline.dag``), each
step queueing on its model's slots once every step it waits for has answered, the branches of a fan-out at the
same time, and is answered when its output steps have.  So its capacity is the slowest model's ``C/S`` (a model
called by two steps serves both on its slots, as in a Triton ensemble), and the steps' queues are the only
waiting there is: no machinery between them.

Virtual time, as the rest of the sim: a step starts at ``max(its inputs' virtual finishes, a free slot)``; it is
handed to its model's queue when the last input's timer fires (so a queue admits in time order), never
earlier than that virtual time matters.  Not with ``--metastable``, ``--stream``, pauses or ``--error-rate``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from satpoint.errors import ConfigError
from satpoint.pipeline.dag import PipelineDag
from satpoint.pipeline.specs import load_spec
from satpoint.servers.sim.metastable import Ticket
from satpoint.servers.sim.model import ErrorDraws, ServiceDraws, SimConfig, SlotScheduler
from satpoint.servers.sim.release import arm_at

_SERVICE = re.compile(r"^(?P<model>[^=\s]+)=(?P<slots>\d+)x(?P<ms>[0-9.]+(?:e[-+]?\d+)?)$")
SPEC_SUFFIXES = (".yaml", ".yml", ".json", ".pbtxt")
PIPELINE_SUFFIX = ".pipeline"


@dataclass(frozen=True)
class StepService:
    """One model's slots and mean service time."""

    slots: int
    service_ms: float

    @property
    def capacity_rps(self) -> float:
        return self.slots / (self.service_ms / 1000.0)


@dataclass(frozen=True)
class SimPipeline:
    """The DAG the sim runs and each model's service (every model a step calls, in the DAG's order)."""

    dag: PipelineDag
    services: tuple[tuple[str, StepService], ...]

    @classmethod
    def from_options(
        cls, spec: str, step_services: Sequence[str], *, slots: int, service_ms: float, name: str = "sim"
    ) -> SimPipeline:
        """``--pipeline SPEC`` (a spec file, see ``satpoint.pipeline.specs``, or a chain ``A,B,C`` named ``name``)
        and ``--step-service MODEL=SLOTSxMS`` (each model not named: ``slots`` x ``service_ms``)."""
        path = Path(spec)
        if path.suffix.lower() in SPEC_SUFFIXES or path.exists():
            dag = load_spec(path)
        else:
            dag = PipelineDag.chain(name, [m.strip() for m in spec.split(",")])
        models = list(dict.fromkeys(s.model for s in dag.steps))
        given: dict[str, StepService] = {}
        for text in step_services:
            m = _SERVICE.match(text.strip())
            if m is None:
                raise ConfigError(f"sim: --step-service {text!r}: expected MODEL=SLOTSxMS, e.g. embed=2x10")
            model, step_slots, ms = m["model"], int(m["slots"]), float(m["ms"])
            if model not in models:
                raise ConfigError(f"sim: --step-service {text!r}: no step calls model {model} ({', '.join(models)})")
            if step_slots < 1 or not ms > 0:
                raise ConfigError(f"sim: --step-service {text!r}: slots must be >= 1 and the service time > 0 ms")
            given[model] = StepService(step_slots, ms)
        default = StepService(slots, service_ms)
        return cls(dag, tuple((m, given.get(m, default)) for m in models))

    @property
    def names(self) -> tuple[str, str]:
        """The names the pipeline is called by: ``NAME`` and ``NAME.pipeline``."""
        return self.dag.name, self.dag.name + PIPELINE_SUFFIX

    @property
    def served(self) -> tuple[str, ...]:
        """Every model name the sim answers for: each step's model, then the pipeline's names."""
        return (*(m for m, _ in self.services), *self.names)

    @property
    def capacity_rps(self) -> float:
        """The pipeline's capacity: its slowest model's (every request visits every step)."""
        return min(s.capacity_rps for _, s in self.services)

    @property
    def bottleneck(self) -> str:
        return min(self.services, key=lambda ms: ms[1].capacity_rps)[0]

    def configure(self, config: SimConfig) -> SimConfig:
        """``config`` serving this pipeline's names; ``ConfigError`` for what a pipeline sim does not do."""
        if config.metastable or config.stream or config.pause_every_s is not None or config.error_rate > 0:
            raise ConfigError("sim: --pipeline does not mix with --metastable, --stream, pauses or --error-rate")
        if config.models or config.model_queues:
            raise ConfigError("sim: --pipeline serves its steps' models and the pipeline: leave out --models")
        clash = [n for n in self.names if n in dict(self.services)]
        if clash:
            raise ConfigError(f"sim: --pipeline: a step's model is named like the pipeline ({clash[0]})")
        return replace(config, models=self.served)

    def line(self) -> str:
        """What the sim prints at start, before its listening line."""
        steps = ", ".join(f"{m} {s.slots}x{s.service_ms:g} ms ({s.capacity_rps:.10g} rps)" for m, s in self.services)
        return (
            f"satpoint sim pipeline {self.dag.name} ({' or '.join(self.names)}): {steps}; capacity "
            f"{self.capacity_rps:.10g} rps (bottleneck {self.bottleneck})"
        )


class _Run:
    """One pipeline request on its way through the DAG."""

    __slots__ = ("finish_s", "ticket", "waiting")

    def __init__(self, ticket: Ticket, waiting: dict[str, int]) -> None:
        self.ticket = ticket
        self.waiting = waiting
        self.finish_s: dict[str, float] = {}


class PipelineRunner:
    """Each model's queue, and pipeline requests run through the DAG on them (see the module's doc).

    ``on_answer(ticket)`` is called once a pipeline request's output steps have answered, with
    ``ticket.finish_s`` set (the latest output step's virtual finish)."""

    def __init__(
        self,
        pipeline: SimPipeline,
        config: SimConfig,
        loop: asyncio.AbstractEventLoop,
        origin_s: float,
        on_answer: Callable[[Ticket], None],
    ) -> None:
        self._dag = pipeline.dag
        self._loop = loop
        self._on_answer = on_answer
        seeds = np.random.SeedSequence(config.seed).spawn(len(pipeline.services))
        self._queues = {
            m: SlotScheduler(
                slots=s.slots,
                service=ServiceDraws(config.dist, s.service_ms / 1000.0, np.random.default_rng(seed)),
                errors=ErrorDraws(0.0, np.random.default_rng(0)),
                origin_s=origin_s,
            )
            for (m, s), seed in zip(pipeline.services, seeds, strict=True)
        }
        self._by_name = {m.encode(): q for m, q in self._queues.items()}
        self._pipeline_names = frozenset(n.encode() for n in pipeline.names)
        self._model = {s.name: s.model for s in self._dag.steps}
        self._upstream = {n: self._dag.upstream(n) for n in self._dag.names}
        self._downstream = {n: self._dag.downstream(n) for n in self._dag.names}
        self._roots = tuple(n for n in self._dag.names if not self._upstream[n])

    def queue(self, model: bytes) -> SlotScheduler | None:
        """The queue of a step's model called alone; None for any other name."""
        return self._by_name.get(model)

    def is_pipeline(self, model: bytes) -> bool:
        return model in self._pipeline_names

    def run(self, arrival_s: float) -> Ticket:
        """Start a pipeline request that arrived at ``arrival_s``; its ticket takes the answer (``payload``)."""
        ticket = Ticket(arrival_s, False)
        run = _Run(ticket, {n: len(u) for n, u in self._upstream.items()})
        for name in self._roots:
            self._start(run, name, arrival_s)
        return ticket

    def _start(self, run: _Run, name: str, ready_s: float) -> None:
        finish_s = self._queues[self._model[name]].admit(ready_s).finish_s
        arm_at(self._loop, finish_s, lambda: self._done(run, name, finish_s))

    def _done(self, run: _Run, name: str, finish_s: float) -> None:
        run.finish_s[name] = finish_s
        for nxt in self._downstream[name]:
            run.waiting[nxt] -= 1
            if run.waiting[nxt] == 0:
                self._start(run, nxt, max(run.finish_s[u] for u in self._upstream[nxt]))
        outputs = self._dag.outputs
        if name in outputs and run.ticket.finish_s is None and all(o in run.finish_s for o in outputs):
            run.ticket.finish_s = max(run.finish_s[o] for o in outputs)
            self._on_answer(run.ticket)
