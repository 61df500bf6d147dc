"""`grpo-monitor report` on a hand-edited or merged log: a worded error naming the file and the line, exit code 2."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("matplotlib")

from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from grpo_monitor.sinks import JSONLSink, read_jsonl  # noqa: E402
from grpo_monitor.tools.cli import main  # noqa: E402
from grpo_monitor.tools.reporting import LogFormatError, load_run, read_step_records  # noqa: E402

STEPS = 6
VIOLATION_STEP = 2  # written on line 3


@pytest.fixture(scope="module")
def valid_log(tmp_path_factory) -> Path:
    """A real monitor's JSONL log: 6 steps, question histograms, two violations at step 2 (on line 3)."""
    log = tmp_path_factory.mktemp("valid") / "monitor.jsonl"
    gen = torch.Generator().manual_seed(0)
    with GRPOMonitor(MonitorConfig(group_size=4, on_violation="ignore"), sinks=[JSONLSink(log)]) as mon:
        for step in range(STEPS):
            rewards = (torch.rand(4, 4, generator=gen) < 0.5).double()
            rewards[:3] = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
            adv = rewards - rewards.mean(1, keepdim=True)
            if step == VIOLATION_STEP:  # not centred, and nonzero on the degenerate group 2
                adv = adv + 0.5
            mon.observe_rollout(rewards, advantages=adv, question_ids=["q0", "q1", "q2", "q3"])
            mon.end_step()
    violations = [json.loads(line)["violations"] for line in log.read_text().splitlines()]
    assert [len(v) >= 2 for v in violations] == [step == VIOLATION_STEP for step in range(STEPS)]
    return log


def _edit(valid_log: Path, tmp_path: Path, line: int, change: Callable[[dict], Any]) -> Path:
    """A copy of the log whose 1-based ``line`` is replaced by ``change(record)`` (a record or raw text)."""
    lines = valid_log.read_text().splitlines()
    new = change(json.loads(lines[line - 1]))
    lines[line - 1] = new if isinstance(new, str) else json.dumps(new)
    out = tmp_path / "edited.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


def _set(path: tuple, value: Any) -> Callable[[dict], dict]:
    def change(record: dict) -> dict:
        target = record
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return record

    return change


def _drop(*path: Any) -> Callable[[dict], dict]:
    def change(record: dict) -> dict:
        target = record
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
        return record

    return change


def _raw(text: str) -> Callable[[dict], str]:
    return lambda record: text


Q_STD = "grpo/reward/question_std"
RATE = "grpo/groups/degenerate_rate"
BROKEN = [  # id, line, edit, what the message says
    ("metrics-as-list", 2, lambda r: {**r, "metrics": list(r["metrics"].values())},
     '"metrics" should be an object mapping metric names to numbers, but got ['),
    ("metrics-missing", 5, _drop("metrics"),
     '"metrics" should be an object mapping metric names to numbers, but got nothing (no such field)'),
    ("metric-as-string", 4, _set(("metrics", RATE), "0.5"),
     f'"metrics"["{RATE}"] should be a number, NaN or null, but got "0.5" (a string)'),
    ("metric-as-object", 6, _set(("metrics", RATE), {"mean": 0.5}),
     f'"metrics"["{RATE}"] should be a number, NaN or null, but got {{"mean": 0.5}} (an object)'),
    ("violation-as-string", 3, lambda r: {**r, "violations": [v["message"] for v in r["violations"]]},
     '"violations"[0] should be an object (one Violation.to_dict()), but got "step 2: invariant'),
    ("violations-as-string", 3, _set(("violations",), "zero_group_mean"),
     '"violations" should be an array of violation objects (Violation.to_dict()), '
     'but got "zero_group_mean" (a string)'),
    ("violation-without-invariant", 3, _drop("violations", 1, "invariant"),
     '"violations"[1]["invariant"] should be the invariant\'s name (a string), but got nothing (no such field)'),
    ("violation-step-as-string", 3, _set(("violations", 0, "step"), "2"),
     '"violations"[0]["step"] should be a non-negative integer, but got "2" (a string)'),
    ("histogram-as-number", 5, _set(("histograms", Q_STD), 0.25),
     f'"histograms"["{Q_STD}"] should be an array of numbers or null, but got 0.25 (a number)'),
    ("histogram-value-as-string", 6, _set(("histograms", Q_STD, 1), "0.5"),
     f'"histograms"["{Q_STD}"][1] should be a number, NaN or null, but got "0.5" (a string)'),
    ("histograms-as-list", 2, _set(("histograms",), [0.1, 0.2]),
     '"histograms" should be an object mapping histogram names to arrays of numbers, but got [0.1, 0.2] (an array)'),
    ("step-as-float", 2, _set(("step",), 1.5),
     '"step" should be a non-negative integer (the training step), but got 1.5 (a number)'),
    ("step-as-string", 4, _set(("step",), "3"),
     '"step" should be a non-negative integer (the training step), but got "3" (a string)'),
    ("step-as-boolean", 4, _set(("step",), True),
     '"step" should be a non-negative integer (the training step), but got true (a boolean)'),
    ("step-negative", 4, _set(("step",), -3),
     '"step" should be a non-negative integer (the training step), but got -3 (a number)'),
    ("step-null", 1, _set(("step",), None),
     '"step" should be a non-negative integer (the training step), but got null'),
    ("step-missing", 6, _drop("step"),
     '"step" should be a non-negative integer (the training step), but got nothing (no such field)'),
    ("record-is-array", 3, lambda r: list(r.items()),
     "the record should be a JSON object (one step record), but got [[\"step\", 2]"),
    ("record-is-string", 2, _raw('"step 1 done"'),
     'the record should be a JSON object (one step record), but got "step 1 done" (a string)'),
    ("record-is-number", 5, _raw("42"), "the record should be a JSON object (one step record), but got 42 (a number)"),
    ("record-is-null", 6, _raw("null"), "the record should be a JSON object (one step record), but got null"),
    ("convention-as-number", 2, _set(("convention",), 1),
     "\"convention\" should be the estimator's name (a string) or null, but got 1 (a number)"),
    ("failed-as-string", 3, _set(("failed",), "yes"), '"failed" should be true or false, but got "yes" (a string)'),
    ("flagged-questions-as-object", 4, _set(("flagged_questions",), {"q0": 1}),
     '"flagged_questions" should be an array of question ids, but got {"q0": 1} (an object)'),
]


@pytest.mark.parametrize("line,change,expected", [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN])
def test_broken_record_is_named_by_file_and_line(valid_log, tmp_path, capsys, line, change, expected):
    """Each hand edit exits 2 with `<file>, line <n>:`, what was expected and what came; no traceback."""
    log = _edit(valid_log, tmp_path, line, change)
    assert main(["report", str(log), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"grpo-monitor report: error: {log}, line {line}: "), err
    assert expected in err, err
    assert "Traceback" not in err and not (tmp_path / "out" / "report.html").exists()


def test_valid_log_still_reports(valid_log, tmp_path, capsys):
    """The unedited log exits 0, reads back as the public reader reads it, and keeps its violations."""
    assert main(["report", str(valid_log), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").is_file() and (tmp_path / "plots" / "violations.png").is_file()
    assert read_step_records(valid_log) == read_jsonl(valid_log)
    run = load_run(valid_log)
    assert run.steps.tolist() == list(range(STEPS))
    assert {m.step for m in run.violations} == {VIOLATION_STEP} and len(run.violations) == 2


def test_null_and_nan_values_are_accepted(valid_log, tmp_path):
    """NaN and null metrics (jq turns NaN into null), null violations and a null histogram entry are fine."""
    def change(record: dict) -> dict:
        record["metrics"].update({RATE: None, "extra": float("nan")})
        record["histograms"][Q_STD][0] = None
        return {**record, "violations": None, "convention": None, "failed": None, "written_by": "a newer version"}

    log = _edit(valid_log, tmp_path, 2, change)
    run = load_run(log)
    assert math.isnan(run.series(RATE)[1]) and math.isnan(run.series("extra")[1])
    assert math.isfinite(run.series(RATE)[0]) and run.histograms[Q_STD][1][0] is None


def test_line_numbers_count_blank_lines(valid_log, tmp_path, capsys):
    """A blank line keeps its number, so the one named is the line an editor shows."""
    lines = valid_log.read_text().splitlines()
    lines[3] = lines[3].replace('"step": 3', '"step": "3"')
    log = tmp_path / "blank.jsonl"
    log.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
    assert main(["report", str(log)]) == 2
    assert f"{log}, line 5: " in capsys.readouterr().err


def test_merged_logs_error_names_the_line_in_the_merged_file(valid_log, tmp_path, capsys):
    """Two logs concatenated, the second hand-edited: the line number counts from the top of the merged file."""
    second = valid_log.read_text().splitlines()
    second[1] = json.dumps({**json.loads(second[1]), "metrics": [1.0]})
    merged = tmp_path / "merged.jsonl"
    merged.write_text(valid_log.read_text() + "\n".join(second) + "\n")
    assert main(["report", str(merged)]) == 2
    assert f"{merged}, line {STEPS + 2}: " in capsys.readouterr().err


def test_torn_final_line_is_skipped_with_a_warning(valid_log, tmp_path, capsys):
    """A crash's torn final line stays a warning naming the line, and the report of the other steps is built."""
    text = valid_log.read_text()
    log = tmp_path / "torn.jsonl"
    log.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])  # half the last line, no newline
    with pytest.warns(RuntimeWarning, match=f"skipped torn final line {STEPS}"):
        assert main(["report", str(log), "--out", str(tmp_path / "out")]) == 0
    with pytest.warns(RuntimeWarning):
        assert load_run(log).steps.tolist() == list(range(STEPS - 1))


def test_torn_line_left_by_a_crash_then_resume_is_skipped(valid_log, tmp_path):
    """A resumed sink ends the torn bytes with a newline: a non-JSON line mid-file is skipped, not an error."""
    lines = valid_log.read_text().splitlines()
    log = tmp_path / "resumed.jsonl"
    log.write_text("\n".join(lines[:3] + [lines[3][:40]] + lines[4:]) + "\n")
    with pytest.warns(RuntimeWarning, match="skipped unreadable line 4"):
        run = load_run(log)
    assert run.steps.tolist() == [0, 1, 2, 4, 5]


def test_log_format_error_is_a_value_error():
    """Callers catching ValueError (as the CLI does) catch the worded LogFormatError."""
    assert issubclass(LogFormatError, ValueError)


@pytest.mark.parametrize("line,change", [
    (5, _set(("histograms", Q_STD), 0.25)),
    (3, lambda r: list(r.items())),
], ids=["histogram-as-number", "record-is-array"])
def test_installed_command_exits_2_without_traceback(valid_log, tmp_path, line, change):
    """`python -m grpo_monitor report` in a fresh process: exit code 2, one worded line on stderr, no traceback."""
    log = _edit(valid_log, tmp_path, line, change)
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-m", "grpo_monitor", "report", str(log)], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"grpo-monitor report: error: {log}, line {line}: " in proc.stderr
