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


# ------------------------------------------------------------ a checkout in the folder `git clone` makes: grpo-monitor
def test_case_scripts_keep_only_the_monitors_own_warnings(capsys):
    """The framework case runner keeps the warnings the monitor raises (their text starts with "grpo-monitor"), not
    any warning whose text merely contains it, such as a ResourceWarning naming a file under .../grpo-monitor/."""
    import json
    import warnings

    sys.path.insert(0, str(REPO / "tests" / "integrations" / "framework_cases"))
    import _cases

    def case():
        warnings.warn("unclosed file <_io.TextIOWrapper name='/home/u/grpo-monitor/.venvs/x.py'>", ResourceWarning,
                      stacklevel=1)
        warnings.warn("grpo-monitor (openrlhf): the monitor's own word", RuntimeWarning, stacklevel=1)
        return {}

    _cases.run({"case": case}, [])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(_cases.MARKER))
    kept = json.loads(line[len(_cases.MARKER):])["case"]["warnings"]
    assert kept == ["grpo-monitor (openrlhf): the monitor's own word"]


def _opens_outside_with(tree) -> list[int]:
    """Lines of ``open(...)`` calls in ``tree`` that are not the expression of a ``with`` item."""
    import ast

    managed = {id(item.context_expr) for node in ast.walk(tree) if isinstance(node, (ast.With, ast.AsyncWith))
               for item in node.items}
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "open" and id(node) not in managed]


def _code_strings(tree) -> list:
    """The string constants in ``tree`` that parse as Python and call open() (child scripts run by a test)."""
    import ast
    import textwrap

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "open(" in node.value:
            try:
                out.append(ast.parse(textwrap.dedent(node.value)))
            except SyntaxError:
                continue
    return out


def test_every_open_is_closed_by_a_with_block():
    """No code of the project (its test helpers and child scripts included) opens a file outside a ``with``: an
    unclosed file is a ResourceWarning naming its path, which a warning filter may then take for the monitor's."""
    import ast

    found = {}
    for folder in ("grpo_monitor", "integrations", "tests", "examples", "benchmarks", "scripts"):
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            lines = _opens_outside_with(tree) + [f"string:{n}" for s in _code_strings(tree)
                                                 for n in _opens_outside_with(s)]
            if lines:
                found[str(path.relative_to(REPO))] = lines
    assert found == {}, f"open() outside a with block (use `with open(...)` or Path.read_text()): {found}"


def _copy_checkout(dest: Path) -> None:
    """The files git tracks (and new files it does not ignore) copied to ``dest``: what a fresh clone holds."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no clone to copy")
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


#: The OpenRLHF cases that read OpenRLHF's CLI source (and once kept its unclosed-file warning as the monitor's).
PATH_CASES = ["default_gae", "default_group_norm", "default_rloo", "default_dr_grpo", "default_reinforce_baseline"]


@pytest.mark.slow
def test_the_openrlhf_cases_pass_from_a_clone_named_grpo_monitor(tmp_path):
    """A checkout in tmp/grpo-monitor with its framework venv under its .venvs/ (the layout scripts/test.sh makes
    after `git clone`): the OpenRLHF cases that read OpenRLHF's own source see only the monitor's warnings."""
    import json

    from framework_venv import ENV, MARKER, framework_python

    python = Path(framework_python("openrlhf"))  # the ready venv (grpo-monitor installed editable from here)
    clone = tmp_path / "grpo-monitor"
    _copy_checkout(clone)
    (clone / ".venvs").mkdir()
    (clone / ".venvs" / "openrlhf").symlink_to(python.parent.parent, target_is_directory=True)
    venv_python = str(clone / ".venvs" / "openrlhf" / "bin" / "python")
    origin = subprocess.run([venv_python, "-c", "import importlib.util as u; print(u.find_spec('openrlhf').origin)"],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    assert origin.startswith(str(clone / ".venvs")), origin  # OpenRLHF's files are read under .../grpo-monitor/
    proc = subprocess.run([venv_python,
                           str(clone / "tests" / "integrations" / "framework_cases" / "openrlhf_cases.py"),
                           *PATH_CASES], capture_output=True, text=True, timeout=300, cwd=clone,
                          env={**os.environ, **ENV})
    found = [line[len(MARKER):] for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and found, proc.stdout[-2000:] + proc.stderr[-3000:]
    cases = json.loads(found[-1])
    assert sorted(cases) == sorted(PATH_CASES)
    for name, result in cases.items():
        expected = 1 if name == "default_gae" else 0  # gae: the one warning naming the learned critic
        assert len(result["warnings"]) == expected, (name, result["warnings"])
        assert all(w.startswith("grpo-monitor") for w in result["warnings"]), (name, result["warnings"])


# ------------------------------------------------------------ outputs: not in the repository, not in the working folder
def test_no_run_output_is_committed():
    """No monitor log or run record is tracked by git (the committed grpo-monitor/ folder is gone)."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    outputs = [name for name in listed.stdout.splitlines()
               if name.startswith("grpo-monitor/") or name.endswith(("monitor.jsonl", "monitor.config.json"))]
    assert outputs == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["openrlhf", "skyrl", "areal"])
def test_a_framework_example_writes_its_log_to_its_own_folder(name, tmp_path):
    """Run as documented from a folder, a framework example leaves that folder untouched (its log goes to a
    temporary folder it removes, and says so); with --out DIR the log is DIR/grpo-monitor/monitor.jsonl."""
    from framework_venv import ENV, framework_python
    from grpo_monitor.sinks import read_jsonl

    cwd, scratch, out = tmp_path / "cwd", tmp_path / "tmp", tmp_path / "out"
    cwd.mkdir()
    scratch.mkdir()
    env = {**os.environ, **ENV, "TMPDIR": str(scratch)}
    env.pop("GRPO_MONITOR_LOG_DIR")  # as a user runs it: no fallback folder set

    def example(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([framework_python(name), str(REPO / "examples" / f"{name}_example.py"), *args],
                              capture_output=True, text=True, timeout=180, cwd=cwd, env=env)

    plain, kept = example(), example("--out", str(out))
    assert plain.returncode == 0 and kept.returncode == 0, plain.stderr[-3000:] + kept.stderr[-3000:]
    assert list(cwd.iterdir()) == [] and list(scratch.glob("grpo-example-*")) == []
    assert "log removed with its temporary folder (pass --out DIR to keep it)" in plain.stdout
    log = out / "grpo-monitor" / "monitor.jsonl"
    assert f"log: {log}" in kept.stdout
    assert [r["step"] for r in read_jsonl(log)] == [0, 1, 2]
