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

REPO = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"\bgrpo_monitor(?:\.[A-Za-z_]\w*)+")
FROM_IMPORT = re.compile(r"^\s*from\s+(grpo_monitor(?:\.\w+)*)\s+import\s+([\w ,]+)", re.M)


def _texts() -> dict[str, str]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "examples").glob("*.py"))]
    if (REPO / "CONTRIBUTING.md").exists():
        files.append(REPO / "CONTRIBUTING.md")
    return {str(p.relative_to(REPO)): p.read_text() for p in files}


def documented_names() -> dict[str, str]:
    """Dotted name -> the first file that mentions it."""
    out: dict[str, str] = {}
    for where, text in _texts().items():
        for m in DOTTED.finditer(text):
            out.setdefault(m.group(0).rstrip("."), where)
        for module, names in FROM_IMPORT.findall(text):
            for item in names.split(","):
                name = item.split(" as ")[0].strip()
                if name.isidentifier():
                    out.setdefault(f"{module}.{name}", where)
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
            obj = getattr(obj, attr)
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
