"""Command-line corners (issue 16): --version, a --help that imports nothing heavy, lazy package exports,
the demo's outputs list, the worded error for a None reward, and the TRL example's note on unscorable rows."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from grpo_monitor.tools.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "numpy", "matplotlib", "pydantic", "wandb", "tensorboard")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", WANDB_SILENT="true")


def _pyproject_version() -> str:
    """The version pyproject.toml declares (read as text: tomllib is 3.11+)."""
    project = (ROOT / "pyproject.toml").read_text().split("[project]", 1)[1]
    return re.search(r'^version = "([^"]+)"', project, re.MULTILINE).group(1)


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)


def test_version_prints_the_pyproject_version(capsys):
    """`grpo-monitor --version` prints `grpo-monitor <version>` with pyproject.toml's version and exits 0."""
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"grpo-monitor {_pyproject_version()}\n"


def test_version_falls_back_to_the_package_attribute(monkeypatch, capsys):
    """Without installed metadata (a bare checkout on PYTHONPATH) the version comes from grpo_monitor.__version__."""
    import grpo_monitor

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    monkeypatch.setattr(grpo_monitor, "__version__", "9.9.9-test")
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out == "grpo-monitor 9.9.9-test\n"
    assert _pyproject_version() == metadata.distribution("grpo-monitor").version  # the installed copy is current


@pytest.mark.parametrize("argv", [
    ["--help"], ["--version"], ["report", "--help"], ["audit", "--help"], ["wandb-workspace", "--help"],
], ids=["help", "version", "report-help", "audit-help", "wandb-workspace-help"])
def test_help_imports_nothing_heavy(argv):
    """The top-level --help, --version and most subcommands' --help import no torch, numpy or matplotlib."""
    code = (
        "import sys\nfrom grpo_monitor.tools.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    proc = _fresh_python(code)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr, proc.stderr


def test_building_the_parser_and_importing_the_package_import_no_torch():
    """`import grpo_monitor` and build_parser() leave torch out of sys.modules; a public name then brings it in."""
    code = (
        "import sys, grpo_monitor\nfrom grpo_monitor.tools.cli import build_parser\nbuild_parser()\n"
        "print('torch' in sys.modules)\nfrom grpo_monitor import GRPOMonitor\nprint('torch' in sys.modules)"
    )
    proc = _fresh_python(code)
    assert proc.stdout.split() == ["False", "True"], proc.stderr


def test_every_public_name_is_importable_and_is_its_module_object():
    """Each name of grpo_monitor.__all__ resolves to the object its defining module holds; unknown names are worded."""
    import grpo_monitor
    from grpo_monitor import config, errors, monitor, report, violations
    from grpo_monitor.catalog import findings, metrics
    from grpo_monitor.estimators import ESTIMATORS
    from grpo_monitor.repro import replay as reproduce

    expected = {
        "GRPOMonitor": monitor.GRPOMonitor, "INVARIANTS": violations.INVARIANTS,
        "InvariantViolation": violations.InvariantViolation, "MonitorConfig": config.MonitorConfig,
        "StepReport": report.StepReport, "Tolerances": config.Tolerances, "Violation": violations.Violation,
        "load_repro": reproduce.load_repro, "replay": reproduce.replay, "METRICS": metrics.METRICS,
        "ESTIMATORS": ESTIMATORS, "FINDINGS": findings.FINDINGS,  # the run-health catalogue (issue 29)
        **{name: getattr(errors, name) for name in errors.__all__},  # every error a user catches (issue 32)
    }
    assert sorted(grpo_monitor.__all__) == sorted(expected)
    for name, obj in expected.items():
        assert getattr(grpo_monitor, name) is obj, name
    assert set(expected) <= set(dir(grpo_monitor))
    with pytest.raises(AttributeError, match="module 'grpo_monitor' has no attribute 'GRPOMonitr'"):
        grpo_monitor.GRPOMonitr  # noqa: B018


def test_star_import_still_gives_every_public_name():
    """`from grpo_monitor import *` binds every name of __all__ in a fresh interpreter."""
    proc = _fresh_python("from grpo_monitor import *\nimport grpo_monitor\n"
                         "print(all(n in globals() for n in grpo_monitor.__all__))")
    assert proc.stdout.strip() == "True", proc.stderr


def test_lazy_choices_still_reject_an_unknown_value(capsys):
    """--std and --inject-bug check their choices (from tools.theory and tools.demo) on use."""
    from grpo_monitor.tools.demo import BUGS
    from grpo_monitor.tools.theory import STD_CONVENTIONS

    with pytest.raises(SystemExit) as exit_:
        main(["theory", "--std", "median"])
    assert exit_.value.code == 2
    assert f"invalid choice: 'median' (choose from {', '.join(map(repr, STD_CONVENTIONS))})" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["demo", "--inject-bug", "typo"])
    assert f"(choose from {', '.join(map(repr, sorted(BUGS)))})" in capsys.readouterr().err


def test_demo_options_default_to_demo_config(capsys, monkeypatch):
    """Options left out keep DemoConfig's defaults, given ones override them, and --help shows DemoConfig's values."""
    from grpo_monitor.tools.cli.demo import _config
    from grpo_monitor.tools.demo import DemoConfig

    parser = build_parser()
    assert _config(parser.parse_args(["demo"])) == DemoConfig()
    assert _config(parser.parse_args(["demo", "--steps", "7", "-G", "4", "--dynamic-sampling"])) == DemoConfig(
        steps=7, group_size=4, dynamic_sampling=True)
    monkeypatch.setenv("COLUMNS", "400")  # one line per help text
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    help_text = capsys.readouterr().out
    shown = [("--steps STEPS", DemoConfig.steps), ("--questions QUESTIONS", DemoConfig.num_questions),
             ("--lr LR", DemoConfig.lr), ("--max-gen-batches MAX_GEN_BATCHES", DemoConfig.max_gen_batches)]
    for option, value in shown:
        assert re.search(rf"^  {option}\s+[^\n]*\(default {value}\)$", help_text, re.MULTILINE), option


def test_demo_outputs_list_the_plots_folder(tmp_path, capsys):
    """The demo's closing "Outputs:" list names the plots/ folder the report wrote its PNG figures to."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    assert main(["demo", "--out", str(out), "--steps", "3", "--no-progress", "--no-wandb", "--no-tensorboard"]) == 0
    listed = capsys.readouterr().out.split("Outputs:\n", 1)[1].splitlines()
    paths = dict(line.split(None, 1) for line in listed)
    assert paths["plots"] == str(out / "plots") and paths["report"] == str(out / "report.html")
    assert list(paths).index("plots") == list(paths).index("report") + 1
    assert list((out / "plots").glob("*.png"))


@pytest.mark.parametrize("rewards,where,shown", [
    ([1.0, None, 0.0, 1.0], "rewards[1]", "None (NoneType)"),
    ([[1.0, 0.0], [None, 1.0]], "rewards[1][0]", "None (NoneType)"),
    ([[1.0, 0.0], [1.0, "0.5"]], "rewards[1][1]", "'0.5' (str)"),
], ids=["flat-none", "nested-none", "nested-string"])
def test_bad_reward_element_is_named(rewards, where, shown):
    """A reward list with a non-number names the argument, the first bad element and its type, and points to NaN."""
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.step.inputs import InputTypeError

    with pytest.raises(InputTypeError) as info:
        GRPOMonitor(MonitorConfig(group_size=2)).observe_rollout(rewards)
    message = str(info.value)
    assert isinstance(info.value, TypeError)
    assert f"but {where} is {shown}" in message
    assert message.endswith("use float('nan') to mark an unscorable row")


def test_bad_advantage_element_is_named_without_the_reward_hint():
    """The same check on advantages names `advantages[i]`; the NaN advice is for rewards only."""
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.step.inputs import InputTypeError

    with pytest.raises(InputTypeError, match=r"but advantages\[2\] is None \(NoneType\)$"):
        GRPOMonitor(MonitorConfig(group_size=2)).observe_rollout([1.0, 0.0, 1.0, 0.0], advantages=[0.5, -0.5, None, 0])


def test_ragged_reward_list_keeps_torch_reason():
    """Rows of different lengths (no bad element to name) still say why: torch's own reason follows the value."""
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.step.inputs import InputTypeError

    with pytest.raises(InputTypeError, match=r"but got \[\[1\.0, 0\.0\], \[1\.0\]\]: expected sequence of length 2"):
        GRPOMonitor(MonitorConfig(group_size=2)).observe_rollout([[1.0, 0.0], [1.0]])


def test_trl_example_says_its_none_rewards_are_on_purpose():
    """The TRL example prints, before training, that its None rewards and TRL's warning about them are deliberate."""
    source = (ROOT / "examples" / "trl_example.py").read_text()
    tree = ast.parse(source)
    note = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", None) == "UNSCORABLE_NOTE")
    assert "returns None" in note and "All reward functions returned None" in note and "on purpose" in note
    main_src = ast.get_source_segment(source, next(n for n in tree.body if getattr(n, "name", "") == "train"))
    assert main_src.index("print(UNSCORABLE_NOTE") < main_src.index("trainer.train()")
