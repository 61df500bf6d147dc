"""A newcomer's path: the README says how to run the CLI after set-up, a framework example run in the wrong venv
says how to get the right one, and scripts/test.sh says what it is doing and how to skip the framework venvs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integrations"))


def test_readme_says_how_to_run_the_cli_after_set_up():
    """The set-up section names `.venv/bin/grpo-monitor` and `source .venv/bin/activate`."""
    text = (REPO / "README.md").read_text()
    setup = text[text.index("## Set up on a fresh machine"):text.index("## Quickstart")]
    assert ".venv/bin/grpo-monitor" in setup and "source .venv/bin/activate" in setup
    assert "GRPO_MONITOR_SKIP_FRAMEWORKS=1" in setup


@pytest.mark.parametrize("name", ["openrlhf", "skyrl", "areal"])
def test_a_framework_example_in_the_wrong_venv_prints_the_command_that_builds_its_own(name):
    """Run with a Python that lacks the framework, the example exits 2 with the one command that builds its venv,
    not a bare ModuleNotFoundError."""
    if importlib.util.find_spec(name) is not None:
        pytest.skip(f"{name} is installed in this Python")
    proc = subprocess.run([sys.executable, str(REPO / "examples" / f"{name}_example.py")], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr
    assert f"bash scripts/framework_venv.sh {name} && .venvs/{name}/bin/python examples/{name}_example.py" \
        in proc.stderr


def test_skip_frameworks_skips_the_framework_tests_with_a_reason(monkeypatch):
    """GRPO_MONITOR_SKIP_FRAMEWORKS=1 skips a framework test with that reason, building nothing."""
    import framework_venv

    monkeypatch.setenv("GRPO_MONITOR_SKIP_FRAMEWORKS", "1")
    monkeypatch.delenv("GRPO_MONITOR_REQUIRE_FRAMEWORKS", raising=False)
    monkeypatch.setattr(framework_venv, "_create", lambda name: pytest.fail("a venv was built"))
    with pytest.raises(pytest.skip.Exception, match="GRPO_MONITOR_SKIP_FRAMEWORKS=1"):
        framework_venv.framework_python("areal")


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(0o755)


@pytest.mark.parametrize("skip", [False, True], ids=["build", "skip-frameworks"])
def test_test_sh_announces_each_long_phase(skip, tmp_path):
    """scripts/test.sh (run against stub tools) prints a line before the install, the Debian packages (their
    output shown when they fail), each framework venv (with time and size) and pytest."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", root / "scripts", ignore=shutil.ignore_patterns("*.py"))
    for name in ("setup_env.sh", "lint.sh"):
        _stub(root / "scripts" / name, "exit 0")
    _stub(root / "scripts" / "framework_venv.sh", 'mkdir -p .venvs/"$1"; echo "$PWD/.venvs/$1/bin/python"')
    _stub(root / ".venv" / "bin" / "python", 'echo "PYTEST $*"')
    bin_dir = tmp_path / "bin"  # the PATH holds only the tools test.sh uses: no chromium, a failing apt-get
    _stub(bin_dir / "apt-get", 'echo "E: Unable to locate package chromium (stub)"; exit 100')
    for tool in ("bash", "date", "du", "cut", "mktemp", "tail", "id", "mkdir", "dirname", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    if skip:
        env["GRPO_MONITOR_SKIP_FRAMEWORKS"] = "1"
    proc = subprocess.run(["bash", str(root / "scripts" / "test.sh"), "-q"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "test.sh: setting up .venv" in err and "test.sh: running pytest" in err
    assert "PYTEST -m pytest -q" in proc.stdout
    if os.getuid() == 0:  # test.sh installs chromium only as root
        assert "test.sh: installing Debian packages chromium" in err
        assert "E: Unable to locate package chromium (stub)" in err, "apt-get's output is shown when it fails"
    for name in ("openrlhf", "skyrl", "areal"):
        assert (f"framework venv {name} ready in" in err) != skip
    assert "GRPO_MONITOR_SKIP_FRAMEWORKS=1" in err
