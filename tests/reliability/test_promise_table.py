"""Every test that docs/reliability.md names as showing a promise exists: the file, and each ``::test`` in it.

References are read from the text: a path or file name in backticks (`tests/reliability/test_x.py` or
`test_x.py`, resolved in tests/), then `::name` (after a file in the same backticks, or on its own for the last
file named on that line); a renamed or deleted test fails here instead of leaving a promise unshown.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
REF = re.compile(r"`((?:tests|benchmarks)/[\w/.]+|test_\w+\.py)?(?:::(\w+))?`")


def _by_name() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for path in (REPO / "tests").rglob("test_*.py"):
        out.setdefault(path.name, []).append(path)
    return out


def references() -> list[tuple[int, str, str | None]]:
    """(line number, file, test name or None) for every reference in the doc."""
    refs, names = [], _by_name()
    for number, line in enumerate(DOC.read_text().splitlines(), 1):
        current: str | None = None
        for match in REF.finditer(line):
            file, test = match.groups()
            if file is not None:
                found = names.get(file, [])
                current = file if "/" in file or len(found) != 1 else str(found[0].relative_to(REPO))
            if file is None and test is None:
                continue
            if current is None:
                raise AssertionError(f"docs/reliability.md, line {number}: `::{test}` follows no test file")
            refs.append((number, current, test))
    return refs


def _functions(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}


def test_the_doc_names_many_tests():
    """The parser finds the tables' references (guards against a regex that silently matches nothing)."""
    assert sum(test is not None for _, _, test in references()) >= 40


@pytest.mark.parametrize("line, file, test", references(), ids=lambda v: str(v))
def test_a_named_test_exists(line, file, test):
    """The file or folder exists (a bare file name is unique in tests/) and, when named, the test is in it."""
    path = REPO / file
    assert path.is_file() or (path.is_dir() and test is None), \
        f"docs/reliability.md, line {line}: no file {file} (or its name is not unique in tests/)"
    if test is not None:
        assert test in _functions(path), f"docs/reliability.md, line {line}: {file} has no test {test}"
