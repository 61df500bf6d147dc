"""Every ``grpo_monitor`` name the README, docs/ and examples/ mention still imports.

Names are read from the text itself: dotted paths (``grpo_monitor.sinks.JSONLSink``) and
``from grpo_monitor... import a, b`` lines, in prose, code blocks and the examples' code.
Each resolves to a module or to an attribute of one, so a refactor that moves a documented
name without a re-export fails here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from grpo_monitor.estimators import ESTIMATORS

REPO = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"\bgrpo_monitor(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"^\s*from\s+(grpo_monitor(?:\.\w+)*)\s+import\s+([\w ,]+)", re.M)
IMPORT_AS = re.compile(r"^\s*import\s+(grpo_monitor(?:\.\w+)*)\s+as\s+(\w+)", re.M)


def _texts() -> dict[str, str]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("*.py"))]
    if (REPO / "CONTRIBUTING.md").exists():
        files.append(REPO / "CONTRIBUTING.md")
    return {str(p.relative_to(REPO)): p.read_text() for p in files}


def documented_names() -> dict[str, str]:
    """Dotted name -> the first file that mentions it.

    A name imported in a file (``from grpo_monitor.integrations import verl as grpo_verl``)
    also stands for what the file reads from it: ``grpo_verl.attach`` is
    ``grpo_monitor.integrations.verl.attach``.
    """
    out: dict[str, str] = {}
    for where, text in _texts().items():
        for m in DOTTED.finditer(text):
            out.setdefault(m.group(0).rstrip("."), where)
        bound = dict((alias, module) for module, alias in IMPORT_AS.findall(text))
        for module, names in FROM_IMPORT.findall(text):
            for item in names.split(","):
                name, _, alias = (x.strip() for x in item.partition(" as "))
                if name.isidentifier():
                    out.setdefault(f"{module}.{name}", where)
                    bound[alias or name] = f"{module}.{name}"
        for alias, target in bound.items():
            for attr in re.findall(rf"(?<![\w.'\"]){alias}((?:\.[A-Za-z_]\w*)+)", text):
                if alias + attr not in ESTIMATORS:  # `areal.grpo` in prose is an estimator, not a name of areal
                    out.setdefault(target + attr.rstrip("."), where)
    return out


def resolve(dotted: str) -> object:
    """The module or attribute ``dotted`` names (longest importable module prefix, then attributes)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name and not ".".join(parts[:cut]).startswith(exc.name):
                raise  # a dependency is missing, not the name
            continue
        for attr in parts[cut:]:
            fields = getattr(obj, "model_fields", {})  # a config field (pydantic keeps none on the class)
            obj = fields[attr] if attr in fields else getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


NAMES = documented_names()


def test_the_documentation_names_many_things():
    """The scan finds the names (a broken regex would make the next test pass vacuously)."""
    assert {"grpo_monitor.sinks.JSONLSink", "grpo_monitor.GRPOMonitor", "grpo_monitor.testing"} <= set(NAMES)


@pytest.mark.parametrize("dotted", sorted(NAMES))
def test_documented_name_imports(dotted):
    """The name resolves (file it is documented in: see the assertion message)."""
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{dotted} (documented in {NAMES[dotted]}) does not resolve: {exc}")
