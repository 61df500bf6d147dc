"""Run health on a real TRL GRPOTrainer (tiny local Llama, CPU): the stalls the issue names are named within ten
optimizer steps, healthy configurations are not, an induced entropy collapse is named before its floor, the
question export round-trips through a dataset filter, and halt_on stops train() with RunStalled."""

from __future__ import annotations

import statistics

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow  # real trainers: about four minutes on 2 cores

from grpo_monitor import MonitorConfig, RunStalled  # noqa: E402
from grpo_monitor.health import questions  # noqa: E402
from health_scenarios import LEARNABLE, SATURATED, run  # noqa: E402


def _opened(reports) -> dict[str, int]:
    """First step each finding opened at."""
    out: dict[str, int] = {}
    for r in reports:
        for f in r.health.opened if r.health else ():
            out.setdefault(f.name, r.step)
    return out


def test_a_mostly_constant_reward_is_named_degenerate_dominated_saturated(tiny_model_path, tmp_path):
    """90% of prompts get reward 1.0 whatever the completion: named within 10 steps, saturated, not unsolved."""
    _, reports = run(tiny_model_path, tmp_path, "degenerate", 10)
    degenerate = statistics.mean(r.metrics["grpo/groups/degenerate_rate"] for r in reports)
    assert degenerate >= 0.8, "the scenario's precondition: at least 80% of groups degenerate"
    opened = _opened(reports)
    assert opened["degenerate_dominated"] <= 10
    found = next(f for r in reports for f in r.health.active if f.name == "degenerate_dominated")
    assert found.evidence["saturated_rate"] > found.evidence["unsolved_rate"]
    assert any("num_generations" in remedy for remedy in found.remedies)  # TRL's own options


def test_a_truncated_masked_run_is_named_truncation_and_zero_gradient(tiny_model_path, tmp_path):
    """max_completion_length=2 with mask_truncated_completions=True: both findings within 10 steps."""
    _, reports = run(tiny_model_path, tmp_path, "truncated", 10)
    truncated = statistics.mean(r.metrics["grpo/rows/truncated_rate"] for r in reports)
    assert truncated >= 0.9, "the scenario's precondition: at least 90% of completions truncated"
    opened = _opened(reports)
    assert opened["truncation_dominated"] <= 10 and opened["zero_gradient_steps"] <= 10
    found = next(f for r in reports for f in r.health.active if f.name == "truncation_dominated")
    assert found.evidence["truncated_rows_masked"] == 1.0
    assert (tmp_path / "health.json").is_file()


@pytest.mark.parametrize("scenario", ["healthy-group-grpo", "healthy-batch-dapo", "healthy-none-drgrpo"])
def test_healthy_configurations_are_not_stalled(scenario, tiny_model_path, tmp_path):
    """scale_rewards group/batch/none with loss_type grpo/dapo/dr_grpo: never stalled, never degenerate- or
    truncation-dominated (the 70-step runs: docs/health.md)."""
    _, reports = run(tiny_model_path, tmp_path, scenario, 12)
    assert max(r.health.status for r in reports) < 2
    active = {f.name for r in reports for f in r.health.active}
    assert not active & {"degenerate_dominated", "truncation_dominated"}


def test_an_induced_entropy_collapse_is_named_before_its_floor(tiny_model_path, tmp_path):
    """learning_rate=0.1 (100x the tests' 1e-3): entropy_collapse opens with finite steps to the floor, above it."""
    config = MonitorConfig(entropy_floor=0.05)
    _, reports = run(tiny_model_path, tmp_path, "collapse", 12, config=config)
    step = _opened(reports).get("entropy_collapse")
    assert step is not None
    report = next(r for r in reports if r.step == step)
    found = next(f for f in report.health.active if f.name == "entropy_collapse")
    assert 0 <= found.figure < float("inf") and found.evidence["entropy"] > 0.05
    first = reports[0].metrics["grpo/entropy/mean"]
    assert report.metrics["grpo/entropy/mean"] < 0.7 * first  # the entropy TRL computed really fell


def test_dropping_the_exported_saturated_questions_raises_effective_prompts(tiny_model_path, tmp_path):
    """Epoch 1 on half saturated prompts; the export lists exactly those; epoch 2 without them has more effective
    prompts per step."""
    prompts = [p for pair in zip(SATURATED[:4], LEARNABLE, strict=True) for p in pair]
    _, first = run(tiny_model_path, tmp_path / "e1", "degenerate", 8, prompts=prompts)
    saturated = set(questions(tmp_path / "e1" / "grpo.jsonl", "saturated"))
    assert saturated == set(SATURATED[:4])  # the reward is 1.0 whatever the completion for exactly these
    kept = [p for p in prompts if p not in saturated]
    _, second = run(tiny_model_path, tmp_path / "e2", "degenerate", 4, prompts=kept)
    before = statistics.mean(r.metrics["grpo/groups/effective_prompts"] for r in first)
    after = statistics.mean(r.metrics["grpo/groups/effective_prompts"] for r in second)
    assert after > before


def test_halt_on_stalled_stops_train_with_run_stalled(tiny_model_path, tmp_path):
    """halt_on=("stalled",) on the truncated run: train() raises RunStalled naming the finding, before max_steps."""
    with pytest.raises(RunStalled) as caught:
        run(tiny_model_path, tmp_path, "truncated", 20, config=MonitorConfig(halt_on=("stalled",)))
    names = {f.name for f in caught.value.findings}
    assert names & {"truncation_dominated", "zero_gradient_steps"}
    assert all(f.since <= 10 for f in caught.value.findings)
