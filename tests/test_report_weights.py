"""The report's loss-weights figure, from a plain loop's JSONL log (real matplotlib, no mocks).

The loop aggregates its loss by hand (per-response means, or token means): each live response's
``|weight| / |advantage|`` is then ``1 / (k B)`` or ``L / (k N)``, written out below. The figure
must show those points, the declared aggregation's expected slope (solid) and, when the loss does
not follow the declaration, the fitted one (dashed); right, every step's per-question shares.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from grpo_monitor.sinks.jsonl import JSONLSink  # noqa: E402
from grpo_monitor.tools.reporting import PAGE, build_report, load_run  # noqa: E402

draw_weights = next(f for f in PAGE if f.name == "weights").draw  # the declared figure (catalog/family_weights.py)

G, Q, T, MICRO, STEPS = 4, 3, 12, 2, 3


def _batch(step: int):
    g = torch.Generator().manual_seed(step)
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).reshape(-1)
    lengths = torch.randint(2, T + 1, (Q * G,), generator=g)
    return rewards, adv, (torch.arange(T)[None] < lengths[:, None]).float(), lengths


def _log(out, declared: str, aggregate: str) -> np.ndarray:
    """STEPS steps of the loop logged to ``out``; (length, |weight| / |A|) of every live response, by hand,
    scaled to mean 1 within each step (as the figure shows them)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, loss_aggregation=declared, on_violation="warn"),
                      sinks=[JSONLSink(out / "grpo.jsonl")])
    policy = torch.nn.Linear(T, T)
    expected = []
    for step in range(STEPS):
        points: list[tuple[float, float]] = []
        rewards, adv, mask, lengths = _batch(step)
        mon.observe_rollout(rewards, advantages=adv.reshape(Q, G))
        for rows in torch.arange(Q * G).chunk(MICRO):
            lp = torch.nn.functional.logsigmoid(policy(torch.eye(T)[rows % T]))
            m, a = mask[rows], adv[rows]
            per_token = -a[:, None] * torch.exp(lp - lp.detach()) * m
            live = [float(n) for n, x in zip(lengths[rows], a, strict=True) if x]
            if aggregate == "token_mean":
                loss = per_token.sum() / m.sum() / MICRO
                points += [(n, n / (MICRO * float(m.sum()))) for n in live]
            else:
                loss = (per_token.sum(-1) / m.sum(-1)).mean() / MICRO
                points += [(n, 1.0 / (MICRO * len(rows))) for n in live]
            mon.observe_loss(mask=m, advantages=a, logprobs=lp, loss=loss, rows=rows)
            loss.backward()
        mon.end_step()
        step_points = np.array(points)
        expected.append(step_points / [1.0, step_points[:, 1].mean()])
    mon.close()
    return np.concatenate(expected)


def _sorted(points: np.ndarray) -> np.ndarray:
    return points[np.lexsort((points[:, 1], points[:, 0]))]


def _slope(x, y) -> float:
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


def _lines(fig):
    ax = fig.axes[0]
    return {ln.get_label(): (_slope(ln.get_xdata(), ln.get_ydata()), ln.get_linestyle()) for ln in ax.get_lines()}


def test_healthy_run_draws_the_declared_expectation_through_the_points(tmp_path):
    """Per-response means declared and used: flat points (every response weighs 1 / (k B)), one solid slope-0
    line; every step's per-question shares in the histogram (2 live questions a step, the constant one at 0)."""
    expected = _log(tmp_path, "trl.grpo", "seq_mean_token_mean")
    fig = draw_weights(load_run(tmp_path))
    points = np.asarray(fig.axes[0].collections[0].get_offsets())
    np.testing.assert_allclose(_sorted(points), _sorted(expected), rtol=1e-6)
    np.testing.assert_allclose(points[:, 1], 1.0, rtol=1e-6)  # all equal
    assert _lines(fig) == {"declared trl.grpo (seq_mean_token_mean): weight ~ length^0": (pytest.approx(0, abs=1e-9),
                                                                                        "-")}
    counts = [p.get_height() for p in fig.axes[1].patches]
    assert sum(counts) == 2 * STEPS
    assert build_report(tmp_path).is_file() and (tmp_path / "plots" / "weights.png").is_file()


def test_a_loss_off_its_declaration_shows_both_lines(tmp_path):
    """Token means under a declared per-response mean: the points rise with length (slope 1, by hand), the
    declared line stays flat and the fitted token_mean line is drawn dashed beside it."""
    with pytest.warns(RuntimeWarning, match="invariant 'loss_aggregation' broken"):
        expected = _log(tmp_path, "seq_mean_token_mean", "token_mean")
    fig = draw_weights(load_run(tmp_path))
    points = np.asarray(fig.axes[0].collections[0].get_offsets())
    np.testing.assert_allclose(_sorted(points), _sorted(expected), rtol=1e-6)
    assert _slope(points[:, 0], points[:, 1]) > 0.5  # long responses weigh more
    lines = _lines(fig)
    assert lines["declared seq_mean_token_mean: weight ~ length^0"] == (pytest.approx(0, abs=1e-9), "-")
    assert lines["fitted token_mean: weight ~ length^1"] == (pytest.approx(1.0), "--")
