"""Measured loss weights against verl's own ``agg_loss`` and an independent float64 autograd reference.

The loop below is a plain torch loop: a linear "policy" gives per-token log-probs, the loss is
verl 0.9.1's ``core_algos.agg_loss`` over ``-A * ratio`` (verl's vanilla policy loss at ratio 1),
split into micro-batches as verl's actor does (per-step denominators through
``global_batch_info``) or divided by the number of micro-batches (per-micro-batch
denominators). The reference recomputes every micro-batch's loss in float64 with the same
verl function and differentiates it with ``torch.autograd.grad``; the metrics are then
computed from those weights with plain numpy (no code shared with the monitor).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.stats.aggregations import AGGREGATIONS, resolve

agg_loss = pytest.importorskip("verl.trainer.ppo.core_algos").agg_loss

VERL_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
G, B, T, MICRO = 4, 3, 9, 3  # 3 questions of 4 responses, 12 rows in 3 micro-batches of 4


def _batch(seed: int = 0, residue: bool = False):
    """Rewards (B, G), float32 z-score advantages with eps 1e-4, ragged masks, a row permutation.

    ``residue``: the constant group holds 0.7 and the advantage TRL's float32 z-score gives eight
    rewards of 0.7 (mean off by an ulp, divided by std + 1e-4: +6e-4 each), a stabilizer's residue."""
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(B, G, generator=g) > 0.5).float()
    rewards[0] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    rewards[1] = 0.7 if residue else 1.0  # a constant (degenerate) group
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    if residue:
        eight = torch.full((8,), 0.7)
        adv[1] = ((eight - eight.mean()) / (eight.std() + 1e-4))[:G]
    lengths = torch.randint(1, T + 1, (B * G,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    order = torch.randperm(B * G, generator=g)  # micro-batches mix questions, as a shuffled trainer does
    return rewards, adv.reshape(-1), mask, order


def _logprobs(rows: torch.Tensor, dtype: torch.dtype, weight: torch.Tensor) -> torch.Tensor:
    """Per-token log-probs of a tiny linear policy (the graph reaches ``weight``)."""
    feats = torch.sin(torch.arange(T, dtype=dtype)[None, :] * (rows[:, None].to(dtype) + 1.0))
    return torch.nn.functional.logsigmoid(feats * weight.to(dtype))


def _verl_loss(mode: str, logp, adv, mask, scope: str, micro_batches: int, totals: dict):
    """verl's loss of one micro-batch: vanilla PPO at ratio 1, aggregated by ``agg_loss``."""
    ratio = torch.exp(logp - logp.detach())
    loss_mat = -adv[:, None] * ratio
    if scope == "step":  # verl's actor: the mini-batch's counts in global_batch_info
        return agg_loss(loss_mat, mask, mode, dp_size=1, batch_num_tokens=totals["tokens"],
                        global_batch_size=totals["rows"])
    return agg_loss(loss_mat, mask, mode) / micro_batches


def _run(mode: str, scope: str, declared: str = "auto", residue: bool = False, **cfg):
    """One step of the plain loop under the monitor; returns the report and the float64 reference weights."""
    rewards, adv, mask, order = _batch(residue=residue)
    weight = torch.tensor(0.7, requires_grad=True)
    mon = GRPOMonitor(MonitorConfig(group_size=G, loss_aggregation=declared, strict=True, **cfg))
    mon.observe_rollout(rewards, advantages=adv.reshape(B, G))
    totals = {"tokens": mask.sum(), "rows": float(B * G)}
    ref_w = []
    for rows in order.chunk(MICRO):
        logp = _logprobs(rows, torch.float32, weight)
        loss = _verl_loss(mode, logp, adv[rows], mask[rows], scope, MICRO, totals)
        mon.observe_loss(mask=mask[rows], advantages=adv[rows], logprobs=logp, loss=loss, rows=rows)
        loss.backward()
        logp64 = _logprobs(rows, torch.float64, weight.detach().double()).requires_grad_(True)
        totals64 = {"tokens": mask.double().sum(), "rows": float(B * G)}
        loss64 = _verl_loss(mode, logp64, adv[rows].double(), mask[rows].double(), scope, MICRO, totals64)
        ref_w.append((rows, torch.autograd.grad(loss64, logp64)[0]))
    return mon.end_step(), ref_w, (rewards, adv, mask)


def _reference_metrics(ref_w, rewards, mask) -> dict[str, float]:
    """The grpo/weights/ shares from float64 weights, written out directly."""
    rows = torch.cat([r for r, _ in ref_w]).numpy()
    w = torch.cat([x for _, x in ref_w]).numpy()
    valid = mask.numpy()[rows] > 0
    per_row = np.where(valid, np.abs(w), 0.0).sum(1)
    share = per_row / per_row.sum()
    question = rows // G
    q_share = np.array([share[question == q].sum() for q in range(B)])
    degenerate = np.array([len(set(rewards[q].tolist())) == 1 for q in range(B)])
    lengths = valid.sum(1)
    longest = np.argsort(-lengths, kind="stable")[: len(rows) // 4]
    return {
        "grpo/weights/effective_responses": 1 / np.sum(share ** 2),
        "grpo/weights/effective_questions": 1 / np.sum(q_share ** 2),
        "grpo/weights/top_question_share": q_share.max(),
        "grpo/weights/degenerate_share": q_share[degenerate].sum(),
        "grpo/weights/long_quarter_share": share[longest].sum(),
    }


@pytest.mark.parametrize("scope", ["step", "micro_batch"])
@pytest.mark.parametrize("mode", VERL_MODES)
def test_each_verl_mode_is_identified_and_its_weights_match_float64(mode, scope):
    """Every verl loss_agg_mode, per-step or per-micro-batch denominators: fitted, and the shares equal float64's."""
    report, ref_w, (rewards, _, mask) = _run(mode, scope)
    name, _ = resolve(mode)
    assert report.metrics["grpo/weights/aggregation_id"] == AGGREGATIONS[name].index
    assert report.metrics["grpo/weights/measured"] == 1.0
    for key, want in _reference_metrics(ref_w, rewards, mask).items():
        assert report.metrics[key] == pytest.approx(want, rel=1e-5, abs=1e-9), key
    slope = report.metrics["grpo/weights/length_slope"]
    assert slope == pytest.approx(0.0 if AGGREGATIONS[name].per_length else 1.0, abs=1e-5)


@pytest.mark.parametrize("mode", VERL_MODES)
def test_declared_verl_mode_passes_and_a_wrong_one_is_loss_aggregation(mode):
    """Declaring verl's own name is quiet; declaring another aggregation stops the step with both weights shown."""
    _run(mode, "step", declared=mode)  # no violation
    wrong = "seq-mean-token-mean" if mode != "seq-mean-token-mean" else "token-mean"
    with pytest.raises(InvariantViolation) as err:
        _run(mode, "step", declared=wrong)
    v = err.value.violations[0]
    assert v.invariant == "loss_aggregation"
    assert "measured w" in v.observed and "expected" in v.observed


@pytest.mark.parametrize("factor, declared_factor", [(64, 64), (64, 4096)], ids=["same-factor", "other-factor"])
def test_verl_fixed_loss_scale_factor_is_the_constant_normalizer(factor, declared_factor):
    """verl's seq-mean-token-sum-norm with a fixed loss_scale_factor (Dr. GRPO), declared through
    integrations.verl.loss_config: quiet with the factor agg_loss divides by, loss_aggregation with another."""
    from grpo_monitor.integrations.verl import loss_config

    rewards, adv, mask, order = _batch()
    cfg = loss_config({"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": declared_factor})
    mon = GRPOMonitor(MonitorConfig(group_size=G, strict=True, **cfg))
    mon.observe_rollout(rewards, advantages=adv.reshape(B, G))
    weight = torch.tensor(0.7, requires_grad=True)
    for rows in order.chunk(MICRO):
        logp = _logprobs(rows, torch.float32, weight)
        loss = agg_loss(-adv[rows, None] * torch.exp(logp - logp.detach()), mask[rows], "seq-mean-token-sum-norm",
                        global_batch_size=float(B * G), loss_scale_factor=factor)
        mon.observe_loss(mask=mask[rows], advantages=adv[rows], logprobs=logp, loss=loss, rows=rows)
    if factor == declared_factor:
        report = mon.end_step()
        assert report.metrics["grpo/weights/aggregation_id"] == AGGREGATIONS["constant_normalizer"].index
        return
    with pytest.raises(InvariantViolation) as err:
        mon.end_step()
    assert err.value.violations[0].invariant == "loss_aggregation"
    assert "off constant_normalizer" in err.value.violations[0].observed


def test_scope_is_checked_when_declared():
    """token-mean over the micro-batch is not token-mean over the step: a declared scope tells them apart."""
    _run("token-mean", "step", declared="token_mean", loss_scope="step")
    with pytest.raises(InvariantViolation, match="loss_aggregation"):
        _run("token-mean", "micro_batch", declared="token_mean", loss_scope="step")


def test_degenerate_share_is_zero_for_a_true_zero_and_positive_for_a_stabilizer_residue():
    """A constant group at advantage exactly 0 weighs 0; one given a float32 residue over std + eps weighs > 0."""
    healthy, _, _ = _run("token-mean", "step")
    assert healthy.metrics["grpo/weights/degenerate_share"] == 0.0
    residue, ref_w, (rewards, _, mask) = _run("token-mean", "step", residue=True, on_violation="ignore")
    share = residue.metrics["grpo/weights/degenerate_share"]
    assert share > 0
    assert share == pytest.approx(_reference_metrics(ref_w, rewards, mask)["grpo/weights/degenerate_share"], rel=1e-5)


def test_measuring_leaves_parameter_gradients_bit_identical():
    """The same loop with and without observe_loss(loss=) ends with bit-identical parameter gradients."""
    def grads(observe: bool) -> torch.Tensor:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(T, 16), torch.nn.Tanh(), torch.nn.Linear(16, T))
        rewards, adv, mask, order = _batch()
        mon = GRPOMonitor(MonitorConfig(group_size=G, strict=True))
        mon.observe_rollout(rewards, advantages=adv.reshape(B, G))
        for rows in order.chunk(MICRO):
            logp = torch.nn.functional.logsigmoid(net(torch.eye(T)[rows % T] + rows[:, None].float()))
            loss = agg_loss(-adv[rows, None] * torch.exp(logp - logp.detach()), mask[rows], "seq-mean-token-mean")
            if observe:
                mon.observe_loss(mask=mask[rows], advantages=adv[rows], logprobs=logp, loss=loss, rows=rows)
            loss.backward()
        mon.end_step()
        return torch.cat([p.grad.reshape(-1) for p in net.parameters()])

    assert torch.equal(grads(True), grads(False))


def test_without_autograd_it_says_so_once_and_derives_weights():
    """Detached log-probs: one warning, weights derived from the declared aggregation (measured 0)."""
    rewards, adv, mask, _ = _batch()
    mon = GRPOMonitor(MonitorConfig(group_size=G, loss_aggregation="seq_mean_token_mean", strict=True))
    mon.observe_rollout(rewards, advantages=adv.reshape(B, G))
    logp = torch.zeros(B * G, T)
    mon.observe_loss(mask=mask, advantages=adv, logprobs=logp, loss=torch.tensor(1.0))
    mon.observe_loss(mask=mask, advantages=adv, logprobs=logp, loss=torch.tensor(1.0))
    with pytest.warns(RuntimeWarning, match="not measured") as caught:
        report = mon.end_step()
    assert len([w for w in caught if "not measured" in str(w.message)]) == 1
    assert report.metrics["grpo/weights/measured"] == 0.0
    assert report.metrics["grpo/weights/length_slope"] == pytest.approx(0.0, abs=1e-12)
    assert report.metrics["grpo/weights/aggregation_id"] == AGGREGATIONS["seq_mean_token_mean"].index


def test_bad_loss_and_rows_arguments_are_worded():
    """A per-token loss or rows of the wrong length raise input errors naming the argument."""
    from grpo_monitor.step.inputs import InputError

    mon = GRPOMonitor(MonitorConfig(group_size=G))
    mask = torch.ones(2, 3)
    with pytest.raises(InputError, match="loss must be a scalar"):
        mon.observe_loss(mask=mask, advantages=torch.ones(2), loss=torch.ones(2, 3))
    with pytest.raises(InputError, match="rows has shape"):
        mon.observe_loss(mask=mask, advantages=torch.ones(2), rows=[0, 1, 2])
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        MonitorConfig(loss_aggregation="mean")


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph-breaks", "fullgraph"])
def test_inside_torch_compile_it_says_so_once_and_derives(fullgraph):
    """observe_loss(loss=) inside a compiled step: no error, one warning at the step's end, derived weights."""
    rewards, adv, mask, _ = _batch()
    mon = GRPOMonitor(MonitorConfig(group_size=G, loss_aggregation="token_mean", strict=True))
    mon.observe_rollout(rewards, advantages=adv.reshape(B, G))

    def step(mask, logprobs, adv):
        loss = -(adv[:, None] * logprobs * mask).sum() / mask.sum()
        mon.observe_loss(mask=mask, advantages=adv, logprobs=logprobs, loss=loss)
        return loss

    torch._dynamo.reset()
    lp = torch.randn(B * G, T).requires_grad_()
    torch.compile(step, backend="eager", fullgraph=fullgraph)(mask, lp, adv).backward()
    with pytest.warns(RuntimeWarning, match="inside torch.compile"):
        report = mon.end_step()
    assert report.metrics["grpo/weights/measured"] == 0.0
    assert report.metrics["grpo/weights/aggregation_id"] == AGGREGATIONS["token_mean"].index
    assert report.metrics["grpo/weights/length_slope"] == pytest.approx(1.0)
    assert torch.allclose(lp.grad, -(adv[:, None] * mask) / mask.sum())  # the backward is untouched
