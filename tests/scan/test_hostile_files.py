"""Hostile or damaged recordings: `scan`, `report` and `compare` answer with a worded error naming the file (and the
line), exit code 2, bounded memory and no hang; nothing is left in --out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_monitor.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]


def rows(steps: int = 3, groups: int = 2, g: int = 4) -> list[dict]:
    """Generic (step, group, reward) rows with some reward variation."""
    return [{"step": s, "group": k, "reward": float((s + k + i) % 2)}
            for s in range(steps) for k in range(groups) for i in range(g)]


def write_jsonl(path: Path, records: list, extra: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + extra)
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def scan(path: Path, out: Path, capsys, *extra: str) -> tuple[int, str]:
    return run_cli(["scan", str(path), "--out", str(out), "--no-report", "-q", *extra], capsys)


def assert_worded(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("grpo-monitor"), err
    for word in words:
        assert word in err, err


DEEP = "[" * 100_000 + "]" * 100_000
BIG_INT = "9" * 5000
HUGE_INT = "1" + "0" * 400  # under the 4300-digit limit, over float's range


@pytest.mark.parametrize("line, words", [
    ('{"step": 1, "group": 0, "reward": ' + DEEP + "}", ("line 2", "nested")),
    ('{"step": 1, "group": 0, "reward": ' + BIG_INT + "}", ("line 2", "out of range")),
    ('{"step": 1, "group": 0, "reward": ' + HUGE_INT + "}", ("line 2", "reward", "out of range")),
    ('{"step": ' + HUGE_INT + ', "group": 0, "reward": 1}', ("line 2", "step", "out of range")),
    ('{"step": -1, "group": 0, "reward": 1}', ("line 1", "step", "-1")),
], ids=["deep-nesting", "4300-digit-int", "int-over-float-range", "step-over-int64", "negative-first-step"])
def test_a_hostile_jsonl_line_is_a_worded_error_and_leaves_no_output(line, words, tmp_path, capsys):
    """A deeply nested value, an out-of-range number or a negative step: exit 2 naming the file and line; --out
    stays as it was (no run.json, no monitor.jsonl)."""
    src = tmp_path / "in" / "rollouts.jsonl"
    src.parent.mkdir()
    first = "" if '"step": -1' in line else json.dumps({"step": 0, "group": 0, "reward": 1.0}) + "\n"
    src.write_text(first + line + "\n" + line + "\n")
    out = tmp_path / "out"
    code, err = scan(src, out, capsys, "-G", "2")
    assert_worded(code, err, "rollouts.jsonl", *words)
    assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())


@pytest.mark.parametrize("line, words", [
    ('{"step": 0, "metrics": ' + DEEP + "}", ("line 1", "nested")),
    ('{"step": 0, "metrics": {"grpo/x": ' + BIG_INT + "}}", ("line 1", "out of range")),
    ('{"step": ' + BIG_INT + ', "metrics": {}}', ("line 1", "out of range")),
], ids=["deep-nesting", "4300-digit-int", "4300-digit-step"])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_report_and_compare_word_a_hostile_log(command, line, words, tmp_path, capsys):
    """`report` and `compare` name the log and the line of a deeply nested or out-of-range record (exit 2)."""
    pytest.importorskip("matplotlib")
    log = tmp_path / "run" / "monitor.jsonl"
    log.parent.mkdir()
    log.write_text(line + "\n" + json.dumps({"step": 1, "metrics": {"grpo/x": 1.0}}) + "\n")
    argv = ["report", str(log.parent)] if command == "report" else \
        ["compare", str(log.parent), str(log.parent), "--out", str(tmp_path / "cmp")]
    code, err = run_cli(argv, capsys)
    assert_worded(code, err, "monitor.jsonl", *words)


def test_a_negative_step_in_a_verl_dump_is_worded(tmp_path, capsys):
    """A verl dump whose rows carry a negative step is an input error with its line (no traceback, no run.json)."""
    dump = tmp_path / "dump"
    write_jsonl(dump / "0.jsonl", [{"input": "q", "output": "a", "score": 1.0, "step": 0}] * 2)
    write_jsonl(dump / "1.jsonl", [{"input": "q", "output": "a", "score": 1.0, "step": -1}] * 2)
    out = tmp_path / "out"
    code, err = scan(dump, out, capsys)
    assert_worded(code, err, "1.jsonl", "line 1")
    assert not out.exists() or not any(out.iterdir())


# ---------------------------------------------------------------- files that are not regular, and size limits


def test_a_step_file_symlinked_to_dev_zero_is_refused(tmp_path, capsys):
    """A verl step file that is a symlink to /dev/zero is refused by name, not read (memory stays bounded)."""
    dump = tmp_path / "dump"
    write_jsonl(dump / "0.jsonl", [{"input": "q", "output": "a", "score": 1.0, "step": 0}] * 2)
    (dump / "1.jsonl").symlink_to("/dev/zero")
    code, err = scan(dump, tmp_path / "out", capsys, "--format", "verl")
    assert_worded(code, err, "1.jsonl", "not a regular file")


def test_a_symlink_leaving_the_input_folder_is_refused(tmp_path, capsys):
    """A step file that links outside the scanned folder is refused by name."""
    outside = write_jsonl(tmp_path / "elsewhere" / "secret.jsonl", [{"input": "q", "score": 1.0, "step": 1}] * 2)
    dump = tmp_path / "dump"
    write_jsonl(dump / "0.jsonl", [{"input": "q", "output": "a", "score": 1.0, "step": 0}] * 2)
    (dump / "1.jsonl").symlink_to(outside)
    code, err = scan(dump, tmp_path / "out", capsys, "--format", "verl")
    assert_worded(code, err, "1.jsonl", "outside")


@pytest.mark.parametrize("command", ["scan", "report"])
def test_a_fifo_is_refused_without_hanging(command, tmp_path):
    """A FIFO named as the input (or planted as the log) is refused at once: the command ends with exit 2."""
    folder = tmp_path / "run"
    folder.mkdir()
    fifo = folder / ("rollouts.jsonl" if command == "scan" else "monitor.jsonl")
    os.mkfifo(fifo)
    argv = ["scan", str(fifo), "--out", str(tmp_path / "out"), "-q", "--no-report"] if command == "scan" else \
        ["report", str(folder)]
    proc = subprocess.run([sys.executable, "-m", "grpo_monitor", *argv], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "not a regular file" in proc.stderr and fifo.name in proc.stderr and "Traceback" not in proc.stderr


def test_line_and_file_size_limits_are_worded_and_configurable(tmp_path, capsys, monkeypatch):
    """A line over --max-line-bytes and a file over --max-file-bytes are refused with the limit and how to raise
    it; the environment variables set the same limits."""
    src = write_jsonl(tmp_path / "r.jsonl", rows(), extra=json.dumps({"step": 3, "group": 0, "reward": 1.0,
                                                                      "pad": "x" * 5000}) + "\n")
    code, err = scan(src, tmp_path / "o1", capsys, "-G", "4", "--max-line-bytes", "4096")
    assert_worded(code, err, "r.jsonl", "line 25", "4096", "--max-line-bytes")
    code, err = scan(src, tmp_path / "o2", capsys, "-G", "4", "--max-file-bytes", "1000")
    assert_worded(code, err, "r.jsonl", "1000", "--max-file-bytes")
    monkeypatch.setenv("GRPO_MONITOR_MAX_LINE_BYTES", "4096")
    code, err = scan(src, tmp_path / "o3", capsys, "-G", "4")
    assert_worded(code, err, "line 25", "GRPO_MONITOR_MAX_LINE_BYTES")
    monkeypatch.delenv("GRPO_MONITOR_MAX_LINE_BYTES")
    code, _ = scan(src, tmp_path / "o4", capsys, "-G", "4")
    assert code == 0


def test_a_long_line_without_a_line_break_stops_at_the_limit(tmp_path, capsys):
    """A 'line' that never ends (a file of 4 MiB of spaces, no newline) is refused at the line limit."""
    src = tmp_path / "r.jsonl"
    src.write_text(json.dumps({"step": 0, "group": 0, "reward": 1.0}) + "\n" + " " * (4 << 20))
    code, err = scan(src, tmp_path / "o", capsys, "-G", "2", "--max-line-bytes", str(1 << 20))
    assert_worded(code, err, "r.jsonl", "line 2", "--max-line-bytes")


_PEAK = r"""
import json, sys, time
from pathlib import Path
from grpo_monitor.tools.scan.readers import JsonlReader
path, size = Path(sys.argv[1]), int(sys.argv[2])
with open(path, "w") as f:
    f.write(json.dumps({"step": 0, "group": 0, "reward": 1.0}) + "\n")
    f.write('{"step": 0, "group": 0, "reward": 0.0, "completion": "')
    for _ in range(size >> 20):  # written in pieces: the baseline below must not hold the line already
        f.write("x" * (1 << 20))
    f.write('"}\n')
def status(key):  # kB figures of /proc/self/status (ru_maxrss would carry the parent's peak across exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
reader = JsonlReader(path)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current size
base = status("VmRSS:")
start = time.perf_counter()
steps = list(reader.steps())
print(json.dumps({"seconds": time.perf_counter() - start, "steps": len(steps),
                  "peak": status("VmHWM:") - base}))
"""


def test_a_long_line_is_read_in_linear_memory(tmp_path):
    """Reading one 48 MiB line costs under 3x the line in peak memory (the reader before: 4.3x, and quadratic
    copying); peak measured in a child process (VmHWM) (benchmarks/bench_long_line.py prints the figures)."""
    size = 48 << 20
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(tmp_path / "long.jsonl"), str(size)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["steps"] == 1
    assert found["peak"] < 3.0 * size, f"peak {found['peak'] / size:.2f}x the line"


# ---------------------------------------------------------------- Parquet and W&B tables


def _parquet_cases(tmp_path: Path) -> dict[str, Path]:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    good = tmp_path / "good.parquet"
    pq.write_table(pa.Table.from_pylist(rows()), good)
    data = good.read_bytes()
    cases = {"empty": b"", "not-parquet": b"step,group,reward\n0,0,1\n", "truncated": data[: len(data) // 2]}
    paths = {}
    for name, content in cases.items():
        paths[name] = tmp_path / name / "rollouts.parquet"
        paths[name].parent.mkdir()
        paths[name].write_bytes(content)
    dup = pa.table([pa.array([0, 0]), pa.array([0, 0]), pa.array([1.0, 0.0]), pa.array([0.0, 1.0])],
                   names=["step", "group", "reward", "reward"])
    paths["duplicate-columns"] = tmp_path / "dup" / "rollouts.parquet"
    paths["duplicate-columns"].parent.mkdir()
    pq.write_table(dup, paths["duplicate-columns"])
    return paths


@pytest.mark.parametrize("case", ["empty", "not-parquet", "truncated", "duplicate-columns"])
@pytest.mark.parametrize("fmt", ["auto", "parquet", "trl-parquet"])
def test_damaged_parquet_is_a_worded_error(case, fmt, tmp_path, capsys):
    """A 0-byte, non-Parquet, truncated file or one with two columns of one name: exit 2 naming the file."""
    path = _parquet_cases(tmp_path)[case]
    if fmt == "trl-parquet":
        path = path.rename(path.parent / "completions_1.parquet")
    code, err = scan(path, tmp_path / "out", capsys, "-G", "2", "--format", fmt)
    assert_worded(code, err, path.name)
    if case == "duplicate-columns":
        assert "reward" in err and "twice" in err


def _wandb_run(tmp_path: Path, table: object) -> Path:
    run = tmp_path / "offline-run-1"
    folder = run / "files" / "media" / "table"
    folder.mkdir(parents=True)
    good = {"columns": ["step", "prompt", "completion", "reward", "advantage"],
            "data": [[1, "p", "c", 1.0, 0.5], [1, "p", "d", 0.0, -0.5]]}
    (folder / "completions_1_aa.table.json").write_text(json.dumps(good))
    (folder / "completions_2_bb.table.json").write_text(json.dumps(table))
    return run


@pytest.mark.parametrize("table, words", [
    ({"columns": ["step", "prompt", "completion", "reward", "advantage"], "data": [[2, "p", "c", 1.0, 0.5], [2, "p"]]},
     ("row 2", "2 cells", "5 columns")),
    ({"columns": ["step", "prompt", "completion", "reward", "advantage"], "data": {"0": [2, "p", "c", 1.0, 0.5]}},
     ("data",)),
    ({"columns": "step", "data": []}, ("columns",)),
    ([1, 2], ("not a W&B table",)),
], ids=["short-row", "object-data", "columns-not-a-list", "not-an-object"])
def test_damaged_wandb_tables_are_worded(table, words, tmp_path, capsys):
    """A completions table with a short row, an object `data` field or no column list: exit 2 naming the file."""
    run = _wandb_run(tmp_path, table)
    code, err = scan(run, tmp_path / "out", capsys, "-G", "2", "--format", "trl-wandb")
    assert_worded(code, err, "completions_2_bb.table.json", *words)


def test_the_read_ahead_child_words_the_same_errors_under_the_same_limits(tmp_path):
    """With the reader in a child process (prefetch), a line over the limit set in the parent and a deeply nested
    line are the same worded ScanInputError, and nothing is left in --out."""
    from grpo_monitor.files import using_limits
    from grpo_monitor.tools.scan import ScanInputError, scan_rollouts

    src = write_jsonl(tmp_path / "r.jsonl", rows(), extra=json.dumps({"step": 3, "group": 0, "reward": 1.0,
                                                                      "pad": "x" * 5000}) + "\n")
    with using_limits(max_line_bytes=4096), pytest.raises(ScanInputError, match=r"r\.jsonl, line 25: a line longer"):
        scan_rollouts(src, tmp_path / "o1", group_size=4, quiet=True, report=False, prefetch=True)
    deep = write_jsonl(tmp_path / "d.jsonl", rows(), extra='{"step": 3, "group": 0, "reward": ' + DEEP + "}\n")
    with pytest.raises(ScanInputError, match=r"d\.jsonl, line 25: JSON nested deeper"):
        scan_rollouts(deep, tmp_path / "o2", group_size=4, quiet=True, report=False, prefetch=True)
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
