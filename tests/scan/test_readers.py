"""Readers and format detection: what each format yields, and the worded error for a record that does not fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from grpo_monitor.files.reading import InputFileError, read_text_blocks
from grpo_monitor.tools.scan import ScanInputError, detect_format, open_reader, parse_columns
from grpo_monitor.tools.scan.rows import group_uids


def write_jsonl(path: Path, rows: list, raw_lines: dict[int, str] | None = None) -> Path:
    """``rows`` as JSON Lines; ``raw_lines`` replaces the given 1-based lines with raw text."""
    lines = [json.dumps(r) for r in rows]
    for number, text in (raw_lines or {}).items():
        lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")
    return path


def verl_rows(step: int, groups: int = 2, g: int = 4) -> list[dict]:
    return [{"input": f"prompt {k}", "output": "o", "gts": "1", "score": float(i % 2), "step": step}
            for k in range(groups) for i in range(g)]


@pytest.fixture
def verl_dir(tmp_path) -> Path:
    folder = tmp_path / "rollouts"
    folder.mkdir()
    for step in (1, 2, 10):
        write_jsonl(folder / f"{step}.jsonl", verl_rows(step))
    return folder


def steps_of(path, **kwargs) -> list:
    return list(open_reader(path, **kwargs).steps())


def test_verl_steps_come_in_numeric_order_with_rows_grouped_by_input(verl_dir):
    """<step>.jsonl files are read 1, 2, 10 (not 1, 10, 2); group keys are the inputs; rewards the scores."""
    steps = steps_of(verl_dir)
    assert [s.step for s in steps] == [1, 2, 10]
    assert steps[0].groups == ["prompt 0"] * 4 + ["prompt 1"] * 4
    assert steps[0].rewards.tolist() == [0.0, 1.0, 0.0, 1.0] * 2 and steps[0].advantages is None


def test_verl_uid_wins_and_v1_row_uids_lose_their_suffixes(tmp_path):
    """A uid field is the group; verl v1's per-row '{uid}_{session}_{index}' keys are cut back to the uid."""
    rows = [{"input": "same prompt", "output": "o", "gts": None, "score": 1.0, "step": 1, "uid": f"u{k}_0_{i}"}
            for k in range(2) for i in range(3)]
    write_jsonl(tmp_path / "1.jsonl", rows)
    assert steps_of(tmp_path)[0].groups == ["u0"] * 3 + ["u1"] * 3
    assert group_uids(["a_0_0", "a_0_0"]) == ["a_0_0", "a_0_0"], "repeated keys are group uids already"


@pytest.mark.parametrize(
    "broken, message",
    [
        pytest.param({"drop": "score"}, r"3\.jsonl, line 3: the row has no field 'score' \(verl format\)",
                     id="missing"),
        pytest.param({"score": "high"}, r"3\.jsonl, line 3: field 'score' should be a number or null.*'high'",
                     id="text-reward"),
        pytest.param({"step": 4}, r"3\.jsonl, line 3: field 'step' is 4 but the file is the dump of step 3",
                     id="wrong-step"),
        pytest.param({"raw": "{not json"}, r"3\.jsonl, line 3: not a JSON value", id="not-json"),
        pytest.param({"raw": "[1, 2]"}, r"3\.jsonl, line 3: expected one JSON object per row", id="not-object"),
    ],
)
def test_a_verl_record_that_does_not_fit_names_file_line_and_field(tmp_path, broken, message):
    """Each misfit is a ScanInputError naming the file, the line and the field."""
    rows = verl_rows(3)
    raw = {}
    if "drop" in broken:
        del rows[2][broken["drop"]]
    elif "raw" in broken:
        raw = {3: broken["raw"]}
    else:
        rows[2].update(broken)
    write_jsonl(tmp_path / "3.jsonl", rows, raw)
    with pytest.raises(ScanInputError, match=message):
        steps_of(tmp_path)


def test_a_torn_final_line_is_skipped_with_a_warning(tmp_path):
    """A last line cut short (a crash) is skipped, warned about and noted; the rows before it are read."""
    rows = verl_rows(1)
    write_jsonl(tmp_path / "1.jsonl", rows, {len(rows): json.dumps(rows[-1])[:20]})
    reader = open_reader(tmp_path)
    with pytest.warns(RuntimeWarning, match=r"1\.jsonl, line 8: skipped a torn final line"):
        step = next(reader.steps())
    assert step.num_rows == 7 and "torn final line" in reader.notes[0]


def test_blank_lines_and_none_scores(tmp_path):
    """Blank lines are skipped (line numbers stay true); a null score is NaN (unscorable)."""
    rows = verl_rows(1)
    rows[5]["score"] = None
    write_jsonl(tmp_path / "1.jsonl", rows[:3] + [{}] + rows[3:], {4: "   "})
    step = steps_of(tmp_path)[0]
    assert step.num_rows == 8 and np.isnan(step.rewards[5]) and step.line == 1


def test_generic_jsonl_steps_must_be_contiguous_and_increase(tmp_path):
    """Rows of a step after another step are a worded error naming the line."""
    rows = [{"step": s, "group": "g", "reward": 1.0} for s in (0, 0, 1, 1, 0)]
    write_jsonl(tmp_path / "r.jsonl", rows)
    with pytest.raises(ScanInputError, match=r"r\.jsonl, line 5: rows of step 0 come after step 1.*sort the file"):
        steps_of(tmp_path / "r.jsonl")


def test_generic_jsonl_names_the_missing_field_and_what_the_row_has(tmp_path):
    """Without a reward field the error lists the names tried and the row's fields."""
    write_jsonl(tmp_path / "r.jsonl", [{"step": 0, "prompt": "p", "acc": 1}])
    with pytest.raises(ScanInputError, match=r"r\.jsonl, line 1: no reward field .*the row has: acc, prompt, step"):
        open_reader(tmp_path / "r.jsonl")
    write_jsonl(tmp_path / "s.jsonl", [{"step": 0, "reward": 1}])
    with pytest.raises(ScanInputError, match=r"no group field .*--group-size G"):
        open_reader(tmp_path / "s.jsonl")


def test_jsonl_blocks_cut_at_line_ends_and_steps_span_blocks(tmp_path):
    """A file read in small blocks gives whole lines with true line numbers, and the same steps as one block."""
    rows = [{"step": s // 10, "group": s // 5, "reward": float(s % 3 == 0)} for s in range(60)]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    with open(path, "rb") as f:
        blocks = list(read_text_blocks(f, path, block=100))
    assert "\n".join(text for text, _, _, _ in blocks) + "\n" == path.read_text()
    assert sum(size for _, _, size, _ in blocks) == path.stat().st_size
    assert [first for _, first, _, _ in blocks][:2] == [1, 2 + blocks[0][0].count("\n")] and blocks[-1][3]
    assert [(s.step, s.num_rows) for s in steps_of(path)] == [(k, 10) for k in range(6)]


def test_not_utf8_is_named_with_its_line(tmp_path):
    """Bytes that are not UTF-8 name the line they are on."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"step": 0, "group": 1, "reward": 1}\n{"step": 0, "group": "\xff", "reward": 1}\n')
    with pytest.raises(InputFileError, match=r"r\.jsonl, line 2: not UTF-8"):  # scan_rollouts: ScanInputError
        steps_of(path)


@pytest.mark.parametrize("text, message", [
    ("step", r"expected KEY=COLUMN pairs"), ("rewards=x", r"KEY one of step, group, reward"),
    ("step=a,step=b", r"step is given twice"),
])
def test_columns_option_is_checked(text, message):
    """--columns takes KEY=FIELD pairs with known keys, each once."""
    with pytest.raises(ScanInputError, match=message):
        parse_columns(text)


def test_detection(tmp_path, verl_dir):
    """Each layout is told from its files; an empty folder says what was looked for."""
    assert detect_format(verl_dir) == detect_format(verl_dir / "1.jsonl") == "verl"
    generic = write_jsonl(tmp_path / "mine.jsonl", [{"step": 0, "group": 1, "reward": 1.0}])
    assert detect_format(generic) == "jsonl"
    run = tmp_path / "wandb" / "offline-run-1" / "files" / "media" / "table"
    run.mkdir(parents=True)
    (run / "completions_1_ab12.table.json").write_text('{"columns": [], "data": []}')
    assert detect_format(tmp_path / "wandb") == "trl-wandb"
    (tmp_path / "wandb" / "offline-run-2" / "files" / "media" / "table").mkdir(parents=True)
    with pytest.raises(ScanInputError, match=r"holds 2 W&B runs with tables"):
        detect_format(tmp_path / "wandb")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ScanInputError, match=r"found no recorded rollouts: expected verl's <step>\.jsonl"):
        detect_format(tmp_path / "empty")
    with pytest.raises(ScanInputError, match="no such file or folder"):
        detect_format(tmp_path / "missing")


def test_verl_reward_can_be_another_field(tmp_path):
    """--columns reward=acc reads the reward function's extra field (booleans as 0/1) instead of score."""
    rows = verl_rows(1)
    for i, row in enumerate(rows):
        row["acc"] = i < 3
    write_jsonl(tmp_path / "1.jsonl", rows)
    step = steps_of(tmp_path, columns=parse_columns("reward=acc"))[0]
    assert step.rewards.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
