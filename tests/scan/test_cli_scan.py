"""`grpo-monitor scan` and `grpo-monitor compare` on the command line: summary, exit codes, errors, the progress bar."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_scan_generic import G, make_rows, write_parquet

from grpo_monitor.sinks import read_jsonl
from grpo_monitor.tools.cli import main
from grpo_monitor.tools.scan.progress import DelayedProgress

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "numpy", "matplotlib", "pydantic", "wandb", "tensorboard", "pyarrow")


@pytest.fixture
def broken_parquet(tmp_path) -> Path:
    """A Parquet dump whose advantages break zero_group_mean from step 13 on."""
    pytest.importorskip("pyarrow")
    return write_parquet(make_rows(), tmp_path / "broken.parquet")


@pytest.mark.parametrize("argv", [["scan", "--help"], ["compare", "--help"]], ids=["scan-help", "compare-help"])
def test_help_imports_nothing_heavy(argv):
    """`scan --help` and `compare --help` answer without importing torch, numpy, matplotlib or pyarrow."""
    code = (f"import sys\nfrom grpo_monitor.tools.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit as e:\n"
            f"    assert e.code == 0\n"
            f"print('HEAVY', sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stderr and f"usage: grpo-monitor {argv[0]}" in proc.stdout


def test_summary_names_the_breach_and_its_first_step(broken_parquet, tmp_path, capsys):
    """The summary shows the trend table, the stuck questions and the violation with the step it started."""
    code = main(["scan", str(broken_parquet), "-G", str(G), "--out", str(tmp_path / "o"), "--no-report"])
    out = capsys.readouterr().out
    assert code == 0, "violations alone do not fail a scan"
    assert "degenerate rate" in out and "first tenth" in out and "iid prediction" in out
    assert "zero_group_mean (error): from step 13" in out and "stuck" in out
    first = read_jsonl(tmp_path / "o" / "monitor.jsonl")[0]
    assert first["step"] == 0 and "grpo/groups/degenerate_rate" in first["metrics"]


def test_fail_on_error_and_quiet(broken_parquet, tmp_path, capsys):
    """--fail-on-error exits 1 on an error-severity breach; --quiet prints one line instead of the summary."""
    code = main(["scan", str(broken_parquet), "-G", str(G), "--out", str(tmp_path / "o"), "--no-report", "--quiet",
                 "--fail-on-error"])
    out = capsys.readouterr().out
    assert code == 1 and out.count("\n") == 1 and "error severity" in out


def test_a_healthy_run_passes_fail_on_error(tmp_path, capsys):
    """A healthy dump exits 0 with --fail-on-error and reports no violation."""
    pytest.importorskip("pyarrow")
    path = write_parquet(make_rows(broken_from=None), tmp_path / "ok.parquet")
    assert main(["scan", str(path), "-G", str(G), "--out", str(tmp_path / "o"), "--no-report", "--fail-on-error"]) == 0
    assert "violations: none" in capsys.readouterr().out


def test_unfit_record_and_bad_options_exit_2_with_a_worded_error(tmp_path, capsys):
    """A record without the reward names file and line; a bad --estimator and a reused --out are refused."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "1.jsonl").write_text('{"input": "p", "score": 1, "step": 1}\n{"input": "p", "step": 1}\n')
    assert main(["scan", str(tmp_path / "d"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "grpo-monitor scan: error:" in err and "1.jsonl, line 2: the row has no field 'score'" in err
    (tmp_path / "d" / "1.jsonl").write_text('{"input": "p", "score": 1, "step": 1}\n'
                                            '{"input": "p", "score": 0, "step": 1}\n')
    assert main(["scan", str(tmp_path / "d"), "--out", str(tmp_path / "o"), "--estimator", "median"]) == 2
    assert "--estimator" in capsys.readouterr().err
    assert main(["scan", str(tmp_path / "d"), "--out", str(tmp_path / "o"), "--no-report", "-q"]) == 0
    assert main(["scan", str(tmp_path / "d"), "--out", str(tmp_path / "o"), "-q"]) == 2
    assert "already holds monitor.jsonl" in capsys.readouterr().err
    assert main(["scan", str(tmp_path / "d"), "--out", str(tmp_path / "o"), "-q", "--overwrite", "--no-report"]) == 0


def test_progress_bar_appears_only_after_its_delay_and_not_when_quiet():
    """The rich bar is drawn on a terminal once the delay has passed; quiet or fast scans draw nothing."""
    pytest.importorskip("rich")
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    slow = DelayedProgress(total=100, unit="bytes", console=console, delay=0.0)
    slow.advance(40, step=3)
    assert slow.shown
    slow.close()
    assert "scanning" in buffer.getvalue()
    fast = DelayedProgress(total=100, unit="bytes", console=Console(file=io.StringIO(), force_terminal=True), delay=60)
    fast.advance(100, step=1)
    quiet = DelayedProgress(total=100, unit="bytes", console=console, delay=0.0, quiet=True)
    quiet.advance(100, step=1)
    not_a_terminal = DelayedProgress(total=100, unit="bytes", console=Console(file=io.StringIO()), delay=0.0)
    not_a_terminal.advance(100)
    assert not fast.shown and not quiet.shown and not not_a_terminal.shown


def test_compare_puts_two_scans_on_one_page(tmp_path, capsys):
    """compare writes a page with both runs; its table holds each run's first- and last-tenth degenerate rate."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("matplotlib")
    for name, rows in (("healthy", make_rows(broken_from=None)), ("broken", make_rows(seed=1))):
        path = write_parquet(rows, tmp_path / f"{name}.parquet")
        assert main(["scan", str(path), "-G", str(G), "--out", str(tmp_path / name), "-q", "--no-report"]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "healthy"), str(tmp_path / "broken"), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "healthy" in page and "broken" in page and 'id="compare"' in page
    assert (tmp_path / "cmp" / "compare.png").stat().st_size > 10_000
    for name in ("healthy", "broken"):
        records = read_jsonl(tmp_path / name / "monitor.jsonl")
        rates = np.array([r["metrics"]["grpo/groups/degenerate_rate"] for r in records])
        n = max(1, len(rates) // 10)
        first, last = f"{rates[:n].mean():.1%}", f"{rates[-n:].mean():.1%}"
        assert first in page and last in page and first in out
    assert "violations healthy: none" in out
    assert re.search(r"violations broken: .*zero_group_mean from step 1[3-9]", out), out


def test_compare_refuses_a_missing_run(tmp_path, capsys):
    """A run folder without a log is a worded error, exit 2."""
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), str(tmp_path / "empty"), "--out", str(tmp_path / "c")]) == 2
    assert "has no monitor log" in capsys.readouterr().err


def test_scan_from_a_subprocess_writes_the_summary(tmp_path):
    """The installed entry point runs a scan end to end (a fresh process, as a user or CI would)."""
    pytest.importorskip("pyarrow")
    path = write_parquet(make_rows(broken_from=None), tmp_path / "ok.parquet")
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline")
    proc = subprocess.run([sys.executable, "-m", "grpo_monitor", "scan", str(path), "-G", str(G), "--out",
                           str(tmp_path / "o"), "--no-report"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "grpo-monitor scan:" in proc.stdout
    assert json.loads((tmp_path / "o" / "run.json").read_text())["format"] == "parquet"
