"""Generic records a user dumped themselves: Parquet through pyarrow and JSONL, with advantages.

A correct advantage column keeps every invariant; one that breaks from some step on is
reported with the step it started. Numbers are checked against plain-Python counts.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from grpo_monitor.sinks import read_jsonl
from grpo_monitor.tools.scan import parquet as scan_parquet
from grpo_monitor.tools.scan import scan_rollouts

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

G, GROUPS, STEPS, BROKEN_FROM = 8, 6, 20, 13


def _population_z(rewards: list[float]) -> list[float]:
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + 1e-6) for r in rewards]


def make_rows(seed: int = 0, broken_from: int | None = BROKEN_FROM) -> list[dict]:
    """(step, prompt_id, reward, advantage) rows; from ``broken_from`` on, one group's advantages are shifted by 0.5."""
    rng = random.Random(seed)
    rows = []
    for step in range(STEPS):
        for g, prompt in enumerate(rng.sample(range(40), GROUPS)):
            p = 0.0 if prompt < 4 else rng.random()
            rewards = [float(rng.random() < p) for _ in range(G)]
            adv = _population_z(rewards)
            if broken_from is not None and step >= broken_from and g == 1:
                adv = [a + 0.5 for a in adv]
            rows += [{"step": step, "prompt_id": prompt, "reward": r, "advantage": a} for r,
                     a in zip(rewards, adv, strict=True)]
    return rows


def reference(rows: list[dict]) -> dict[int, dict]:
    """Per step, in plain Python: groups = rows of one prompt_id; degenerate when their rewards are all equal."""
    steps: dict[int, dict[int, list[float]]] = {}
    for r in rows:
        steps.setdefault(r["step"], {}).setdefault(r["prompt_id"], []).append(r["reward"])
    out = {}
    for step, groups in steps.items():
        degenerate = sum(len(set(g)) == 1 for g in groups.values())
        flat = [x for g in groups.values() for x in g]
        out[step] = {"degenerate_rate": degenerate / len(groups), "reward_mean": sum(flat) / len(flat)}
    return out


def write_parquet(rows: list[dict], path: Path) -> Path:
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, path, row_group_size=37)  # row groups cut through steps
    return path


@pytest.mark.parametrize("broken_from", [None, BROKEN_FROM], ids=["healthy", "broken-from-13"])
def test_parquet_scan_matches_a_plain_count_and_dates_the_breach(broken_from, tmp_path, monkeypatch):
    """Degenerate rate and reward mean equal a plain count; a broken advantage column is reported from its first
    step."""
    monkeypatch.setattr(scan_parquet, "BATCH_ROWS", 50)  # record batches cut through steps too
    rows = make_rows(broken_from=broken_from)
    result = scan_rollouts(write_parquet(rows, tmp_path / "rollouts.parquet"), tmp_path / "scan", quiet=True,
                           group_size=G, estimator="population", report=False)
    assert result.format == "parquet" and result.steps == STEPS and result.advantages
    ref = reference(rows)
    records = read_jsonl(result.log)
    for record in records:
        m = record["metrics"]
        assert m["grpo/groups/degenerate_rate"] == ref[record["step"]]["degenerate_rate"]
        assert m["grpo/reward/mean"] == pytest.approx(ref[record["step"]]["reward_mean"], rel=1e-12)
    broken_steps = [r["step"] for r in records if any(v["invariant"] == "zero_group_mean" for v in r["violations"])]
    if broken_from is None:
        assert result.violations.by_invariant == {} and result.errors == 0
    else:
        assert broken_steps[0] == broken_from
        log = result.violations.by_invariant["zero_group_mean"]
        assert log.first_step == broken_from and log.error
        # the breach only counts in steps where the shifted group has reward variation
        assert set(broken_steps) <= set(range(broken_from, STEPS)) and result.errors >= 1


def test_a_folder_of_parquet_files_is_one_run(tmp_path):
    """Two files splitting the run (a step across the boundary) read as one run in name order."""
    rows = make_rows(broken_from=None)
    folder = tmp_path / "dump"
    folder.mkdir()
    cut = len(rows) // 2 + 3  # inside a step
    write_parquet(rows[:cut], folder / "part-2.parquet")
    write_parquet(rows[cut:], folder / "part-10.parquet")
    result = scan_rollouts(folder, tmp_path / "scan", quiet=True, group_size=G, report=False, tensorboard=False)
    assert result.steps == STEPS and result.rows == len(rows)


def test_jsonl_with_named_columns_and_consecutive_groups(tmp_path):
    """JSONL with other field names (--columns) and no group column: groups are G consecutive rows."""
    rows = make_rows(broken_from=None)
    path = tmp_path / "rollouts.jsonl"
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({"iteration": r["step"], "r": r["reward"], "a": r["advantage"]}) + "\n")
    from grpo_monitor.tools.scan import parse_columns

    result = scan_rollouts(path, tmp_path / "scan", quiet=True, group_size=G, report=False,
                           columns=parse_columns("step=iteration,reward=r,advantage=a"))
    ref = reference(rows)
    for record in read_jsonl(result.log):
        assert record["metrics"]["grpo/groups/degenerate_rate"] == ref[record["step"]]["degenerate_rate"]
    assert result.questions.records == {}  # no question column: nothing to name


def test_summed_reward_columns_skip_nulls(tmp_path):
    """reward=a+b sums the columns, skipping null; a row null in both is unscorable (NaN)."""
    path = tmp_path / "r.jsonl"
    rows = [{"step": 0, "group": "g", "a": 1.0, "b": None}, {"step": 0, "group": "g", "a": None, "b": None},
            {"step": 0, "group": "g", "a": 0.5, "b": 0.25}, {"step": 0, "group": "g", "a": None, "b": 2.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from grpo_monitor.tools.scan import parse_columns

    result = scan_rollouts(path, tmp_path / "scan", quiet=True, report=False, tensorboard=False,
                           columns=parse_columns("reward=a+b"))
    m = read_jsonl(result.log)[0]["metrics"]
    assert m["grpo/rows/unscorable"] == 1
    assert m["grpo/reward/mean"] == pytest.approx((1.0 + 0.75 + 2.0) / 3)


def test_your_own_estimator_as_the_reference(tmp_path):
    """--estimator MODULE:FUNCTION: your function replayed on the recorded rewards; the shifted group is an error
    from the step it started, nothing before."""
    module = tmp_path / "mine.py"
    module.write_text("def z(r):\n"
                      "    c = r - r.mean(1, keepdim=True)\n"
                      "    return c / (((c * c).mean(1, keepdim=True)).sqrt() + 1e-6)\n")
    path = tmp_path / "rollouts.jsonl"
    with open(path, "w") as f:
        for r in make_rows():
            f.write(json.dumps(r) + "\n")
    spec = f"{module}:z"
    result = scan_rollouts(path, tmp_path / "scan", quiet=True, group_size=G, report=False, tensorboard=False,
                           estimator=spec)
    records = read_jsonl(result.log)
    broken = sorted({r["step"] for r in records for v in r.get("violations", []) if v["severity"] == "error"})
    assert broken and broken[0] == BROKEN_FROM
    assert all(r["convention"] == spec for r in records if r["step"] < BROKEN_FROM and "convention" in r)
