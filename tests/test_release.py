"""Release hygiene: one version (pyproject) read by grpo_monitor.__version__, a changelog entry for it and for every
earlier release, the licence the package declares, a README that says how to install and stays short."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import grpo_monitor

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250


def _pyproject() -> str:
    return (REPO / "pyproject.toml").read_text()


def _version() -> str:
    return re.search(r'^version = "([^"]+)"', _pyproject(), re.M).group(1)


def test_the_version_is_the_package_metadata():
    """grpo_monitor.__version__ is the installed distribution's version, which is pyproject.toml's."""
    assert grpo_monitor.__version__ == metadata.version("grpo-monitor") == _version()


def test_a_bare_checkout_reads_the_version_from_pyproject():
    """Without installed metadata (a checkout on PYTHONPATH), __version__ is pyproject.toml's, not a stale copy."""
    code = ("from importlib import metadata\n"
            "def missing(name):\n"
            "    raise metadata.PackageNotFoundError(name)\n"
            "metadata.version = missing\n"
            "import grpo_monitor; print(grpo_monitor.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.stdout.strip() == _version(), out.stderr


def test_the_changelog_has_this_version_and_every_earlier_release():
    """CHANGELOG.md has a section for the current version, newest first, and one for each of 0.1 to 0.3."""
    headings = re.findall(r"^## (\d+\.\d+\.\d+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == _version()
    assert {"0.1.0", "0.2.0", "0.3.0"} <= set(headings)
    assert headings == sorted(headings, key=lambda v: tuple(map(int, v.split("."))), reverse=True)


def test_the_license_file_is_the_apache_2_0_text_the_package_declares():
    """LICENSE holds the full Apache License 2.0 and pyproject declares it (SPDX expression and license-files)."""
    text = (REPO / "LICENSE").read_text()
    for part in ("Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND "
                 "DISTRIBUTION", "9. Accepting Warranty or Additional Liability.", "END OF TERMS AND CONDITIONS"):
        assert part in text, part
    assert re.search(r'^license = "Apache-2.0"$', _pyproject(), re.M)
    assert re.search(r'^license-files = \["LICENSE"\]$', _pyproject(), re.M)


def test_the_readme_says_to_install_torch_first_then_the_package():
    """The README's install section says to install torch first (the build one wants), then has a pip install line
    for the package with extras, and one for a clone."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Install in your own project"):text.index("## Set up on a fresh machine")]
    assert "Install torch first" in section
    assert re.search(r'^pip install "grpo-monitor\[[a-z,]+\]"', section, re.M)
    assert re.search(r'^pip install -e "\.\[[a-z,]+\]"', section, re.M)
    optional = re.search(r"^\[project\.optional-dependencies\]\n(.*?)\n\[", _pyproject(), re.M | re.S).group(1)
    extras = set(re.findall(r"^(\w+) = \[", optional, re.M))
    named = set(re.search(r"# extras: ([a-z, ]+)", section).group(1).replace(" ", "").split(","))
    assert named <= extras, named - extras


@pytest.mark.parametrize("name", ["README.md"])
def test_the_readme_stays_short(name):
    """The README is a front page: at most 250 lines, the rest in docs/."""
    lines = (REPO / name).read_text().count("\n")
    assert lines <= README_MAX_LINES, f"{name} has {lines} lines; move detail to docs/ (limit {README_MAX_LINES})"
