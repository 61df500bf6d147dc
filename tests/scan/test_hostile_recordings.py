"""Hostile or damaged values in the other recordings a scan reads: the records of a W&B run's `.wandb` file (its
config and history, read beside the completion tables) and the `--metrics` recording. Each gets a worded error
naming the file (and the item or the line), exit code 2, never a traceback; a value that is no measurement (NaN or
infinite steps, a number past float range) is left out, as a NaN metric is."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from grpo_monitor.sinks import read_jsonl
from grpo_monitor.sinks.wandb_reader import FULL, HEADER, IDENT, MAGIC, RECORD_HEADER, VERSION
from grpo_monitor.tools.cli import main

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")

DEEP = "[" * 5000 + "]" * 5000
BIG_INT = "9" * 5000
HUGE_INT = "1" + "0" * 400  # under the 4300-digit limit, over float's range


def write_wandb(path: Path, records: list) -> None:
    """A `.wandb` file in W&B's own framing (the reader's module docstring): the header, then one FULL record per
    Record proto, each with its crc32 seeded by the type byte (all fit in the first 32 KiB block)."""
    data = bytearray(HEADER.pack(IDENT, MAGIC, VERSION))
    for record in records:
        body = record.SerializeToString()
        assert len(data) + RECORD_HEADER.size + len(body) <= 32768
        data += RECORD_HEADER.pack(zlib.crc32(body, zlib.crc32(bytes([FULL]))), len(body), FULL) + body
    path.write_bytes(bytes(data))


def record(kind: str, **items: str):
    """A history or config Record whose items hold the given value_json texts."""
    out = pb.Record()
    for key, value_json in items.items():
        item = (out.history.item if kind == "history" else out.config.update).add()
        item.key, item.value_json = key, value_json
    return out


def trl_run(tmp_path: Path, *records) -> Path:
    """An offline TRL W&B run folder: one completions table of step 1 and a `.wandb` file of ``records``."""
    run = tmp_path / "offline-run-1"
    tables = run / "files" / "media" / "table"
    tables.mkdir(parents=True)
    table = {"columns": ["step", "prompt", "completion", "reward", "advantage"],
             "data": [[1, "p", "c", 1.0, 0.5], [1, "p", "d", 0.0, -0.5]]}
    (tables / "completions_1_aa.table.json").write_text(json.dumps(table))
    write_wandb(run / "run-1.wandb", list(records))
    return run


def rollouts(tmp_path: Path) -> Path:
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps({"step": s, "group": 0, "reward": float(i % 2)}) + "\n"
                            for s in range(3) for i in range(4)))
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def assert_worded(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("grpo-monitor scan: error:"), err
    for word in words:
        assert word in err, err


HOSTILE = [
    pytest.param("history", "actor/entropy", DEEP, "nested deeper", id="history-deep"),
    pytest.param("history", "actor/entropy", BIG_INT, "out of range", id="history-4300-digit-int"),
    pytest.param("history", "actor/entropy", "{oops", "not JSON", id="history-not-json"),
    pytest.param("config", "num_generations", DEEP, "nested deeper", id="config-deep"),
    pytest.param("config", "num_generations", "{oops", "not JSON", id="config-not-json"),
]


@pytest.mark.parametrize("kind, key, value, words", HOSTILE)
def test_a_hostile_wandb_record_is_a_worded_error(kind, key, value, words, tmp_path, capsys):
    """A TRL W&B run whose `.wandb` holds a value too deep, out of range or not JSON: exit 2 naming the file and
    the item, nothing left in --out."""
    run = trl_run(tmp_path, record(kind, _step="1", **{key: value}))
    out = tmp_path / "out"
    code, err = run_cli(["scan", str(run), "--out", str(out), "--format", "trl-wandb", "-G", "2", "-q",
                         "--no-report"], capsys)
    assert_worded(code, err, "run-1.wandb", f"'{key}'", words)
    assert not out.exists()


@pytest.mark.parametrize("kind, key, value, words", [p for p in HOSTILE if p.values[0] == "history"])
def test_a_hostile_wandb_history_given_as_metrics_is_a_worded_error(kind, key, value, words, tmp_path, capsys):
    """The same records read as `--metrics RUN`: exit 2 naming `--metrics`, the file and the item."""
    run = trl_run(tmp_path, record(kind, _step="1", **{key: value}))
    code, err = run_cli(["scan", str(rollouts(tmp_path)), "--out", str(tmp_path / "out"), "--metrics", str(run),
                         "-G", "4", "-q", "--no-report"], capsys)
    assert_worded(code, err, "--metrics", "run-1.wandb", f"'{key}'", words)


def test_values_that_are_no_measurement_are_left_out(tmp_path, capsys):
    """NaN and infinite steps and an entropy past float range are skipped (before: ValueError, OverflowError); the
    finite entropy of step 2 is reported under grpo/entropy/mean."""
    run = trl_run(tmp_path, record("history", _step="NaN", **{"actor/entropy": "0.5"}),
                  record("history", _step="Infinity", **{"actor/entropy": "0.5"}),
                  record("history", _step="1", **{"actor/entropy": HUGE_INT}),
                  record("history", _step="2", **{"actor/entropy": "0.25"}))
    out = tmp_path / "out"
    code, err = run_cli(["scan", str(rollouts(tmp_path)), "--out", str(out), "--metrics", str(run), "-G", "4",
                         "-q", "--no-report"], capsys)
    assert code == 0, err
    entropy = {r["step"]: r["metrics"].get("grpo/entropy/mean") for r in read_jsonl(out / "monitor.jsonl")}
    assert entropy == {0: None, 1: None, 2: 0.25}


@pytest.mark.parametrize("line, words", [
    ('{"step": 1, "data": {"actor/entropy": ' + DEEP + "}}", ("line 2", "nested deeper")),
    ('{"step": 1, "data": {"actor/entropy": ' + BIG_INT + "}}", ("line 2", "out of range")),
    ('{"step": 1, "pad": "' + "x" * 5000 + '"}', ("line 2", "longer than 4096 bytes", "--max-line-bytes")),
], ids=["deep", "4300-digit-int", "over-the-line-limit"])
def test_a_hostile_metrics_log_is_a_worded_error(line, words, tmp_path, capsys):
    """A verl `file` logger JSONL given as --metrics is read like every other input: bounded, worded, exit 2."""
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 0, "data": {"actor/entropy": 0.5}}\n' + line + "\n")
    limit = ["--max-line-bytes", "4096"] if "longer" in words[1] else []
    code, err = run_cli(["scan", str(rollouts(tmp_path)), "--out", str(tmp_path / "out"), "--metrics", str(log),
                         "-G", "4", "-q", "--no-report", *limit], capsys)
    assert_worded(code, err, f"--metrics {log}", *words)


def test_a_record_that_is_no_wandb_record_is_worded(tmp_path, capsys):
    """A record whose checksum holds over bytes that are no Record proto (a hand-made file): `--metrics RUN` exits
    2 naming the file and the record; scanning the run's tables goes on and notes it (before: DecodeError)."""
    run = trl_run(tmp_path)
    body = b"\xff\xff\xff\xff\x0f not a record"
    header = RECORD_HEADER.pack(zlib.crc32(body, zlib.crc32(bytes([FULL]))), len(body), FULL)
    (run / "run-1.wandb").write_bytes(HEADER.pack(IDENT, MAGIC, VERSION) + header + body)
    code, err = run_cli(["scan", str(rollouts(tmp_path)), "--out", str(tmp_path / "o1"), "--metrics", str(run),
                         "-G", "4", "-q", "--no-report"], capsys)
    assert_worded(code, err, "run-1.wandb: record 1 is not a W&B record")
    assert main(["scan", str(run), "--out", str(tmp_path / "o2"), "--format", "trl-wandb", "-G", "2",
                 "--no-report"]) == 0
    assert "record 1 is not a W&B record" in capsys.readouterr().out
