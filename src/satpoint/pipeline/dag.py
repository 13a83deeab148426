"""A pipeline as a DAG of steps: each step a model call, reading the answers of the steps it names.

A step with no inputs reads the pipeline's request.  Every step reads *all* its inputs (Seldon's ``inner``
join, Triton's ensemble scheduler), so a request visits every step of the DAG, branches of a fan-out in
parallel.  Two things are kept but not modelled: ``triggers`` (a conditional step, which some requests skip)
and Seldon's ``any``/``outer`` joins (a step that may start before all its inputs are in); see
``satpoint.pipeline.predict`` for what the prediction assumes of them.

Checked when built: step names unique, every input, trigger and output a step of the pipeline, at least one
output, and no cycle.  Each refusal is a ``ConfigError`` of one line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from satpoint.errors import ConfigError

Join = Literal["inner", "outer", "any"]
JOINS: tuple[str, ...] = ("inner", "outer", "any")
Kind = Literal["seldon", "triton", "chain"]


@dataclass(frozen=True)
class PipelineStep:
    """One step: ``name`` (unique in its pipeline), the ``model`` called for it (the name, unless a Triton
    ensemble calls one model twice), the steps whose answers it reads (``inputs``; none: the pipeline's
    request), the steps whose tensors must exist for it to run (``triggers``) and how it joins its inputs."""

    name: str
    inputs: tuple[str, ...] = ()
    model: str = ""
    triggers: tuple[str, ...] = ()
    join: Join = "inner"

    def __post_init__(self) -> None:
        if not self.model:
            object.__setattr__(self, "model", self.name)

    @property
    def conditional(self) -> bool:
        """Some requests may skip it: it runs only when its triggers' tensors exist."""
        return bool(self.triggers)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "model": self.model, "inputs": list(self.inputs)}
        if self.triggers:
            out["triggers"] = list(self.triggers)
        if self.join != "inner":
            out["join"] = self.join
        return out


@dataclass(frozen=True)
class PipelineDag:
    """The steps of pipeline ``name`` (in the order its spec lists them) and the steps whose answers make its
    answer (``outputs``).  ``kind`` says where it was read from."""

    name: str
    steps: tuple[PipelineStep, ...]
    outputs: tuple[str, ...]
    kind: Kind = "chain"

    def __post_init__(self) -> None:
        where = f"pipeline {self.name}"
        if not self.steps:
            raise ConfigError(f"{where}: no steps")
        names = [s.name for s in self.steps]
        seen: set[str] = set()
        for name in names:
            if not name or name in seen:
                raise ConfigError(f"{where}: step {name!r} " + ("is named twice" if name else "has no name"))
            seen.add(name)
        listed = ", ".join(names)
        for step in self.steps:
            for ref in (*step.inputs, *step.triggers):
                if ref not in seen:
                    raise ConfigError(f"{where}: step {step.name} reads {ref!r}, which names no step (steps: {listed})")
        if not self.outputs:
            raise ConfigError(f"{where}: no output step")
        for ref in self.outputs:
            if ref not in seen:
                raise ConfigError(f"{where}: output {ref!r} names no step (steps: {listed})")
        cycle = self._cycle()
        if cycle:
            raise ConfigError(f"{where}: a cycle: {' -> '.join(cycle)} (cyclic pipelines are not supported)")

    @classmethod
    def chain(cls, name: str, models: Iterable[str]) -> PipelineDag:
        """``--step A --step B --step C``: each step reads the one before it; the last one answers."""
        names = list(models)
        steps = tuple(PipelineStep(m, inputs=(names[i - 1],) if i else ()) for i, m in enumerate(names))
        return cls(name=name, steps=steps, outputs=(names[-1],) if names else (), kind="chain")

    def step(self, name: str) -> PipelineStep:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.steps)

    def upstream(self, name: str) -> tuple[str, ...]:
        """The steps ``name`` waits for: its inputs, then its triggers (each once)."""
        step = self.step(name)
        return tuple(dict.fromkeys((*step.inputs, *step.triggers)))

    def downstream(self, name: str) -> tuple[str, ...]:
        """The steps that wait for ``name``, in the spec's order."""
        return tuple(s.name for s in self.steps if name in self.upstream(s.name))

    def order(self) -> tuple[str, ...]:
        """The steps in an order where each comes after every step it waits for (the spec's order among
        steps that could go either way)."""
        done: dict[str, None] = {}
        pending = list(self.names)
        while pending:
            ready = next(n for n in pending if all(u in done for u in self.upstream(n)))
            done[ready] = None
            pending.remove(ready)
        return tuple(done)

    def paths(self) -> tuple[tuple[str, ...], ...]:
        """Every path from a step that reads the pipeline's request to an output step, following what each
        step waits for (inputs and triggers)."""
        out: list[tuple[str, ...]] = []

        def walk(name: str, suffix: tuple[str, ...]) -> None:
            up = self.upstream(name)
            if not up:
                out.append((name, *suffix))
            for u in up:
                walk(u, (name, *suffix))

        for o in self.outputs:
            walk(o, ())
        return tuple(sorted(dict.fromkeys(out), key=lambda p: [self.names.index(n) for n in p]))

    def _cycle(self) -> list[str]:
        """A cycle in data-flow order (``a -> b``: b reads a) starting at its first step in the spec's order;
        empty when there is none."""
        down: dict[str, list[str]] = {s.name: [] for s in self.steps}
        for s in self.steps:
            for u in dict.fromkeys((*s.inputs, *s.triggers)):
                down[u].append(s.name)
        state: dict[str, int] = {}  # 1: on the stack, 2: done
        stack: list[str] = []

        def visit(name: str) -> list[str]:
            state[name] = 1
            stack.append(name)
            for nxt in down[name]:
                if state.get(nxt) == 1:
                    return [*stack[stack.index(nxt) :], nxt]
                if nxt not in state:
                    found = visit(nxt)
                    if found:
                        return found
            stack.pop()
            state[name] = 2
            return []

        for s in self.steps:
            if s.name not in state:
                found = visit(s.name)
                if found:
                    return found
        return []

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "steps": [s.to_dict() for s in self.steps],
            "outputs": list(self.outputs),
        }
