"""Reading ahead in a child process: the same steps and the same worded errors as reading in process."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest

from grpo_monitor.sinks import read_jsonl
from grpo_monitor.tools.scan import ScanInputError, scan_rollouts
from grpo_monitor.tools.scan.columns import ColumnMap
from grpo_monitor.tools.scan.prefetch import _frames, prefetched_steps


def write_dump(folder, steps=5, bad_line=None):
    """verl-like dumps; ``bad_line`` = (step, line) drops that row's score."""
    folder.mkdir(exist_ok=True)
    for step in range(1, steps + 1):
        rows = [{"input": f"q{k}", "score": float((k + i + step) % 3 == 0),
                 "step": step} for k in range(3) for i in range(4)]
        if bad_line and bad_line[0] == step:
            del rows[bad_line[1] - 1]["score"]
        (folder / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_prefetched_and_in_process_scans_write_the_same_log(tmp_path):
    """Both paths give the same records, step by step (metrics, histograms, violations)."""
    dump = write_dump(tmp_path / "d")
    logs = [read_jsonl(scan_rollouts(dump, tmp_path / f"o{p}", quiet=True, report=False, tensorboard=False,
                                     group_size=4, prefetch=p).log) for p in (False, True)]
    assert logs[0] == logs[1] and len(logs[0]) == 5


def test_a_bad_record_raises_the_same_worded_error(tmp_path):
    """A missing field found by the child is re-raised as ScanInputError with the same text; outputs are removed."""
    dump = write_dump(tmp_path / "d", bad_line=(3, 7))
    messages = []
    for prefetch in (False, True):
        with pytest.raises(ScanInputError) as info:
            scan_rollouts(dump, tmp_path / f"o{prefetch}", quiet=True, group_size=4, prefetch=prefetch)
        messages.append(str(info.value))
        assert not (tmp_path / f"o{prefetch}" / "monitor.jsonl").exists()
    assert messages[0] == messages[1] and "3.jsonl, line 7: the row has no field 'score'" in messages[0]


def test_a_child_that_dies_is_a_runtime_error_with_its_stderr(tmp_path):
    """A reader process that exits without its frames is reported with its exit code and stderr."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"],
                                stdout=subprocess.PIPE, stderr=err)
        with pytest.raises(RuntimeError, match=r"(?s)exit code 3.*boom"):
            list(_frames(proc, err, []))
        proc.stdout.close()


def test_notes_of_the_child_come_back(tmp_path):
    """A torn final line noted by the child's reader reaches the parent's notes (and its warning)."""
    dump = write_dump(tmp_path / "d", steps=2)
    with open(dump / "2.jsonl", "a") as f:
        f.write('{"input": "q0", "sco')
    notes: list[str] = []
    with pytest.warns(RuntimeWarning, match="torn final line"):
        steps = list(prefetched_steps(dump, "verl", ColumnMap(), 4, notes))
    assert [info.step for info, _ in steps] == [1, 2] and "2.jsonl, line 13" in notes[0]
