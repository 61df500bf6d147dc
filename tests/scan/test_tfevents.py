"""TensorBoard event files for `scan --metrics`: a file damaged in the middle is read past the damage with a note
naming the file, the byte range and the steps lost (never cut silently); hostile records are worded errors naming
the file and the record, never tracebacks."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from grpo_monitor.tools.cli import main
from grpo_monitor.tools.scan.logged import read_logged

pytest.importorskip("tensorboard")
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: E402
from tensorboard.compat.proto.tensor_pb2 import TensorProto  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # noqa: E402

TAG = "train/entropy"  # TRL's entropy: grpo/entropy/mean
STEPS = list(range(1, 11))


def frame(body: bytes, length: int | None = None) -> bytes:
    """One TFRecord as TensorFlow writes it (checksums from tensorboard's own masked_crc32c)."""
    head = struct.pack("<Q", len(body) if length is None else length)
    return head + struct.pack("<I", masked_crc32c(head)) + body + struct.pack("<I", masked_crc32c(body))


def event_file(folder: Path, extra: bytes = b"") -> tuple[Path, list[int]]:
    """Ten steps of TAG written by torch's SummaryWriter, then ``extra``; the offset where each step's record
    starts (read back with the framing above)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(folder))
    for step in STEPS:
        writer.add_scalar(TAG, 0.1 * step, step)
    writer.close()
    (path,) = folder.glob("events.out.tfevents*")
    data = path.read_bytes()
    starts, offset = [], 0
    while offset < len(data):
        starts.append(offset)
        offset += 16 + struct.unpack_from("<Q", data, offset)[0]
    path.write_bytes(data + extra)
    return path, starts[1:]  # the first record is the file version


@pytest.mark.parametrize("where", ["length", "data"], ids=["length-byte", "data-byte"])
def test_a_file_damaged_in_the_middle_is_read_past_the_damage_with_a_note(where, tmp_path):
    """One byte flipped in step 5's record: steps 1-4 and 6-10 are read, and one note names the file, the bytes
    skipped (the damaged byte inside) and the steps between which values are lost."""
    path, starts = event_file(tmp_path / "tb")
    data = bytearray(path.read_bytes())
    damaged = starts[4] + (2 if where == "length" else 20)
    data[damaged] ^= 0xFF
    path.write_bytes(bytes(data))
    logged = read_logged(tmp_path / "tb")
    assert sorted(logged.by_step) == [s for s in STEPS if s != 5]
    (note,) = logged.notes
    assert str(path) in note and "from step 4 to step 6" in note, note
    start, end = map(int, re.search(r"bytes (\d+) to (\d+) skipped", note).groups())
    assert start == starts[4] <= damaged < end == starts[5]


def test_an_incomplete_last_record_is_a_note(tmp_path):
    """A run still writing (half a record at the end): every whole step is read, and a note says what was not."""
    path, _ = event_file(tmp_path / "tb", extra=frame(b"x" * 40)[:30])
    logged = read_logged(tmp_path / "tb")
    assert sorted(logged.by_step) == STEPS
    assert len(logged.notes) == 1 and "incomplete last record" in logged.notes[0] and "after step 10" in \
        logged.notes[0]


def _scalar_tensor(**fields) -> bytes:
    value = Summary.Value(tag=TAG, tensor=TensorProto(**fields))
    return Event(step=11, summary=Summary(value=[value])).SerializeToString()


HOSTILE = [
    pytest.param(frame(b"\xff\xff\xff\xff"), "no TensorBoard Event", id="valid-crc-not-an-event"),
    pytest.param(frame(b"\x0b" * 50000 + b"\x0c" * 50000), "no TensorBoard Event", id="deep-nesting"),
    pytest.param(frame(b"abc", length=2**34), "17179869184 bytes", id="length-2-to-the-34"),
    pytest.param(frame(b"abc", length=2**60), str(2**60) + " bytes", id="length-2-to-the-60"),
    pytest.param(frame(_scalar_tensor(dtype=7, string_val=[b"0.5"])), "dtype", id="string-scalar"),
    pytest.param(frame(_scalar_tensor(dtype=8, scomplex_val=[0.5, 1.0])), "dtype complex64", id="complex-scalar"),
    pytest.param(frame(_scalar_tensor(dtype=1, tensor_content=b"\x00" * 12)), "cannot be read", id="wrong-size-scalar"),
    pytest.param(frame(_scalar_tensor(dtype=1, tensor_content=b"\x00" * 3)), "cannot be read", id="short-scalar"),
]


@pytest.mark.parametrize("record, words", HOSTILE)
def test_a_hostile_record_is_a_worded_error_naming_file_and_record(record, words, tmp_path, capsys):
    """`scan --metrics`: exit 2, one line naming the file, the record (its index and byte offset) and what is
    wrong; no traceback."""
    path, starts = event_file(tmp_path / "tb", extra=record)
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(f'{{"step": {s}, "group": 0, "reward": {i % 2}}}\n' for s in STEPS for i in range(4)))
    code = main(["scan", str(rollouts), "--metrics", str(tmp_path / "tb"), "--out", str(tmp_path / "scan"),
                 "--no-report", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("grpo-monitor scan: error:") and "Traceback" not in err, err
    size = path.stat().st_size - len(record)
    assert str(path) in err and f"record 11 at byte {size}" in err and words in err, err
