"""`scan` never changes the data it reads without a word: rows without a step, a `true` step, duplicate step files,
group values of several types and NaN group ids are counted in the summary or refused; what reaches the terminal
is escaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_monitor.sinks import read_jsonl
from grpo_monitor.tools.cli import main
from grpo_monitor.tools.scan import ScanInputError, format_summary, scan_rollouts


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def scan(path: Path, out: Path, **kw):
    kw.setdefault("group_size", 4)
    return scan_rollouts(path, out, quiet=True, report=False, tensorboard=False, **kw)


def group(step, gid, rewards, **extra) -> list[dict]:
    return [{"step": step, "group": gid, "reward": r, **extra} for r in rewards]


def test_rows_with_a_null_step_are_counted_not_dropped_or_merged(tmp_path):
    """4 rows with `"step": null` before and between steps are skipped and said so (count and first line); the
    8 rows with a step are all scanned."""
    rows = group(None, 0, [1, 0, 1, 0]) + group(0, 0, [1, 0, 0, 0]) + group(None, 1, [1, 1, 1, 1])[:2] + \
        group(1, 0, [0, 0, 1, 1])
    result = scan(write_jsonl(tmp_path / "r.jsonl", rows), tmp_path / "out")
    assert result.rows == 8 and result.steps == 2
    note = next(n for n in result.notes if "no step" in n)
    assert "6 rows" in note and "r.jsonl, line 1" in note
    assert "6 rows with no step" in format_summary(result)


def test_a_true_step_is_not_merged_into_step_1(tmp_path):
    """`"step": true` after rows of step 1 is an input error naming its line, not more rows of step 1."""
    rows = group(1, 0, [1, 0, 1, 0]) + group(True, 0, [1, 1, 0, 0])
    with pytest.raises(ScanInputError, match=r"r\.jsonl, line 5: field 'step' should be an integer step.*True"):
        scan(write_jsonl(tmp_path / "r.jsonl", rows), tmp_path / "out")


def test_a_true_step_in_a_verl_dump_is_refused(tmp_path):
    """In verl's 1.jsonl a row with `"step": true` is not taken for step 1."""
    rows = [{"input": "q", "output": "o", "score": float(i % 2), "step": 1} for i in range(3)]
    rows.append({"input": "q", "output": "o", "score": 1.0, "step": True})
    write_jsonl(tmp_path / "dump" / "1.jsonl", rows)
    with pytest.raises(ScanInputError, match=r"1\.jsonl, line 4: field 'step' is True"):
        scan(tmp_path / "dump", tmp_path / "out", group_size=None, fmt="verl")


def test_duplicate_verl_step_files_are_refused(tmp_path):
    """verl dumps `1.jsonl` and `01.jsonl` are both step 1: an input error naming both, not step 1 twice."""
    rows = [{"input": "q", "output": "o", "score": float(i % 2), "step": 1} for i in range(4)]
    for name in ("1.jsonl", "01.jsonl", "2.jsonl"):
        write_jsonl(tmp_path / "dump" / name, [dict(r, step=int(name[:-6])) for r in rows])
    with pytest.raises(ScanInputError, match=r"01\.jsonl and .*/1\.jsonl are both the dump of step 1"):
        scan(tmp_path / "dump", tmp_path / "out", group_size=None)


def test_group_values_of_several_types_stay_apart_and_are_noted(tmp_path):
    """Group values 1, true and 1.0 are three groups of 4 (a dict would make one of 12), and the summary says so."""
    rows = group(0, 1, [1, 0, 0, 0]) + group(0, True, [1, 1, 1, 1]) + group(0, 1.0, [0, 1, 0, 1])
    result = scan(write_jsonl(tmp_path / "r.jsonl", rows), tmp_path / "out")
    metrics = read_jsonl(result.log)[0]["metrics"]
    assert metrics["grpo/groups/total"] == 3 and metrics["grpo/groups/degenerate_rate"] == pytest.approx(1 / 3)
    note = next(n for n in result.notes if "several types" in n)
    assert "bool, float, int" in note and "1 step from step 0" in note


@pytest.mark.parametrize("bad, word", [(float("nan"), "NaN"), (None, "null")], ids=["nan", "null"])
def test_a_nan_or_null_group_id_is_an_input_error(bad, word, tmp_path):
    """A NaN group id (JSON NaN) or a null one is refused with the step and the row, never grouped by chance."""
    rows = group(0, 0.5, [1, 0, 1, 0]) + group(0, bad, [1, 1, 0, 0])
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in rows))
    with pytest.raises(ScanInputError, match=rf"row 5 of step 0 .*group id {word}"):
        scan(path, tmp_path / "out")


# ---------------------------------------------------------------- the terminal


def test_control_characters_from_a_recording_are_escaped(tmp_path, capsys):
    """ESC and BEL in a field name (quoted in an error) and in a file name (quoted in the summary and a warning)
    reach the terminal as \\x1b and \\x07."""
    bad = tmp_path / "r\x1b]0;owned\x07.jsonl"
    write_jsonl(bad, [{"step": 0, "group": 0, "\x1b[31mscore\x07": 1.0}])
    assert main(["scan", str(bad), "--out", str(tmp_path / "o1"), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b[31mscore\\x07" in err
    good = tmp_path / "g\x1b[2J.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in group(0, 0, [1, 0, 1, 0])) + '{"step": 1, "gro')
    assert main(["scan", str(good), "--out", str(tmp_path / "o2"), "--no-report", "-G", "4"]) == 0
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert "\x1b" not in text
    assert "g\\x1b[2J.jsonl" in captured.out and "torn final line" in captured.out


# ---------------------------------------------------------------- a misspelt estimator


def test_a_misspelt_estimator_gets_one_line_with_the_closest_names(tmp_path, capsys):
    """`MonitorConfig(std_convention="besel")`, `estimator="popluation"` and `scan --estimator verl.grop` each get
    one line naming the closest registry names, no list of every name and no pydantic URL."""
    from grpo_monitor import MonitorConfig

    for kw, near in (({"std_convention": "besel"}, "'bessel'"), ({"estimator": "popluation"}, "'population'")):
        with pytest.raises(ValueError) as caught:
            MonitorConfig(**kw)
        text = str(caught.value)
        assert "\n" not in text and f"did you mean {near}" in text and "errors.pydantic.dev" not in text
        assert "verl.rloo_vectorized" not in text
    src = write_jsonl(tmp_path / "r.jsonl", group(0, 0, [1, 0, 1, 0]))
    assert main(["scan", str(src), "--out", str(tmp_path / "o"), "-G", "4", "--estimator", "verl.grop"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--estimator: unknown estimator 'verl.grop'; did you mean 'verl.grpo'" in err
    assert not (tmp_path / "o").exists()
