"""The shape the package keeps: a command line without orchestration, modules of readable size."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "satpoint"


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


#: what ``cli/`` may import from the library: the façade (``api``), the configuration it builds, the renderers,
#: its own option modules, and the types options are parsed into
FACADE = ("satpoint.api", "satpoint.cli", "satpoint.config", "satpoint.errors", "satpoint.redact",
          "satpoint._version", "satpoint.plan", "satpoint.reports", "satpoint.endpoints.spec",
          "satpoint.payloads.mix", "satpoint.traffic.trace_plan")  # fmt: skip
#: the commands' entry points outside the façade: (cli module, library module) -> why.  It may only shrink:
#: an entry that is no longer used fails the test, a new reach into the library fails it too
ENTRY_POINTS = {
    ("coldstart_cmd.py", "satpoint.experiments.coldstart"): "run_coldstart and its options",
    ("common.py", "satpoint.analysis.summary.model"): "RunSummary, rendered",
    ("common.py", "satpoint.analysis.search.thresholds"): "format_result, rendered",
    ("common.py", "satpoint.servers.models.demo"): "the demo models' names for --demo-model's help",
    ("compare_cmd.py", "satpoint.experiments.compare"): "run_compare and its configuration",
    ("demo_cmd.py", "satpoint.experiments.co_demo"): "run_co_demo and its configuration",
    ("find_cmd.py", "satpoint.analysis.traffic.headroom"): "search_params: find --trace's options",
    ("find_cmd.py", "satpoint.servers.embedded"): "embedded_settings: the embedded server's options",
    ("find_cmd.py", "satpoint.procedures.trace_headroom"): "find_headroom: find --trace",
    ("main.py", "satpoint.procedures.trace_replay"): "run_trace: run --trace",
    ("overcommit_opts.py", "satpoint.endpoints.overcommit"): (
        "record_loaded/LoadedSet: --resident's restore of a --url server's models, kept and put back from cli/ "
        "(orchestration: belongs behind api.run/api.find)"
    ),
    ("results_cmd.py", "satpoint.experiments.rewrite"): "report DIR on a sweep, compare, coldstart or demo folder",
    ("pipeline_cmd.py", "satpoint.pipeline.find"): "find_pipeline: each step alone, then the pipeline",
    ("pipeline_cmd.py", "satpoint.pipeline.specs"): "dag_from_options: the spec file or the --step chain",
    ("sim_cmd.py", "satpoint.servers.sim.server"): "the simulated server is the command",
    ("sim_cmd.py", "satpoint.servers.sim.grpc_server"): "the simulated server over gRPC",
    ("sim_cmd.py", "satpoint.servers.sim.model"): "model_names: sim --models",
    ("sim_cmd.py", "satpoint.servers.sim.rates"): "sim --metastable's options",
    ("sim_cmd.py", "satpoint.servers.sim.tls"): "sim's TLS options",
    ("sweep_cmd.py", "satpoint.analysis.sweep.artefact_choice"): "--max-quality-loss's default and help",
    ("sweep_cmd.py", "satpoint.experiments.sweep"): "run_sweep, its configuration and state",
    ("sweep_cmd.py", "satpoint.experiments.sweep_config"): "env_items: --server-env",
    ("sweep_cmd.py", "satpoint.experiments.sweep_servers"): "BaseServer: the swept server's options",
}
#: modules whose presence in ``cli/`` means orchestration (waiting, threads, processes, sockets); ``common.py``
#: turns Ctrl-C into a stop event (``signal``, ``threading``), which is the command line's own business
ORCHESTRATION = {"time", "asyncio", "subprocess", "multiprocessing", "concurrent", "socket", "threading", "signal"}
CTRL_C = {("common.py", "signal"), ("common.py", "threading")}


def _is_action(call: ast.Call) -> bool:
    """A call that does a command's work: ``api.run*``/``api.find*``, or a ``run*``/``find*`` function
    imported from an entry point (``run_sweep``, ``find_headroom``, ``run_trace``...)."""
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "api":
        return f.attr.startswith(("run", "find"))
    return isinstance(f, ast.Name) and f.id.startswith(("run_", "find_"))


def _exclusive(tree: ast.AST, a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` lie in different branches of one ``if`` (never both run)."""
    parents: dict[ast.AST, ast.AST] = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}

    def chain(x: ast.AST) -> list[ast.AST]:
        out = [x]
        while out[-1] in parents:
            out.append(parents[out[-1]])
        return out

    def returns_first(first: list[ast.AST], second: list[ast.AST]) -> bool:
        """``first`` runs in an ``if`` that ends with ``return``/``raise``, before ``second`` (an early exit)."""
        stmt, branch = first[-1], first[-2] if len(first) > 1 else None
        return (
            isinstance(stmt, ast.If)
            and branch in stmt.body
            and isinstance(stmt.body[-1], ast.Return | ast.Raise)
            and stmt.lineno < second[-1].lineno
        )

    ca, cb = chain(a), chain(b)
    for i, node in enumerate(ca):
        if node in cb:
            j = cb.index(node)
            below_a, below_b = ca[i - 1], cb[j - 1]
            if isinstance(node, ast.If) and (below_a in node.body) != (below_b in node.body):
                return True
            return returns_first(ca[:i][-2:], cb[:j][-2:]) or returns_first(cb[:j][-2:], ca[:i][-2:])
    return False


def _violations(name: str, text: str, used: set[tuple[str, str]]) -> list[str]:
    """What in the ``cli/`` module ``name`` (source ``text``) is orchestration; its entry points into ``used``."""
    out: list[str] = []
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.While):
            out.append(f"cli/{name}:{node.lineno}: a loop that waits is orchestration")
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [f"satpoint.{a.name}" for a in node.names] if node.module == "satpoint" else [node.module]
        for module in modules:
            top = module.split(".")[0]
            if top in ORCHESTRATION and (name, top) not in CTRL_C:
                out.append(f"cli/{name}:{node.lineno}: imports {module}")
            if not module.startswith("satpoint.") or any(module == f or module.startswith(f + ".") for f in FACADE):
                continue
            if (name, module) in ENTRY_POINTS:
                used.add((name, module))
            else:
                out.append(f"cli/{name}:{node.lineno}: imports {module}: reach the library through satpoint.api")
    for fn in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        actions = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and _is_action(c)]
        for i, a in enumerate(actions):
            out += [
                f"cli/{name}:{a.lineno} and :{b.lineno}: {fn.name} does the work of two library calls"
                for b in actions[i + 1 :]
                if not _exclusive(fn, a, b)
            ]
    return out


def test_the_command_line_only_parses_options_calls_the_library_and_renders() -> None:
    """No orchestration in ``cli/``: it imports the library through the façade (plus the named entry points,
    a list that can only shrink), never waits, sleeps, starts threads, processes or sockets, and a command
    makes one call that does its work per mode (two such calls are in different branches of one ``if``, or
    the first in an ``if`` that returns)."""
    used: set[tuple[str, str]] = set()
    found = [v for p in sorted((SRC / "cli").rglob("*.py")) for v in _violations(p.name, p.read_text(), used)]
    assert found == []
    assert used == set(ENTRY_POINTS), f"entry points no longer used (drop them): {sorted(set(ENTRY_POINTS) - used)}"


def test_the_rule_sees_orchestration() -> None:
    modes = (
        "from satpoint import api\n"
        "def run(trace, users):\n"
        "    if trace:\n"
        "        api.run_trace()\n"
        "        return 0\n"
        "    if users:\n"
        "        r = api.run_closed_loop()\n"
        "    else:\n"
        "        r = api.run()\n"
        "    return r\n"
    )
    assert _violations("x.py", modes, set()) == []  # one call per mode
    two = "from satpoint import api\ndef find(a):\n    r = api.find()\n    if a:\n        api.run()\n"
    assert _violations("x.py", two, set()) == ["cli/x.py:3 and :5: find does the work of two library calls"]
    waits = "import time\nfrom satpoint.engine.runner import go\nwhile True:\n    time.sleep(1)\n"
    assert _violations("x.py", waits, set()) == [
        "cli/x.py:1: imports time",
        "cli/x.py:2: imports satpoint.engine.runner: reach the library through satpoint.api",
        "cli/x.py:3: a loop that waits is orchestration",
    ]


def test_command_modules_stay_readable() -> None:
    for p in (SRC / "cli").rglob("*.py"):
        assert _lines(p) < 300, f"cli/{p.name} has {_lines(p)} lines: move orchestration into the library"


def test_long_modules_say_why_at_their_top() -> None:
    for path in SRC.rglob("*.py"):
        if _lines(path) > 500:
            head = path.read_text().split('"""')[1]
            assert "Why this module is long" in head, f"{path.relative_to(SRC)}: over 500 lines without a reason"


#: the most modules (``__init__.py`` counted) one folder of the package may hold
MAX_MODULES = 15


def test_no_folder_holds_more_than_fifteen_modules() -> None:
    folders = [SRC, *(p for p in SRC.rglob("*") if p.is_dir() and p.name != "__pycache__")]
    counts = {str(d.relative_to(SRC)): len([m for m in d.glob("*.py") if "_pb2" not in m.name]) for d in folders}
    assert {d: n for d, n in counts.items() if n > MAX_MODULES} == {}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circle() -> None:
    """No modules import each other in a loop, type-only and function-level imports included (import-linter's
    contracts leave type-only imports out)."""
    import grimp

    graph = grimp.build_graph("satpoint", exclude_type_checking_imports=False, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _circles(edges) == []


def test_the_circle_rule_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_architecture_md_has_one_line_per_package() -> None:
    """ARCHITECTURE.md's table names every package (the root is ``satpoint``), and no package that is gone."""
    text = (SRC.parents[1] / "ARCHITECTURE.md").read_text()
    table = text.split("## Packages, one line each")[1].split("\n## ")[0]
    listed = {row.split("`")[1] for row in table.splitlines() if row.startswith("| `")}
    packages = {".".join(("satpoint", *p.parent.relative_to(SRC).parts)) for p in SRC.rglob("__init__.py")}
    assert {p.removeprefix("satpoint.") for p in packages if p != "satpoint"} | {"satpoint"} == listed
