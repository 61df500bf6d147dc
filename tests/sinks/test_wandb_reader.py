"""read_wandb_records: the leveldb-style .wandb format, on real offline runs and built files."""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

import pytest

pytest.importorskip("wandb")

from wandb.proto import wandb_internal_pb2  # noqa: E402

from grpo_monitor.sinks import wandb_reader as R  # noqa: E402


def _frame(rtype: int, body: bytes) -> bytes:
    crc = zlib.crc32(body, zlib.crc32(bytes([rtype])))
    return struct.pack("<IHB", crc, len(body), rtype) + body


def _write_log(payloads: list[bytes]) -> bytes:
    """An independent writer of the format: FULL records, split FIRST/MIDDLE/LAST at block ends."""
    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for payload in payloads:
        rest, first = payload, True
        while True:
            left = R.BLOCK_LEN - len(out) % R.BLOCK_LEN
            if left < 7:
                out += b"\0" * left
                continue
            room = left - 7
            if len(rest) <= room:
                out += _frame(R.FULL if first else R.LAST, rest)
                break
            out += _frame(R.FIRST if first else R.MIDDLE, rest[:room])
            rest, first = rest[room:], False
    return bytes(out)


def _history(step: int, pad: int = 0) -> bytes:
    record = wandb_internal_pb2.Record()
    item = record.history.item.add()
    item.key, item.value_json = "grpo/step", str(step)
    if pad:
        extra = record.history.item.add()
        extra.key, extra.value_json = "pad", '"' + "x" * pad + '"'
    return record.SerializeToString()


@pytest.mark.parametrize(
    "pads",
    [[0, 0, 0], [32750, 0, 0], [100_000, 10, 70_000], [32714, 0, 0], [32717, 0, 0]],
    ids=["small", "first-last", "first-middle-last", "block-tail-padding", "exact-block-fill"],
)
def test_reads_records_written_by_an_independent_writer(tmp_path, pads):
    """FULL, FIRST/MIDDLE/LAST chains and zero-padded block tails all read back in order."""
    path = tmp_path / "run.wandb"
    path.write_bytes(_write_log([_history(i, pad) for i, pad in enumerate(pads)]))
    rows = R.history_rows(R.read_wandb_records(path))
    assert [row["grpo/step"] for row in rows] == list(range(len(pads)))
    assert [len(row.get("pad", "")) for row in rows] == pads


def test_incomplete_trailing_record_is_ignored(tmp_path):
    """A file cut mid-record (a run still writing) yields the complete records before it."""
    data = _write_log([_history(0), _history(1, pad=50_000)])
    path = tmp_path / "run.wandb"
    path.write_bytes(data[:-100])
    assert [row["grpo/step"] for row in R.history_rows(R.read_wandb_records(path))] == [0]


def test_corruption_and_bad_headers_are_worded_errors(tmp_path):
    """A flipped byte fails the crc check; a foreign file fails the header check."""
    data = bytearray(_write_log([_history(0)]))
    data[-1] ^= 0xFF
    path = tmp_path / "run.wandb"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="fails its crc32 check"):
        R.read_wandb_records(path)
    path.write_bytes(b"not a wandb file")
    with pytest.raises(ValueError, match="expected a .wandb file"):
        R.read_wandb_records(path)


def test_real_offline_run_reads_back(wandb_offline):
    """A real offline run: history with NaN, summary, alert, exit code, a >32 KiB record."""
    import wandb

    run = wandb.init(project="reader", config={"big": "y" * 80_000})
    path = Path(run.settings.sync_file)
    run.define_metric("grpo/step")
    run.define_metric("grpo/*", step_metric="grpo/step")
    run.log({"grpo/step": 0, "grpo/reward/mean": 0.25})
    run.log({"grpo/step": 1, "grpo/reward/mean": float("nan"), "grpo/kl/k3_max": float("inf")})
    run.alert(title="breach", text="zero_group_mean broken", level=wandb.AlertLevel.ERROR)
    run.finish(exit_code=1)
    records = R.wait_for_exit(path)
    rows = R.history_rows(records)
    assert [r["grpo/step"] for r in rows] == [0, 1]
    assert rows[0]["grpo/reward/mean"] == 0.25 and math.isnan(rows[1]["grpo/reward/mean"])
    assert rows[1]["grpo/kl/k3_max"] == math.inf
    assert R.summary(records)["grpo/kl/k3_max"] == math.inf
    assert R.alerts(records) == [{"title": "breach", "text": "zero_group_mean broken", "level": "ERROR"}]
    assert R.exit_code(records) == 1
    run_records = [r for r in records if r.WhichOneof("record_type") == "run"]
    assert any("y" * 80_000 in item.value_json for item in run_records[0].run.config.update)
    globs = [m for m in R.metric_definitions(records) if m["glob_name"]]
    assert globs == [{"name": "", "glob_name": "grpo/*", "step_metric": "grpo/step", "summary": []}]


def test_load_table_rejects_a_non_reference():
    """load_table says what it expected when handed a plain value."""
    with pytest.raises(ValueError, match="table reference with a 'path'"):
        R.load_table("x.wandb", 3.0)
