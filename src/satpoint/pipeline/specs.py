"""Where a pipeline's DAG comes from: a Seldon Core 2 ``Pipeline``, a Triton ensemble's configuration, a chain.

**Seldon Core 2** (``mlops.seldon.io/v1alpha1``, ``kind: Pipeline``; a file may hold other documents, such as
the ``Model`` resources, around exactly one ``Pipeline``): each of ``spec.steps[]`` is a step named after its
model; ``inputs`` and ``triggers`` name what it reads, ``spec.output.steps`` what answers.  A reference is
``STEP``, ``STEP.outputs`` or ``STEP.outputs.TENSOR`` (the step's answer: an edge from STEP),
``STEP.inputs[.TENSOR]`` (what STEP itself read: an edge from each of STEP's inputs) or
``PIPELINE.inputs[.TENSOR]`` (the pipeline's request: no edge).  No ``inputs``: the pipeline's request.
``inputsJoinType`` is kept; ``tensorMap``, ``batch`` and ``joinWindowMs`` do not change the DAG.

**Triton** (``platform: "ensemble"``; the JSON ``GET /v2/models/E/config`` answers, or ``config.pbtxt``): each
of ``ensemble_scheduling.step[]`` calls ``model_name``; ``input_map`` maps the model's inputs to ensemble
tensors and ``output_map`` its outputs to ensemble tensors, so a step reads from the steps producing the
tensors it maps in (a tensor of the ensemble's ``input`` list comes from the request).  The output steps
produce the ensemble's ``output`` tensors (without that list: the steps nothing reads).  A model called
twice is two steps, ``M`` and ``M#2``.

Anything wrong is a ``ConfigError`` of one line naming the file (or pipeline) and what is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from satpoint.errors import ConfigError
from satpoint.pipeline.dag import JOINS, Join, PipelineDag, PipelineStep
from satpoint.pipeline.pbtxt import PbtxtError, parse_pbtxt

SELDON_API = "mlops.seldon.io/v1alpha1"
_ENSEMBLE_TEXT = re.compile(r"^\s*ensemble_scheduling\s*[:{<]", re.MULTILINE)


def load_spec(path: Path | str) -> PipelineDag:
    """The DAG in the file ``path``: a Triton ensemble (``config.pbtxt``, or its JSON form) or a Seldon Core 2
    ``Pipeline`` (YAML or JSON), told apart by their content."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"pipeline spec {path}: cannot read it ({reason})") from None
    return parse_spec(text, source=str(path))


def dag_from_options(spec: Path | str | None, steps: Sequence[str], name: str | None = None) -> PipelineDag:
    """The command line's pipeline: a spec file (``--pipeline-spec``) or a chain of models (``--step A --step B``,
    named ``name``), one of the two."""
    if (spec is None) == (not steps):
        raise ConfigError("give a pipeline spec file or --step models (a chain), one of the two")
    if spec is not None:
        return load_spec(spec)
    return PipelineDag.chain(name or "chain", [s.strip() for s in steps])


def parse_spec(text: str, *, source: str = "") -> PipelineDag:
    """``load_spec`` on text already read (``source`` names it in messages)."""
    pre = f"{source}: " if source else ""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "ensemble_scheduling" in data:
        return parse_triton(data, source=source)
    if data is None and (source.endswith(".pbtxt") or _ENSEMBLE_TEXT.search(text)):
        try:
            config = _flatten(parse_pbtxt(text))
        except PbtxtError as exc:
            raise ConfigError(f"{pre}not a Triton config.pbtxt ({exc})") from None
        return parse_triton(config, source=source)
    return parse_seldon(text, source=source)


# -- Seldon Core 2 ----------------------------------------------------------------------------------


def parse_seldon(text: str, *, source: str = "") -> PipelineDag:
    """The DAG of the one ``Pipeline`` resource in ``text`` (YAML, possibly several documents)."""
    pre = f"{source}: " if source else ""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - a dependency of satpoint
        raise ConfigError(f"{pre}reading a Seldon Pipeline needs PyYAML (pip install pyyaml)") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{pre}not YAML ({where}{problem})") from None
    pipelines = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Pipeline"]
    if len(pipelines) != 1:
        kinds = sorted({str(d.get("kind")) for d in docs if isinstance(d, dict)})
        found = f"{len(pipelines)} Pipelines" if pipelines else f"no Pipeline (kinds: {', '.join(kinds) or 'none'})"
        raise ConfigError(f"{pre}{found}; give a file with one Seldon Core 2 Pipeline ({SELDON_API})")
    doc = pipelines[0]
    if doc.get("apiVersion") not in (None, SELDON_API):
        raise ConfigError(f"{pre}apiVersion {doc.get('apiVersion')!r}, expected {SELDON_API}")
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{pre}the Pipeline has no metadata.name")
    spec = doc.get("spec")
    raw_steps = spec.get("steps") if isinstance(spec, dict) else None
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ConfigError(f"{pre}pipeline {name}: spec.steps must list the steps")
    output = spec.get("output") if isinstance(spec, dict) else None
    raw_outputs = output.get("steps") if isinstance(output, dict) else None
    if not isinstance(raw_outputs, list) or not raw_outputs:
        raise ConfigError(
            f"{pre}pipeline {name}: spec.output.steps is missing (a pipeline called synchronously answers "
            "with its output steps)"
        )
    return _seldon_dag(name, raw_steps, raw_outputs, source)


def _seldon_dag(name: str, raw_steps: list[Any], raw_outputs: list[Any], source: str) -> PipelineDag:
    pre = f"{source}: " if source else ""
    where = f"{pre}pipeline {name}"
    names: list[str] = []
    for i, raw in enumerate(raw_steps):
        step_name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(step_name, str) or not step_name:
            raise ConfigError(f"{where}: spec.steps[{i}] has no name")
        if step_name in names:
            raise ConfigError(f"{where}: step {step_name} is listed twice")
        names.append(step_name)
    listed = ", ".join(names)
    reads: dict[str, tuple[tuple[str, bool], ...]] = {}  # step -> (referenced step, via its inputs)
    steps: list[tuple[str, list[str], list[str], Join]] = []
    for raw in raw_steps:
        step_name = raw["name"]
        parsed: dict[str, list[str]] = {}
        for field in ("inputs", "triggers"):
            refs = raw.get(field) or []
            if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
                raise ConfigError(f"{where}: step {step_name}'s {field} must be a list of references")
            parsed[field] = refs
        join = raw.get("inputsJoinType", "inner")
        if join not in JOINS:
            raise ConfigError(f"{where}: step {step_name}'s inputsJoinType {join!r} is not one of {JOINS}")
        resolved = [_seldon_ref(r, name, names, f"{where}: step {step_name} reads", listed) for r in parsed["inputs"]]
        reads[step_name] = tuple(x for x in resolved if x is not None)
        triggers = [_seldon_ref(r, name, names, f"{where}: step {step_name} is triggered by", listed)
                    for r in parsed["triggers"]]  # fmt: skip
        steps.append((step_name, [], [t[0] for t in triggers if t is not None], join))

    def edges(step_name: str, seen: tuple[str, ...] = ()) -> list[str]:
        """What ``step_name`` reads as steps, ``X.inputs`` replaced by what X reads (cycles left to the DAG)."""
        out: list[str] = []
        for ref, via_inputs in reads[step_name]:
            if not via_inputs:
                out.append(ref)
            elif ref not in seen:
                out += edges(ref, (*seen, step_name))
        return out

    outputs = [_seldon_ref(r, name, names, f"{where}: output", listed) for r in raw_outputs if isinstance(r, str)]
    if len(outputs) != len(raw_outputs) or any(o is None or o[1] for o in outputs):
        raise ConfigError(f"{where}: spec.output.steps must name steps' outputs (STEP or STEP.outputs...)")
    return PipelineDag(
        name=name,
        steps=tuple(
            PipelineStep(n, inputs=tuple(dict.fromkeys(edges(n))), triggers=tuple(dict.fromkeys(t)), join=j)
            for n, _, t, j in steps
        ),
        outputs=tuple(dict.fromkeys(o[0] for o in outputs if o is not None)),
        kind="seldon",
    )


def _seldon_ref(ref: str, pipeline: str, names: list[str], who: str, listed: str) -> tuple[str, bool] | None:
    """``ref`` as (step, whether it names what that step read); None for the pipeline's own request."""
    parts = ref.split(".")
    head = parts[0]
    part = parts[1] if len(parts) > 1 else "outputs"
    if part not in ("inputs", "outputs") or len(parts) > 3 or not head:
        raise ConfigError(f"{who} {ref!r}: a reference is STEP, STEP.outputs[.TENSOR] or STEP.inputs[.TENSOR]")
    if head == pipeline and head not in names and part == "inputs":
        return None
    if head not in names:
        raise ConfigError(f"{who} {ref!r}, which names no step (steps: {listed})")
    return head, part == "inputs"


# -- Triton ensembles -------------------------------------------------------------------------------


def _flatten(message: Mapping[str, list[Any]]) -> dict[str, Any]:
    """A parsed ``config.pbtxt`` in the JSON form Triton's config endpoint answers: the repeated fields an
    ensemble needs stay lists, the maps (``input_map``/``output_map``) become dicts, other fields one value."""
    repeated = {"step", "input", "output"}
    out: dict[str, Any] = {}
    for key, values in message.items():
        if key in ("input_map", "output_map"):
            out[key] = {str(v.get("key", [""])[0]): str(v.get("value", [""])[0]) for v in values if isinstance(v, dict)}
            continue
        flat = [_flatten(v) if isinstance(v, dict) else v for v in values]
        out[key] = flat if key in repeated else flat[-1]
    return out


def parse_triton(config: Mapping[str, Any], *, source: str = "") -> PipelineDag:
    """The DAG of a Triton ensemble's configuration (the JSON form; ``config.pbtxt`` goes through ``parse_spec``)."""
    name = str(config.get("name") or "ensemble")
    pre = f"{source}: " if source else ""
    where = f"{pre}ensemble {name}"
    platform = config.get("platform")
    scheduling = config.get("ensemble_scheduling")
    if platform not in (None, "ensemble") or not isinstance(scheduling, Mapping):
        raise ConfigError(f"{pre}model {name} is not an ensemble (platform {platform!r}, no ensemble_scheduling)")
    raw_steps = scheduling.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ConfigError(f"{where}: ensemble_scheduling lists no step")
    inputs_listed = "input" in config
    request_tensors = {str(t.get("name")) for t in config.get("input") or [] if isinstance(t, Mapping)}
    step_names: list[str] = []
    models: list[str] = []
    reads: list[list[str]] = []
    producer: dict[str, str] = {}
    for i, raw in enumerate(raw_steps):
        model = raw.get("model_name") if isinstance(raw, Mapping) else None
        if not isinstance(model, str) or not model:
            raise ConfigError(f"{where}: step {i} has no model_name")
        count = models.count(model) + 1
        step_name = model if count == 1 else f"{model}#{count}"
        models.append(model)
        step_names.append(step_name)
        in_map, out_map = raw.get("input_map") or {}, raw.get("output_map") or {}
        if not isinstance(in_map, Mapping) or not isinstance(out_map, Mapping):
            raise ConfigError(f"{where}: step {step_name}'s input_map and output_map must map tensor names")
        reads.append([str(t) for t in in_map.values()])
        for tensor in map(str, out_map.values()):
            if tensor in producer:
                raise ConfigError(f"{where}: tensor {tensor!r} is produced by {producer[tensor]} and {step_name}")
            producer[tensor] = step_name
    steps: list[PipelineStep] = []
    for step_name, model, tensors in zip(step_names, models, reads, strict=True):
        upstream: list[str] = []
        for tensor in tensors:
            if tensor in producer:
                upstream.append(producer[tensor])
            elif inputs_listed and tensor not in request_tensors:
                raise ConfigError(
                    f"{where}: step {step_name} reads tensor {tensor!r}, which no step produces and is not an input "
                    "of the ensemble"
                )
        steps.append(PipelineStep(step_name, inputs=tuple(dict.fromkeys(upstream)), model=model))
    answer = [str(t.get("name")) for t in config.get("output") or [] if isinstance(t, Mapping)]
    if answer:
        missing = [t for t in answer if t not in producer]
        if missing:
            raise ConfigError(f"{where}: output tensor {missing[0]!r} is produced by no step")
        outputs = tuple(dict.fromkeys(producer[t] for t in answer))
    else:
        read = {u for s in steps for u in s.inputs}
        outputs = tuple(n for n in step_names if n not in read)
    return PipelineDag(name=name, steps=tuple(steps), outputs=outputs, kind="triton")
