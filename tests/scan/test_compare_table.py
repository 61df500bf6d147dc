"""`grpo-monitor compare`'s table, rendered from two real monitor logs: aligned headers, the report's words, values."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks import JSONLSink, read_jsonl
from grpo_monitor.tools.cli import main

B, G = 5, 4


def _log(folder: Path, steps: int, seed: int) -> Path:
    """A plain loop's log: B groups of G 0/1 rewards, population z-scores, through the real monitor."""
    gen = torch.Generator().manual_seed(seed)
    folder.mkdir(parents=True)
    monitor = GRPOMonitor(MonitorConfig(group_size=G, std_convention="population"), sinks=[JSONLSink(folder /
                                                                                                     "monitor.jsonl")])
    for _ in range(steps):
        rewards = (torch.rand(B, G, generator=gen, dtype=torch.float64) < 0.5).double()
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True, correction=0) + 1e-6)
        monitor.observe_rollout(rewards, advantages=adv, question_ids=list(range(B)))
        monitor.end_step()
    monitor.close()
    return folder / "monitor.jsonl"


def _expected_headers(label: str, steps: list[int]) -> list[str]:
    """The report's wording for a run of this length: single steps below 10 steps, tenths from 10 on."""
    if len(steps) == 1:
        return [f"{label} step {steps[0]}"]
    if len(steps) < 10:
        return [f"{label} first step ({steps[0]})", f"{label} last step ({steps[-1]})"]
    n = len(steps) // 10
    return [f"{label} first tenth (steps {steps[0]}-{steps[n - 1]})",
            f"{label} last tenth (steps {steps[-n]}-{steps[-1]})"]


@pytest.fixture
def compared(tmp_path, capsys):
    """(printed table, compare.html, both logs' records) for a 3-step run "run" and a 25-step run "scan-out"."""
    pytest.importorskip("matplotlib")
    logs = [_log(tmp_path / "a", 3, 0), _log(tmp_path / "b", 25, 1)]
    assert main(["compare", str(logs[0]), str(logs[1]), "--labels", "run,scan-out", "--out",
                 str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    return out, (tmp_path / "cmp" / "compare.html").read_text(), [read_jsonl(p) for p in logs]


def test_headers_are_aligned_over_their_columns(compared):
    """Every header is two or more spaces from the next and ends where its column's cells end."""
    out, _, records = compared
    lines = out.splitlines()
    header = lines[0]
    expected = [h for label, recs in zip(("run", "scan-out"), records, strict=True)
                for h in _expected_headers(label, [r["step"] for r in recs])]
    ends, start = [], 0
    for h in expected:
        at = header.index(h, start)
        assert at == 0 or header[at - 2:at] == "  ", (h, header)
        ends.append(at + len(h))
        start = at + len(h)
    assert header[start:].strip() == ""
    rows = [line for line in lines[1:] if line and not line.startswith(("violations", "compare:"))]
    assert rows
    for row in rows:
        cells = list(re.finditer(r"\S+", row))[-len(expected):]
        assert [m.end() for m in cells] == ends, (row, header)


def test_cells_are_the_logs_values_by_the_formatting_rule(compared):
    """Degenerate rate and effective prompts under each header equal the log's, counts written as integers."""
    out, page, records = compared
    rows = {line[:32].strip(): line[32:].split() for line in out.splitlines()[1:]}
    cells = []
    for recs in records:
        rate = np.array([r["metrics"]["grpo/groups/degenerate_rate"] for r in recs])
        prompts = np.array([r["metrics"]["grpo/groups/effective_prompts"] for r in recs])
        n = 1 if len(recs) < 10 else len(recs) // 10
        cells.append([(f"{rate[:n].mean():.1%}", prompts[:n].mean()), (f"{rate[-n:].mean():.1%}", prompts[-n:].mean())])
    flat = [c for pair in cells for c in pair]
    assert rows["degenerate rate"] == [r for r, _ in flat]
    shown = [f"{p:.0f}" if float(p).is_integer() else f"{p:.1f}" for _, p in flat]
    assert rows["effective prompts"] == shown and not any(s.endswith(".0") for s in shown)
    th = re.findall(r'<th class="[ab]">([^<]+)</th>', page)
    assert th == [h for label, recs in zip(("run", "scan-out"), records, strict=True)
                  for h in _expected_headers(label, [r["step"] for r in recs])]
