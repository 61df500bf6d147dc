"""The floor plan holds: a short top level, a docstring on every module, no import cycle, no reads of another
package's private names.

The import graph is read from the source with ``ast`` (every ``import`` counts, those under
``TYPE_CHECKING`` and inside functions included), so a cycle hidden from the interpreter
still fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_TOP_LEVEL = 12


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in [*(REPO / "grpo_monitor").rglob("*.py"), *(REPO / "integrations").rglob("*.py")]:
        rel = path.relative_to(REPO).with_suffix("").parts
        parts = ["grpo_monitor", "integrations", *rel[1:]] if rel[0] == "integrations" else list(rel)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _imports(name: str, path: Path, is_pkg: bool, mods: dict) -> set[str]:
    pkg = name if is_pkg else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in mods:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != name:
                found.add(target)
    # importing a.b.c runs a/__init__ and a/b/__init__ first (unless we are inside them)
    return found | {anc for t in found for anc in _ancestors(t) if anc in mods and not name.startswith(anc + ".")}


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative enough for this size)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = [stack.pop()]
            while comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_even_counting_type_checking_imports():
    """No module of grpo_monitor (integrations included) reaches itself through its imports."""
    mods = _modules()
    graph = {name: _imports(name, path, is_pkg, mods) for name, (path, is_pkg) in mods.items()}
    assert _cycles(graph) == []


def test_the_top_level_is_the_public_api_and_a_few_leaves():
    """At most 12 modules sit at the top of grpo_monitor/; the step pipeline lives in step/."""
    top = sorted(p.name for p in (REPO / "grpo_monitor").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top
    for package in ("step", "run", "repro", "tools/audit"):
        assert (REPO / "grpo_monitor" / package / "__init__.py").is_file(), package


def test_every_module_opens_with_its_docstring():
    """Each module says why it exists before anything else."""
    missing = [str(p.relative_to(REPO)) for p, _ in _modules().values()
               if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert missing == []


def _package(name: str) -> str:
    """The package a module belongs to: grpo_monitor's first-level subpackage, a top-level module its own,
    integrations one package (``grpo_monitor`` itself: its ``__init__``)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_privates(trees: dict[str, ast.Module]) -> dict[str, dict[str, set[str]]]:
    """Each private name grpo_monitor defines (function, class, assignment or attribute target), with the
    packages and the modules defining it."""
    out: dict[str, dict[str, set[str]]] = {}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined = node.id
            else:
                continue
            if _private(defined):
                where = out.setdefault(defined, {"packages": set(), "modules": set()})
                where["packages"].add(_package(name))
                where["modules"].add(name)
    return out


def _private_reads(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """Reads of another package's ``_private`` names in ``sources`` (module -> (source, is_pkg)).

    An ``import``/``from ... import`` of a ``_name`` (or through a ``_module``) of grpo_monitor from another
    package; an attribute ``x._name`` (not dunder) on anything but ``self``/``cls`` whose name grpo_monitor defines
    in another package. Read by name (``ast`` has no types): a name defined only by the reader's own package, or in
    the reader's own module, is its own; a name grpo_monitor never defines is a third-party object's (``sys``,
    ``torch``, a trainer), outside this rule.
    """
    trees = {name: ast.parse(src) for name, (src, _) in sources.items()}
    defined = _defined_privates(trees)
    out = []
    for name, tree in trees.items():
        pkg = name if sources[name][1] else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                where = defined.get(node.attr)
                if where is None or name in where["modules"] or where["packages"] == {_package(name)}:
                    continue
                out.append(f"{name}:{node.lineno} reads {ast.unparse(node)}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _import_targets(node, pkg):
                    parts = target.split(".")
                    if parts[0] == "grpo_monitor" and any(map(_private, parts)) and _package(target) != _package(name):
                        out.append(f"{name}:{node.lineno} imports {target}")
    return out


def _import_targets(node: ast.Import | ast.ImportFrom, pkg: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parts = pkg.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" for a in node.names]


def test_no_package_reads_another_packages_private_names():
    """Nothing outside a package reads its ``_private`` names (attributes or imports); the monitor's seams for its
    own tools are public (``GRPOMonitor.gate``, ``monitor.add_recorded``, ``monitor.load_estimator_lock``)."""
    sources = {name: (path.read_text(), is_pkg) for name, (path, is_pkg) in _modules().items()}
    assert _private_reads(sources) == []


@pytest.mark.parametrize("source, found", [
    pytest.param("def f(mon):\n    return mon._acc\n", ["grpo_monitor.step.x:2 reads mon._acc"], id="attribute"),
    pytest.param("def f(self):\n    return self.monitor._acc\n", ["grpo_monitor.step.x:2 reads self.monitor._acc"],
                 id="through-self"),
    pytest.param("from ..monitor import _helper\n", ["grpo_monitor.step.x:1 imports grpo_monitor.monitor._helper"],
                 id="import"),
    pytest.param("from grpo_monitor.integrations._common import FailOpen\n",
                 ["grpo_monitor.step.x:1 imports grpo_monitor.integrations._common.FailOpen"], id="private-module"),
    pytest.param("def f(self):\n    return self._acc\n", [], id="own-self"),
    pytest.param("import sys\nf = sys._getframe\n", [], id="third-party"),
    pytest.param("from .y import _own\n", [], id="same-package"),
])
def test_the_private_reader_finds_a_read(source, found):
    """The check can fail: a monitor private read from step/ is found, its own and third-party names are not."""
    monitor = "class GRPOMonitor:\n    def __init__(self):\n        self._acc = 1\n\ndef _helper():\n    pass\n"
    sources = {"grpo_monitor.monitor": (monitor, False), "grpo_monitor.step.x": (source, False),
               "grpo_monitor.step.y": ("_own = 1\n", False)}
    assert _private_reads(sources) == found


def _package_edges() -> set[tuple[str, str]]:
    mods = _modules()
    return {(_package(a), _package(b)) for a, (path, is_pkg) in mods.items() for b in _imports(a, path, is_pkg, mods)
            if _package(a) != _package(b)}


@pytest.mark.parametrize("low, high", [
    pytest.param("step", "repro", id="repro-above-step"),
    pytest.param("monitor", "repro", id="replay-above-monitor"),
    pytest.param("health", "run", id="run-above-health"),
])
def test_these_packages_import_one_way(low, high):
    """The upper package imports the lower, never the reverse (imports inside functions counted): repro saves the
    step's records and replays through the monitor (which reaches the saving through run.breach), run saves the
    health tracker's state (health reads the history through its own protocol)."""
    assert (low, high) not in _package_edges()


def test_the_cycle_finder_finds_a_cycle():
    """The check can fail: two modules importing each other form one component."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def test_every_package_is_installed():
    """pyproject.toml lists every package folder, so a wheel (not only an editable install) holds it."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, (_, is_pkg) in _modules().items() if is_pkg}
    assert "grpo_monitor.integrations" in found
    assert found - listed == set()


def test_the_entry_point_integrations_share_one_attach_signature():
    """verl, OpenRLHF, SkyRL and AReaL attach alike: attach(monitor | None, *, config=, sinks=, step_per_call=),
    on the one Attachment of integrations/_entrypoint.py."""
    import importlib
    import inspect

    from grpo_monitor.integrations._entrypoint import Attachment

    for name in ("verl", "openrlhf", "skyrl", "areal"):
        module = importlib.import_module(f"grpo_monitor.integrations.{name}")
        params = inspect.signature(module.attach).parameters
        head = [(p.name, p.kind, p.default) for p in list(params.values())[:4]]
        assert head == [("monitor", inspect.Parameter.POSITIONAL_OR_KEYWORD, None),
                        ("config", inspect.Parameter.KEYWORD_ONLY, None),
                        ("sinks", inspect.Parameter.KEYWORD_ONLY, "auto"),
                        ("step_per_call", inspect.Parameter.KEYWORD_ONLY, True)], name
        assert inspect.signature(module.attach).return_annotation in (Attachment, "Attachment"), name
        assert all(callable(getattr(module, f)) for f in ("detach", "attached", "attach_from_env")), name


def test_modules_and_functions_stay_short():
    """The house limits (STYLE.md): a module at most 400 lines, a function at most 60 (the hard limit)."""
    long_modules, long_functions = [], []
    for name, (path, _) in _modules().items():
        text = path.read_text()
        if len(text.splitlines()) > 400:
            long_modules.append(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long_functions.append(f"{name}.{node.name}")
    assert (long_modules, long_functions) == ([], [])


#: The offline tools (grpo_monitor.tools) and the command line's ``python -m grpo_monitor`` entry.
TOOLS = ("grpo_monitor.tools", "grpo_monitor.__main__")


def _unit(module: str) -> str:
    """The package a module belongs to: grpo_monitor's first-level subpackage or top-level module (each top-level
    module is its own unit), ``grpo_monitor.integrations`` as one, ``grpo_monitor.tools.<package>`` for a tool."""
    parts = module.split(".")
    if parts[:2] == ["grpo_monitor", "tools"] and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _unit_graph() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Edges between units, each with the module imports behind it (the package's own ``__init__`` excluded: the
    root re-exports, it is no layer)."""
    mods = _modules()
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for name, (path, is_pkg) in mods.items():
        if name == "grpo_monitor":
            continue
        for target in _imports(name, path, is_pkg, mods):
            a, b = _unit(name), _unit(target)
            if target != "grpo_monitor" and a != b and not a.startswith(b + "."):
                edges.setdefault((a, b), []).append((name, target))
    return edges


def test_no_two_packages_import_each_other():
    """Layers go one way: no two packages (or top-level modules) import each other, imports inside functions and
    under TYPE_CHECKING included (ast reads them all)."""
    edges = _unit_graph()
    both = sorted({tuple(sorted((a, b))) for (a, b) in edges if (b, a) in edges})
    assert both == [], [(a, b, edges[(a, b)][:2], edges[(b, a)][:2]) for a, b in both]


def test_the_core_never_imports_the_tools():
    """Nothing outside grpo_monitor.tools (the command line and what it runs) imports it: the monitor a trainer
    loads stays the core, and the tools are free to import all of it."""
    found = [(a, b) for edges in _unit_graph().values() for a, b in edges
             if b.startswith(TOOLS[0]) and not a.startswith(TOOLS)]
    assert found == []


def test_the_layer_checks_can_fail():
    """The unit of a module is what the rules compare: two top-level modules are two units, a tool is its package."""
    assert _unit("grpo_monitor.config") == "grpo_monitor.config"
    assert _unit("grpo_monitor.tools.scan.run") == "grpo_monitor.tools.scan"
    assert _unit("grpo_monitor.integrations.trl") == "grpo_monitor.integrations"
