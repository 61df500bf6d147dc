"""The report's asynchronous and MoE figures (the sequence ratio with its clip band, routing
agreement per layer) drawn from a real monitor's JSONL log: present, legible, and their captions state its numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.sinks.jsonl import JSONLSink
from grpo_monitor.tools.reporting import build_report, load_run
from grpo_monitor.tools.reporting.figures import FIGURES, OFFPOLICY_FIGURES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_pixels import hidden  # noqa: E402

G, PROMPTS, T, L, K, E = 4, 8, 6, 4, 2, 8
STEPS = 10


def _step(mon: GRPOMonitor, gen: torch.Generator, step: int) -> None:
    """An asynchronous MoE step: rows of ages 0-3, a quarter dropped (hard rows more often), ratios drifting with
    the step, the engine disagreeing on layer 2 more and more."""
    rewards = (torch.rand(PROMPTS, G, generator=gen) < 0.5).double()
    dropped = torch.rand(PROMPTS, G, generator=gen) < 0.1 + 0.3 * (rewards == 0)
    mon.observe_generation(rewards, dropped=dropped, lengths=torch.randint(5, 50, (PROMPTS, G), generator=gen))
    mon.observe_rollout(rewards, policy_version=step - torch.randint(0, 4, (PROMPTS * G,), generator=gen),
                        trained_version=step)
    mask = (torch.rand(PROMPTS * G, T, generator=gen) < 0.9).float()
    old = -torch.rand(PROMPTS * G, T, generator=gen)
    lp = old + (0.02 + 0.02 * step) * torch.randn(PROMPTS * G, 1, generator=gen)
    routed = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(PROMPTS * G * T * L)])
    routed = routed.reshape(PROMPTS * G, T, L, K)
    engine = routed.clone()
    flip = torch.rand(PROMPTS * G, T, L, generator=gen) < torch.tensor([0.02, 0.03, 0.02 + 0.04 * step, 0.02])
    engine[flip] = (engine[flip] + 1) % E
    mon.observe_loss(mask=mask, logprobs=lp, old_logprobs=old, routed_experts=routed, sampler_routed_experts=engine)
    mon.end_step()


@pytest.fixture(scope="module")
def async_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("async")
    mon = GRPOMonitor(MonitorConfig(group_size=G, clip_range=(0.1, 0.15)), sinks=[JSONLSink(out / "monitor.jsonl")])
    mon.declare_integration("api", {"importance_sampling_level": "sequence"})  # a GSPO loss: the ratio figure
    gen = torch.Generator().manual_seed(3)
    for step in range(STEPS):
        _step(mon, gen, step)
    mon.close()
    return out


def test_the_three_figures_are_drawn_and_legible(async_run):
    """Each off-policy figure is drawn from the log, and every legend entry's series shows."""
    run = load_run(async_run)
    for spec in OFFPOLICY_FIGURES:
        fig = spec.draw(run)
        assert fig is not None, spec.name
        assert hidden(fig) == [], spec.name


def test_the_page_holds_them_and_a_plain_run_has_no_note(async_run, tmp_path):
    """The report writes the three PNGs; their captions state the log's numbers."""
    build_report(async_run)
    pngs = {p.stem for p in (async_run / "plots").glob("*.png")}
    assert {"seq_ratio", "routing", "offpolicy"} <= pngs
    page = (async_run / "report.html").read_text()
    run = load_run(async_run)
    last = run.series("grpo/moe/agreement")[-1]
    assert f"{last:.2%}" in page and "clip band [1-0.1, 1+0.15]" in page
    assert not {f.name for f in OFFPOLICY_FIGURES} & {f.name for f in FIGURES}


def test_layer_matrix_holds_the_logged_histograms(async_run):
    """The per-layer panel's matrix is the logged agreement_by_layer, layer by step; layer 2 falls."""
    from grpo_monitor.tools.reporting.plots_offpolicy import layer_matrix

    run = load_run(async_run)
    m = layer_matrix(run)
    assert m.shape == (L, STEPS)
    assert m[:, 0].tolist() == pytest.approx(run.histograms["grpo/moe/agreement_by_layer"][0])
    assert m[2, -1] < m[2, 0] and m[2, -1] == pytest.approx(run.series("grpo/moe/agreement_layer_min")[-1])
