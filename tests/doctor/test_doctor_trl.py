"""`grpo-monitor doctor` on real TRL GRPOTrainer runs (tiny model, CPU, 12 optimizer steps), read from the run's
offline W&B folder and its TensorBoard events: a saturated reward is named degenerate_dominated (saturated), a run
truncated under mask_truncated_completions=True truncation_dominated and zero_gradient_steps, each within the first
10 steps; three healthy configurations get neither and are never stalled. The references are TRL's own files read
in plain Python: the completions parquet (degenerate groups counted by hand) and TensorBoard's
completions/clipped_ratio.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("wandb")
pytest.importorskip("tensorboard")
pytest.importorskip("pyarrow")
pytestmark = pytest.mark.slow  # five real trainer runs: about four minutes on 2 cores

from trl_runs import HEALTHY, record_run  # noqa: E402

from grpo_monitor.tools.cli import main  # noqa: E402
from grpo_monitor.tools.doctor import diagnose, read_recording  # noqa: E402

STEPS, G = 12, 4
#: The run's recordings doctor reads: the W&B offline run, TensorBoard events, TRL's output folder (the completions
#: parquet and the TensorBoard events under runs/).
SOURCES = ("wandb", "tensorboard", "output")


@pytest.fixture(scope="module")
def runs(tiny_model_path, tmp_path_factory) -> dict[str, Path]:
    """name -> the folder of the run recorded by tests/doctor/trl_runs.py."""
    root = tmp_path_factory.mktemp("doctor-trl")
    return {name: record_run(name, tiny_model_path, root / name, steps=STEPS) for name in
            ("saturated", "truncated", *HEALTHY)}


def _source(run: Path, kind: str) -> Path:
    if kind in ("wandb", "output"):
        return run / ("wandb" if kind == "wandb" else "out")
    (events,) = {p.parent for p in (run / "out").rglob("events.out.tfevents*")}
    return events


def _degenerate_share(run: Path) -> float:
    """Degenerate groups over the run, counted by hand in TRL's completions parquet (G consecutive rows a group)."""
    import pyarrow.parquet as pq

    degenerate = total = 0
    for path in sorted((run / "out" / "completions").glob("completions_*.parquet")):
        table = pq.read_table(path).to_pydict()
        rewards = [sum(v for k, v in zip(table, row, strict=True) if k not in ("step", "prompt", "completion",
                   "advantage") and v is not None) for row in zip(*table.values(), strict=True)]
        for start in range(0, len(rewards), G):
            total += 1
            degenerate += len(set(rewards[start:start + G])) == 1
    return degenerate / total


def _clipped_ratio(run: Path) -> float:
    """The mean of TRL's completions/clipped_ratio as TensorBoard recorded it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(_source(run, "tensorboard")), size_guidance={"scalars": 0})
    acc.Reload()
    values = [e.value for e in acc.Scalars("train/completions/clipped_ratio")]
    return sum(values) / len(values)


def _findings(run: Path, kind: str):
    return {f.name: f for f in diagnose(read_recording(_source(run, kind))).findings}


@pytest.mark.parametrize("kind", SOURCES)
def test_a_saturated_reward_is_named_degenerate_dominated(runs, kind):
    """>= 80 % degenerate groups (by hand): degenerate_dominated opens within 10 steps; W&B's tables say saturated."""
    assert _degenerate_share(runs["saturated"]) >= 0.8
    found = _findings(runs["saturated"], kind)
    assert "degenerate_dominated" in found and found["degenerate_dominated"].first_opened <= 10
    evidence = found["degenerate_dominated"].last["evidence"]
    if kind != "tensorboard":  # exact counts from the completions tables: the split is known
        assert evidence["saturated_rate"] >= 0.8 and evidence["unsolved_rate"] == 0.0
        assert "saturated" in found["degenerate_dominated"].last["message"]


def test_only_trl_scalar_is_said_so(runs):
    """From TensorBoard the degenerate share is TRL's frac_reward_zero_std, and doctor says so; from W&B it is exact."""
    scalars = read_recording(_source(runs["saturated"], "tensorboard"))
    tables = read_recording(_source(runs["saturated"], "wandb"))
    assert scalars.groups_from == "trl scalar" and any("frac_reward_zero_std" in n for n in scalars.notes)
    assert tables.groups_from == "rollouts" and not any("frac_reward_zero_std, not" in n for n in tables.notes)


@pytest.mark.parametrize("kind", SOURCES)
def test_masked_truncation_is_named_truncation_dominated_and_zero_gradient(runs, kind):
    """>= 90 % truncated under mask_truncated_completions=True: both findings open within 10 steps."""
    assert _clipped_ratio(runs["truncated"]) >= 0.9
    found = _findings(runs["truncated"], kind)
    for name in ("truncation_dominated", "zero_gradient_steps"):
        assert name in found and found[name].first_opened <= 10, (name, sorted(found))
    assert found["truncation_dominated"].last["evidence"]["truncated_rows_masked"] == 1.0
    assert any("max_completion_length" in r for r in found["truncation_dominated"].last["remedies"])


@pytest.mark.parametrize("kind", [*SOURCES, "live"])
@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_run_is_never_stalled(runs, name, kind):
    """A reward that varies within groups, room to stop (scale_rewards group / batch / none with loss_type grpo /
    dapo / dr_grpo): no stalled status, neither waste finding, from every recording of the run."""
    source = runs[name] / "live" / "monitor.jsonl" if kind == "live" else _source(runs[name], kind)
    diagnosis = diagnose(read_recording(source))
    assert diagnosis.worst_status < 2
    assert not {f.name for f in diagnosis.findings} & {"degenerate_dominated", "truncation_dominated"}


@pytest.mark.parametrize("name, code", [("saturated", 1), ("truncated", 1), ("healthy", 0)],
                         ids=["saturated", "truncated", "healthy"])
def test_fail_on_stalled_sets_the_exit_code(runs, name, code, capsys):
    """`doctor --fail-on stalled --json` exits 1 on the stalled runs, 0 on the healthy one; the JSON says why."""
    assert main(["doctor", str(_source(runs[name], "tensorboard")), "--fail-on", "stalled", "--json"]) == code
    record = json.loads(capsys.readouterr().out)
    assert record["worst_status_name"] == ("stalled" if code else record["worst_status_name"])
    assert "prompt_supply" in record["unsupported"]  # TensorBoard holds no per-question history
