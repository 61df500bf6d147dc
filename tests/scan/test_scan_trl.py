"""A real TRL GRPOTrainer run (tiny model, CPU) logging completions to an offline W&B run, scanned afterwards.

The scan of the W&B run folder (and of TRL's own completions/*.parquet) must give, step by
step, the degenerate rate and the mean reward the live monitor attached to the same run
logged, and the ones a plain-Python count over the table files gives.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("wandb")
pytestmark = pytest.mark.slow  # a real trainer: about half a minute on 2 cores

from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from grpo_monitor.sinks import JSONLSink, read_jsonl  # noqa: E402
from grpo_monitor.tools.scan import scan_rollouts  # noqa: E402
from tiny_trl import make_trainer  # noqa: E402

G = 4


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory, tiny_model_path):
    """(W&B dir, TRL output dir, live monitor log) of a 4-step run with log_completions=True and report_to wandb."""
    import wandb

    root = tmp_path_factory.mktemp("trl-run")
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_DIR", str(root))
    mp.setenv("WANDB_SILENT", "true")
    wandb.teardown()
    try:
        trainer = make_trainer(tiny_model_path, root / "out", max_steps=4, seed=3, log_completions=True,
                               report_to=["wandb"], num_completions_to_print=0)
        gtrl.attach(trainer, sinks=[JSONLSink(root / "live.jsonl")])
        trainer.train()
        wandb.finish()
    finally:
        wandb.teardown()
        mp.undo()
    return root, root / "out", root / "live.jsonl"


def _tables(wandb_root: Path) -> list[dict]:
    """The completions tables as TRL logged them, read with plain json (one dict of columns per table).

    TRL's last ``log`` call (the train summary) logs the last table a second time.
    """
    files = sorted(wandb_root.glob("wandb/offline-run-*/files/media/table/completions_*.table.json"),
                   key=lambda p: int(p.name.split("_")[1]))
    out = []
    for path in files:
        table = json.loads(path.read_text())
        out.append({c: [row[i] for row in table["data"]] for i, c in enumerate(table["columns"])})
    return out


def _reference(table: dict) -> dict:
    """Degenerate rate, effective prompts, mean reward and unscorable rows of one table, in plain Python.

    A row's reward is the sum of the reward columns TRL logged (frac_a, space), skipping None/NaN;
    None everywhere is unscorable. Rows of a group are G consecutive rows of one prompt (TRL's
    RepeatSampler), so a prompt drawn twice in a step is two groups.
    """
    def number(v):
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    rewards = []
    for a, b in zip(table["frac_a"], table["space_reward"], strict=True):
        parts = [x for x in (number(a), number(b)) if x is not None]
        rewards.append(sum(parts) if parts else None)
    degenerate = total = 0
    for start in range(0, len(rewards), G):
        assert len(set(table["prompt"][start:start + G])) == 1
        scorable = [r for r in rewards[start:start + G] if r is not None]
        total += 1
        degenerate += len(set(scorable)) <= 1
    scorable = [r for r in rewards if r is not None]
    return {"degenerate_rate": degenerate / total, "effective": total - degenerate,
            "reward_mean": sum(scorable) / len(scorable), "unscorable": len(rewards) - len(scorable)}


def test_wandb_scan_matches_the_live_monitor_and_a_plain_count(trl_run, tmp_path):
    """Per step, the scan's degenerate rate and mean reward equal the live monitor's and a plain-Python count's."""
    wandb_root, _, live_log = trl_run
    result = scan_rollouts(wandb_root, tmp_path / "scan", quiet=True)
    assert result.format == "trl-wandb" and result.steps == 4 and result.advantages
    assert result.config["group_size"] == G and result.config["std_convention"] == "trl.group"  # from the run's config
    live = {r["step"]: r["metrics"] for r in read_jsonl(live_log)}
    scanned = {r["step"]: r["metrics"] for r in read_jsonl(result.log)}
    tables = _tables(wandb_root)
    assert [t["step"][0] for t in tables] == [1, 2, 3, 4, 4] and tables[-1] == tables[-2]
    tables = tables[:-1]
    assert sorted(scanned) == sorted(live) == [1, 2, 3, 4]
    assert any("step 4 logged the same generation batch" in n for n in result.notes)
    for table in tables:
        step, ref = table["step"][0], _reference(table)
        m = scanned[step]
        assert m["grpo/groups/degenerate_rate"] == live[step]["grpo/groups/degenerate_rate"] == ref["degenerate_rate"]
        assert m["grpo/groups/effective_prompts"] == ref["effective"]
        assert m["grpo/reward/mean"] == pytest.approx(live[step]["grpo/reward/mean"], rel=1e-12)
        assert m["grpo/reward/mean"] == pytest.approx(ref["reward_mean"], rel=1e-6)  # float32 sums vs Python's
        assert m["grpo/rows/unscorable"] == ref["unscorable"]
    assert sum(_reference(t)["unscorable"] for t in tables) > 0, "seed 3 should give a '?' completion"
    assert result.violations.by_invariant == {}, "TRL's own advantages keep every invariant"
    assert result.report is not None and result.report.is_file()


def test_trl_parquet_scan_equals_the_wandb_scan(trl_run, tmp_path):
    """TRL's completions/*.parquet (same run, group size inferred) scan to the same metrics as its W&B tables."""
    wandb_root, out_dir, _ = trl_run
    from_wandb = scan_rollouts(wandb_root, tmp_path / "w", quiet=True, report=False, tensorboard=False)
    from_parquet = scan_rollouts(out_dir, tmp_path / "p", quiet=True, report=False, tensorboard=False,
                                 estimator="bessel")
    assert from_parquet.format == "trl-parquet" and from_parquet.config["group_size"] == G  # inferred from the rows
    w = {r["step"]: r["metrics"] for r in read_jsonl(from_wandb.log)}
    p = {r["step"]: r["metrics"] for r in read_jsonl(from_parquet.log)}
    assert sorted(w) == sorted(p)
    for step in w:
        for key in ("grpo/groups/degenerate_rate", "grpo/reward/mean", "grpo/rows/unscorable", "grpo/adv/mean"):
            assert p[step][key] == pytest.approx(w[step][key], rel=1e-12, abs=1e-15), (step, key)


@pytest.mark.parametrize("prefetch", [False, True], ids=["in-process", "prefetch"])
def test_one_trl_parquet_file_is_one_step(trl_run, tmp_path, prefetch):
    """A single completions_<step>.parquet scans as that step alone, read in process or by the child reader."""
    _, out_dir, live_log = trl_run
    result = scan_rollouts(out_dir / "completions" / "completions_00002.parquet", tmp_path / "one", quiet=True,
                           report=False, tensorboard=False, prefetch=prefetch)
    assert result.format == "trl-parquet" and (result.first_step, result.last_step, result.rows) == (2, 2, 8)
    live = {r["step"]: r["metrics"] for r in read_jsonl(live_log)}
    assert read_jsonl(result.log)[0]["metrics"]["grpo/groups/degenerate_rate"] == live[2]["grpo/groups/degenerate_rate"]


def test_wandb_scan_reports_trls_logged_entropy_and_truncation(trl_run, tmp_path):
    """The scanned W&B run also holds TRL's logged train/entropy and train/completions/clipped_ratio: the scan
    reports them as grpo/entropy/mean and grpo/rows/truncated_rate, equal to what the live monitor computed at
    the same step from TRL's own entropies and is_truncated tensors."""
    wandb_root, _, live_log = trl_run
    result = scan_rollouts(wandb_root, tmp_path / "scan", quiet=True, report=False, tensorboard=False)
    live = {r["step"]: r["metrics"] for r in read_jsonl(live_log)}
    scanned = {r["step"]: r["metrics"] for r in read_jsonl(result.log)}
    assert result.logged_keys == {"train/completions/clipped_ratio": "grpo/rows/truncated_rate",
                                  "train/entropy": "grpo/entropy/mean"}
    for step in (1, 2, 3, 4):
        assert scanned[step]["grpo/rows/truncated_rate"] == pytest.approx(live[step]["grpo/rows/truncated_rate"],
                                                                          abs=1e-7)
        assert scanned[step]["grpo/entropy/mean"] == pytest.approx(live[step]["grpo/entropy/mean"], rel=1e-5)
