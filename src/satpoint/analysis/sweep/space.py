"""What a sweep varies: knobs, their values, and the grid of points (``satpoint sweep --set K=V1,V2``).

A knob belongs to a *server kind*: the embedded MLServer (``mlserver``), the embedded Triton
(``triton``: its model configuration's batching and instances), the synthetic server (``sim``: capacity
known, for trying sweeps out and for tests) or a remote deployment changed by a command per point
(``remote``: ``--reconfigure 'CMD {knob}'``) or, for a remote Triton in explicit model control, by
reloading the model with a changed configuration (the Triton knobs).  ``protocol`` and ``batch`` are
client-side on every kind.  Values are checked before anything starts; an unknown knob or a bad value
is a ``ValueError`` naming the valid ones.
"""

from __future__ import annotations

import itertools
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from satpoint.plan import parse_arrival
from satpoint.servers.limits.cgroups import parse_cpu_limit, parse_memory
from satpoint.servers.mlserver.folder_onnx import check_folder_onnx, find_folder_onnx
from satpoint.servers.models.demo import DEMO_MODELS, RUNTIME_CHOICES_TEXT, check_runtime, parse_runtime

KnobType = Literal["int", "float", "choice", "text", "path"]
ServerKind = Literal["mlserver", "triton", "sim", "remote"]
SERVER_KINDS: tuple[ServerKind, ...] = ("mlserver", "triton", "sim", "remote")

ENV_PREFIX = "env."
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KNOB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


@dataclass(frozen=True)
class Knob:
    """One thing a sweep can vary."""

    name: str
    type: KnobType
    help: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    #: applied by the generator (no server restart needed), e.g. the protocol
    client_side: bool = False
    #: a text knob's check: its value in canonical form, or a ValueError saying why not
    check: Callable[[str], str] | None = None

    @property
    def numeric(self) -> bool:
        return self.type in ("int", "float")

    def parse(self, raw: str) -> int | float | str:
        text = raw.strip()
        if not text:
            raise ValueError(f"{self.name}: empty value")
        if self.type == "int":
            try:
                value: int | float = int(text)
            except ValueError:
                raise ValueError(f"{self.name} takes whole numbers, got {text!r}") from None
        elif self.type == "float":
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{self.name} takes numbers, got {text!r}") from None
        elif self.type == "choice":
            if text not in self.choices:
                raise ValueError(f"{self.name} takes {', '.join(self.choices)}; got {text!r}")
            return text
        elif self.type == "path":
            path = Path(text).expanduser()
            if not (path / "model-settings.json").is_file():
                raise ValueError(f"{self.name}: {text!r} is not an MLServer model folder (no model-settings.json)")
            return str(path)
        else:
            return self.check(text) if self.check is not None else text
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{self.name} must be >= {self.minimum:g}, got {text}")
        return value


_PROTOCOL = Knob("protocol", "choice", "rest or grpc (client side)", choices=("rest", "grpc"), client_side=True)
_BATCH = Knob("batch", "int", "rows per request: the input size (client side)", minimum=1, client_side=True)
_ARRIVAL = Knob(
    "arrival",
    "text",
    "arrival process of the load (client side): constant, poisson, gamma:CV, onoff:ON_S,OFF_S,PEAK",
    client_side=True,
    check=lambda text: parse_arrival(text).text,
)
_CPUS = Knob("server_cpus", "int", "how many cores the server is pinned to", minimum=1)
_DEMO_MODEL = Knob("demo_model", "choice", "demo model", choices=tuple(DEMO_MODELS))
_MODELS = Knob(
    "models",
    "int",
    "how many independent copies of the demo model the embedded server serves (iris-000…; --demo-models)",
    minimum=1,
)


#: a limit knob's value for "no limit"
NO_LIMIT = "none"


def cpu_limit_value(text: str) -> str:
    """A ``server_cpu_limit`` value in canonical form: cores (``1.5``; ``1500m`` is ``1.5``) or ``none``."""
    return NO_LIMIT if text.lower() == NO_LIMIT else f"{parse_cpu_limit(text):g}"


def memory_limit_value(text: str) -> str:
    """A ``server_memory_limit`` value as given (``256M``, ``1Gi``) once checked, or ``none``."""
    if text.lower() == NO_LIMIT:
        return NO_LIMIT
    parse_memory(text)
    return text.replace(" ", "")


_CPU_LIMIT = Knob(
    "server_cpu_limit",
    "text",
    "a CPU limit as Kubernetes sets it: a CFS quota of that many cores per 100 ms (0.5, 1.5, 1500m; none)",
    check=cpu_limit_value,
)
_MEMORY_LIMIT = Knob(
    "server_memory_limit",
    "text",
    "a memory limit as Kubernetes sets it (256M, 512Mi, 1G; none): a breach is an OOM kill",
    check=memory_limit_value,
)


def runtime_value(text: str) -> str:
    """A ``runtime`` knob value in canonical form (``pruned:.50`` is ``pruned:0.5``); a ValueError
    naming the valid ones otherwise."""
    kind, share = parse_runtime(text)
    return f"pruned:{share:g}" if share is not None else kind


def check_artefact_point(
    values: dict[str, Any], base_demo_model: str | None, base_runtime: str | None, base_model_dir: str | None = None
) -> None:
    """An embedded MLServer point's artefact that cannot be built (``onnx-int8`` or ``pruned:F`` on a model
    without an MLP; a runtime a user's model folder cannot be served through; ``max_tokens``/``input_len`` on
    another model than ``textgen``): a ``ValueError`` saying why, before anything starts."""
    runtime = values.get("runtime", base_runtime)
    model_dir = values.get("model_dir", base_model_dir)
    demo = str(values.get("demo_model", base_demo_model or "iris"))
    textgen = [k for k in ("max_tokens", "input_len") if k in values]
    if textgen and (model_dir is not None or demo not in DEMO_MODELS or not DEMO_MODELS[demo].streaming):
        raise ValueError(
            f"{', '.join(textgen)}: knobs of the streaming demo model (--demo-model textgen), not of {demo}"
        )
    if model_dir is not None:
        if runtime is not None and str(runtime) != "sklearn":  # the default: the folder served as it is
            check_folder_onnx(find_folder_onnx(Path(model_dir), str(runtime)), str(runtime))
        return
    if runtime is not None:
        check_runtime(str(runtime), str(values.get("demo_model", base_demo_model or "iris")))


#: a Triton model configuration's knobs: the embedded Triton restarts with them; a remote Triton (explicit
#: model control) reloads the model with them through its repository API
TRITON_KNOBS: tuple[Knob, ...] = (
    Knob("max_batch_size", "int", "Triton max_batch_size (the largest batch the model is given)", minimum=1),
    Knob("max_queue_delay_us", "int", "Triton dynamic batcher: max_queue_delay_microseconds", minimum=0),
    Knob("preferred_batch_size", "int", "Triton dynamic batcher: preferred_batch_size", minimum=1),
    Knob("instances", "int", "Triton instance_group count (model instances)", minimum=1),
)

KNOBS: dict[ServerKind, tuple[Knob, ...]] = {
    "mlserver": (
        Knob("workers", "int", "MLServer parallel_workers (0 = inference in the main process)", minimum=0),
        Knob("max_batch_size", "int", "adaptive batching size (1 = off)", minimum=1),
        Knob("max_batch_time", "float", "adaptive batching wait, seconds", minimum=0),
        _PROTOCOL,
        _BATCH,
        _ARRIVAL,
        _CPUS,
        _CPU_LIMIT,
        _MEMORY_LIMIT,
        Knob(
            "runtime",
            "text",
            f"artefact of the demo model: {RUNTIME_CHOICES_TEXT} (of a model_dir's one ONNX model: onnx, onnx-int8, "
            "openvino)",
            check=runtime_value,
        ),
        _DEMO_MODEL,
        Knob("model_dir", "path", "an MLServer model folder (the artefact comparison)"),
        Knob("max_tokens", "int", "textgen demo model: answer length, characters (chunks per stream)", minimum=1),
        Knob("input_len", "int", "textgen demo model: prompt length (the request's input width)", minimum=1),
        _MODELS,
    ),
    "sim": (
        Knob("workers", "int", "parallel slots of the synthetic server", minimum=1),
        Knob("service_ms", "float", "mean service time, ms", minimum=0.001),
        _PROTOCOL,
        _BATCH,
        _ARRIVAL,
        _CPUS,
    ),
    "triton": (
        *TRITON_KNOBS,
        _PROTOCOL,
        _BATCH,
        _ARRIVAL,
        _CPUS,
        _DEMO_MODEL,
        _MODELS,
    ),
    "remote": (_PROTOCOL, _BATCH, _ARRIVAL, *TRITON_KNOBS),
}


def check_triton_point(values: dict[str, Any], base_max_batch_size: int | None) -> None:
    """A Triton point's knobs that cannot work together: a ``ValueError`` saying why."""
    mbs = values.get("max_batch_size", base_max_batch_size)
    pref = values.get("preferred_batch_size")
    if mbs is not None and pref is not None and int(pref) > int(mbs):
        raise ValueError(f"preferred_batch_size={pref} exceeds max_batch_size={mbs}")
    batch = values.get("batch")
    if mbs is not None and batch is not None and int(batch) > int(mbs):
        raise ValueError(f"batch={batch} exceeds max_batch_size={mbs}: Triton would reject every request")


def knob_table(kind: ServerKind) -> dict[str, Knob]:
    return {k.name: k for k in KNOBS[kind]}


def valid_knobs_text(kind: ServerKind) -> str:
    names = [k.name for k in KNOBS[kind]]
    if kind == "mlserver":
        names.append("env.NAME")
    if kind == "remote":
        names.append("any {placeholder} of --reconfigure")
    return ", ".join(names)


def placeholders(command: str) -> list[str]:
    """The ``{name}`` fields of a ``--reconfigure`` command, in order of first use (``{{`` and ``}}`` are
    literal braces, as in JSON: ``-p '{{"spec":{{"replicas":{replicas}}}}}'``)."""
    return list(dict.fromkeys(name for _, name in template_parts(command) if name is not None))


def template_parts(command: str) -> list[tuple[str, str | None]]:
    """``command`` as (literal text, placeholder name or None) pairs; a ValueError naming what is wrong."""
    try:
        parsed = list(string.Formatter().parse(command))
    except ValueError as e:
        raise ValueError(f"--reconfigure: {e}; {_BRACES}") from None
    out: list[tuple[str, str | None]] = []
    for literal, field_name, spec, conversion in parsed:
        if field_name is None:
            out.append((literal, None))
            continue
        if not field_name or not _KNOB_NAME.match(field_name) or spec or conversion:
            shown = field_name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            raise ValueError(f"--reconfigure: {{{shown}}} is not a knob name (letters, digits, _ and .); {_BRACES}")
        out.append((literal, field_name))
    return out


_BRACES = 'write a literal brace as {{ or }} (JSON: -p \'{{"spec":{{"replicas":{replicas}}}}}\')'


def knob_for(name: str, kind: ServerKind, reconfigure: str | None = None) -> Knob:
    """The knob called ``name`` on ``kind``; a ValueError listing the valid ones otherwise."""
    table = knob_table(kind)
    if name in table:
        return table[name]
    if kind == "mlserver" and name.startswith(ENV_PREFIX):
        var = name[len(ENV_PREFIX) :]
        if not _ENV_NAME.match(var):
            raise ValueError(f"{name}: {var!r} is not an environment variable name")
        return Knob(name, "text", f"the server's environment variable {var}")
    if kind == "remote" and reconfigure is not None and name in placeholders(reconfigure):
        return Knob(name, "text", "a {placeholder} of --reconfigure")
    raise ValueError(f"unknown knob {name!r} for the {kind} server; valid knobs: {valid_knobs_text(kind)}")


Value = int | float | str


@dataclass(frozen=True)
class Dimension:
    knob: Knob
    values: tuple[Value, ...]
    #: knobs that vary together with ``knob`` (``--set a+b=1+x,2+y``), and their values: one tuple per value
    together: tuple[Knob, ...] = ()
    together_values: tuple[tuple[Value, ...], ...] = ()

    def options(self) -> list[tuple[tuple[str, Value], ...]]:
        """The (knob, value) pairs of each of this dimension's values."""
        if not self.together:
            return [((self.knob.name, v),) for v in self.values]
        names = [self.knob.name, *(k.name for k in self.together)]
        return [
            tuple(zip(names, (v, *rest), strict=True))
            for v, rest in zip(self.values, self.together_values, strict=True)
        ]


def parse_set(items: Sequence[str], kind: ServerKind, reconfigure: str | None = None) -> list[Dimension]:
    """``["workers=0,1,2", "protocol=rest,grpc"]`` → dimensions, checked (duplicates, types, ranges).  Knobs
    joined by ``+`` vary together, value by value: ``server_cpus+server_cpu_limit=1+none,2+1`` is two points."""
    dims: list[Dimension] = []
    seen: set[str] = set()
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--set takes KNOB=V1,V2,…; got {item!r} (valid knobs: {valid_knobs_text(kind)})")
        names = [n.strip() for n in name.split("+")]
        knobs = [knob_for(n, kind, reconfigure) for n in names]
        for n in names:
            if n in seen:
                raise ValueError(f"knob {n!r} is set twice")
            seen.add(n)
        if len(knobs) == 1:
            values = tuple(knobs[0].parse(v) for v in split_values(raw, knobs[0]))
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: a value is listed twice ({raw})")
            dims.append(Dimension(knobs[0], values))
            continue
        rows = []
        for combo in raw.split(","):
            parts = combo.split("+")
            if len(parts) != len(knobs):
                raise ValueError(f"{name} takes {len(knobs)} values joined by + per point, got {combo!r}")
            rows.append(tuple(k.parse(v) for k, v in zip(knobs, parts, strict=True)))
        if len(set(rows)) != len(rows):
            raise ValueError(f"{name}: a point is listed twice ({raw})")
        dims.append(Dimension(knobs[0], tuple(r[0] for r in rows), tuple(knobs[1:]), tuple(r[1:] for r in rows)))
    if not dims:
        raise ValueError(f"a sweep needs at least one --set KNOB=V1,V2 (valid knobs: {valid_knobs_text(kind)})")
    if kind == "remote" and reconfigure is not None:
        missing = [p for p in placeholders(reconfigure) if p not in seen]
        if missing:
            raise ValueError(f"--reconfigure uses {{{'}, {'.join(missing)}}} but no --set gives it values")
    return dims


def split_values(raw: str, knob: Knob) -> list[str]:
    """A ``--set`` value list split at its commas; for ``arrival``, the commas inside ``onoff:ON,OFF,PEAK``
    stay with their value (``arrival=poisson,onoff:1,9,5,gamma:2`` is three values)."""
    parts = raw.split(",")
    if knob is not _ARRIVAL:
        return parts
    out: list[str] = []
    for part in parts:
        if out and out[-1].strip().startswith("onoff:") and out[-1].count(",") < 2:
            out[-1] += "," + part
        else:
            out.append(part)
    return out


@dataclass(frozen=True)
class Point:
    """One configuration of the grid: its index (1-based, grid order) and knob values."""

    index: int
    knobs: tuple[tuple[str, Value], ...]

    @property
    def id(self) -> str:
        return f"p{self.index:02d}"

    @property
    def values(self) -> dict[str, Value]:
        return dict(self.knobs)

    @property
    def label(self) -> str:
        return " ".join(f"{k}={_show(v)}" for k, v in self.knobs)

    @property
    def dirname(self) -> str:
        text = "_".join(f"{k}={_show(v)}" for k, v in self.knobs)
        safe = re.sub(r"[^A-Za-z0-9_.=+-]+", "-", text)[:80]
        return f"{self.id}-{safe}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "knobs": self.values}


def _show(value: Value) -> str:
    if isinstance(value, str) and "/" in value:
        return Path(value).name or value
    return f"{value:g}" if isinstance(value, float) else str(value)


def grid(dims: Sequence[Dimension]) -> list[Point]:
    """Every combination, the first dimension varying slowest."""
    combos = itertools.product(*(d.options() for d in dims))
    return [Point(i + 1, tuple(pair for option in combo for pair in option)) for i, combo in enumerate(combos)]
