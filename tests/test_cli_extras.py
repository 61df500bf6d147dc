"""What the command line says about optional packages and earlier output: ``demo --wandb`` without wandb and
``report`` without matplotlib are worded errors with exit code 3 naming the extra; a demo without matplotlib says
up front that it writes no report; a demo or report over earlier output says what it replaces."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpo_monitor.tools.cli import MISSING_EXTRA, main

FAST = ["--steps", "3", "--no-progress", "--no-wandb", "--no-tensorboard"]


def cli_without(package: str, *argv: str, cwd=None) -> subprocess.CompletedProcess:
    """``grpo-monitor ARGV`` in a fresh interpreter where importing ``package`` fails as if it were not installed."""
    code = (f"import sys; sys.modules[{package!r}] = None\n"
            "from grpo_monitor.tools.cli import main\n"
            f"sys.exit(main({list(argv)!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_demo_wandb_without_wandb_is_a_worded_error_with_its_own_exit_code(tmp_path):
    """`demo --wandb` without wandb: exit 3 (not 1, a caught breach), one line naming the extra, nothing trained."""
    proc = cli_without("wandb", "demo", "--wandb", "--out", str(tmp_path / "run"), "--steps", "3", "--no-progress")
    assert proc.returncode == MISSING_EXTRA == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("grpo-monitor demo: error: --wandb (a W&B offline run of the demo) needs the wandb "
                                   "package, which is not installed; install it with "
                                   "`pip install 'grpo-monitor[wandb]'`")
    assert not (tmp_path / "run" / "monitor.jsonl").exists()


def test_run_demo_wandb_without_wandb_names_the_extra(tmp_path):
    """The Python entry point, run_demo(wandb=True) without wandb: a ModuleNotFoundError naming the extra."""
    code = ("import sys; sys.modules['wandb'] = None\n"
            "from grpo_monitor.tools.demo import DemoConfig, run_demo\n"
            "try:\n"
            f"    run_demo(DemoConfig(steps=2), {str(tmp_path)!r}, wandb=True, progress=False, report=False)\n"
            "except ModuleNotFoundError as exc:\n"
            "    print('RAISED', exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "RAISED run_demo(wandb=True) needs the wandb package" in proc.stdout, proc.stderr[-2000:]
    assert "pip install 'grpo-monitor[wandb]'" in proc.stdout


def test_a_demo_without_matplotlib_says_up_front_there_will_be_no_report(tmp_path):
    """Without matplotlib the demo says before training that it writes no report (and how to get one), then runs."""
    out = tmp_path / "run"
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from grpo_monitor.tools.cli import main\n"
            f"sys.exit(main(['demo', '--out', {str(out)!r}, *{FAST!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    note = "grpo-monitor demo: matplotlib is not installed, so this run writes no HTML report"
    assert note in proc.stdout and "pip install 'grpo-monitor[plots]'" in proc.stdout
    assert proc.stdout.index(note) < proc.stdout.index("grpo-monitor demo: 3 steps"), "said after the run, not before"
    assert (out / "monitor.jsonl").is_file() and not (out / "report.html").exists()


def test_report_without_matplotlib_is_a_worded_error_with_exit_code_3(tmp_path):
    """`report` without matplotlib: exit 3 and the extra named, no traceback."""
    (tmp_path / "monitor.jsonl").write_text("")
    proc = cli_without("matplotlib", "report", str(tmp_path))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert "needs the matplotlib package" in proc.stderr and "pip install 'grpo-monitor[plots]'" in proc.stderr


def test_a_second_demo_and_report_say_what_they_replace(tmp_path, capsys):
    """A demo into a folder holding an earlier demo names the outputs it replaces (the first run says nothing);
    a report over an earlier report.html, a comparison over an earlier compare.html, say they replaced it."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    assert main(["demo", "--out", str(out), *FAST, "--no-report"]) == 0
    first = capsys.readouterr().err
    assert "replaced" not in first and "earlier" not in first
    assert main(["demo", "--out", str(out), *FAST, "--no-report"]) == 0
    second = capsys.readouterr().err
    assert (f"grpo-monitor demo: {out} holds an earlier run's monitor.jsonl, theory.jsonl, run.json: replaced by "
            "this run (pass --out DIR to keep them)") in second
    assert main(["report", str(out)]) == 0
    assert "replaced" not in capsys.readouterr().out
    assert main(["report", str(out)]) == 0
    assert f"report: {out / 'report.html'} (replaced the earlier report.html and plots/)" in capsys.readouterr().out
    for said in ("", " (replaced the earlier compare.html)"):
        assert main(["compare", str(out), str(out), "--labels", "a,b", "--out", str(tmp_path / "cmp")]) == 0
        assert f"compare: {tmp_path / 'cmp' / 'compare.html'}{said}\n" in capsys.readouterr().out
