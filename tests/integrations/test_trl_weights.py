"""TRL's GRPOTrainer (real, tiny model, CPU): every loss_type's token weights measured inside compute_loss.

Each ``loss_type`` TRL 1.16 accepts is run with and without gradient accumulation; the monitor
measures ``dloss/dlogprobs`` of TRL's own loss and must identify the aggregation TRL documents
(``docs/loss_weights.md``), with no violation. A subclass that divides by each row's length
under ``dr_grpo`` must stop ``train()`` with ``loss_aggregation``. ``beta=0`` keeps the KL term
out (rows with a KL term are measured, not checked); 16 completion tokens make lengths vary.
Every step holds the three prompts of :data:`PROMPTS`, one of them rewarded 1 whatever the
completion (a degenerate group, at advantage exactly 0 under TRL's z-score).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")
pytestmark = pytest.mark.slow

from trl import GRPOTrainer  # noqa: E402

from grpo_monitor import InvariantViolation, MonitorConfig  # noqa: E402
from grpo_monitor.integrations import trl as gtrl  # noqa: E402
from grpo_monitor.sinks import JSONLSink, read_jsonl  # noqa: E402
from grpo_monitor.stats.aggregations import AGGREGATIONS, resolve  # noqa: E402
from tiny_trl import make_trainer  # noqa: E402

LOSS_TYPES = {  # loss_type -> extra GRPOConfig arguments TRL needs for it
    "grpo": {}, "bnpo": {}, "dr_grpo": {}, "dapo": {}, "sapo": {}, "vespo": {},
    "cispo": {"epsilon_high": 5.0},  # TRL's recommended value; below 1 the clip acts at ratio 1
    "luspo": {"importance_sampling_level": "sequence"},
}


PROMPTS = ("const", "spell a", "say bb")  # 12 completions per step: one group of each prompt


def has_a(prompts, completions, **_):
    """1 if the completion holds an 'a', else 0, and 1 for every completion of ``"const"``: binary rewards, so a
    constant group's advantage is exactly 0."""
    return [1.0 if p == "const" else float("a" in c) for p, c in zip(prompts, completions, strict=True)]


def _run(model, out, loss_type: str, accumulation: int, trainer_cls=None, config=None, steps: int = 1):
    sink = JSONLSink(out / "grpo.jsonl")
    trainer = make_trainer(model, out / "run", trainer_cls=trainer_cls, reward_funcs=[has_a], beta=0.0,
                           loss_type=loss_type, max_completion_length=16, max_steps=steps, prompts=PROMPTS,
                           dataset_size=len(PROMPTS), per_device_train_batch_size=12 // accumulation,
                           gradient_accumulation_steps=accumulation,
                           **LOSS_TYPES[loss_type])
    monitor = gtrl.attach(trainer, config=config, sinks=[sink])
    return trainer, monitor, sink


@pytest.mark.parametrize("accumulation", [1, 2], ids=["no-accumulation", "accumulation-2"])
@pytest.mark.parametrize("loss_type", list(LOSS_TYPES))
def test_every_loss_type_is_its_documented_aggregation(loss_type, accumulation, tiny_model_path, tmp_path):
    """Declared from loss_type and checked on TRL's measured weights: no violation, the documented id, exact zeros
    on degenerate groups."""
    trainer, monitor, _ = _run(tiny_model_path, tmp_path, loss_type, accumulation)
    trainer.train()
    assert monitor.config.loss_aggregation == f"trl.{loss_type}"
    records = read_jsonl(tmp_path / "grpo.jsonl")
    name, _ = resolve(f"trl.{loss_type}")
    assert len(records) == 1
    for rec in records:
        m = rec["metrics"]
        assert rec["violations"] == [], rec["violations"]
        assert m["grpo/weights/measured"] == 1.0
        assert m["grpo/weights/aggregation_id"] == AGGREGATIONS[name].index
        assert m["grpo/groups/degenerate_rate"] > 0 and m["grpo/groups/effective_prompts"] > 0  # both kinds
        assert m["grpo/weights/degenerate_share"] == 0.0  # binary rewards: constant groups at advantage 0
        assert m["grpo/weights/length_slope"] == pytest.approx(0.0 if name == "seq_mean_token_mean" else 1.0,
                                                               abs=1e-4)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
def test_auto_fit_finds_the_aggregation_without_a_declaration(loss_type, tiny_model_path, tmp_path):
    """With loss_aggregation='auto' the fit alone names the aggregation (dr_grpo's T = the padded width reads as
    seq_mean_token_sum_norm when a response reaches max_completion_length)."""
    trainer, _, _ = _run(tiny_model_path, tmp_path, loss_type, 2, config=MonitorConfig(loss_aggregation="auto"),
                         steps=1)
    trainer.train()
    m = read_jsonl(tmp_path / "grpo.jsonl")[0]["metrics"]
    name, _ = resolve(f"trl.{loss_type}")
    allowed = {AGGREGATIONS[name].index}
    if loss_type == "dr_grpo":
        allowed.add(AGGREGATIONS["seq_mean_token_sum_norm"].index)
    assert m["grpo/weights/aggregation_id"] in allowed


class PerRowLengthDrGRPO(GRPOTrainer):
    """Declares dr_grpo but divides each row by its own length (TRL's grpo reduction) inside the loss."""

    def _compute_loss(self, model, inputs):
        self.loss_type = "grpo"
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self.loss_type = "dr_grpo"


def test_subclass_that_changes_the_aggregation_stops_train(tiny_model_path, tmp_path):
    """The per-row length division under a declared dr_grpo is loss_aggregation, raised out of train()."""
    trainer, monitor, _ = _run(tiny_model_path, tmp_path, "dr_grpo", 2, trainer_cls=PerRowLengthDrGRPO)
    assert monitor.config.loss_aggregation == "trl.dr_grpo" and monitor.config.loss_normalizer == 16
    with pytest.raises(InvariantViolation) as err:
        trainer.train()
    v = next(v for v in err.value.violations if v.invariant == "loss_aggregation")
    assert "measured w" in v.observed and "seq_mean_token_mean" in v.observed


def test_declared_scope_is_checked_on_the_real_trainer(tiny_model_path, tmp_path):
    """bnpo (each micro-batch's own token count) declared as dapo (the step's count) is loss_aggregation under
    gradient accumulation: the two micro-batches of a step hold different token counts."""
    trainer, _, _ = _run(tiny_model_path, tmp_path, "bnpo", 2, config=MonitorConfig(loss_aggregation="trl.dapo"))
    with pytest.raises(InvariantViolation) as err:
        trainer.train()
    v = next(v for v in err.value.violations if v.invariant == "loss_aggregation")
    assert "off token_mean (step)" in v.observed and "token_mean (micro_batch scope)" in v.observed


@pytest.mark.parametrize("term", ["kl", "entropy"])
def test_which_other_terms_weigh_on_degenerate_groups(term, tiny_model_path, tmp_path):
    """Beside the reward term (0 on a degenerate group), TRL's KL term acts on log-probs and so on degenerate groups
    once the policy has moved off the reference (step 2); its entropy bonus, computed from the logits, is not part
    of dloss/dlogprobs and leaves their share at 0 (and the check quiet)."""
    extra = dict(beta=0.04) if term == "kl" else dict(beta=0.0, entropy_coef=0.05)
    sink = JSONLSink(tmp_path / "grpo.jsonl")
    trainer = make_trainer(tiny_model_path, tmp_path / "run", reward_funcs=[has_a], loss_type="grpo",
                           max_completion_length=16, max_steps=2, prompts=PROMPTS, dataset_size=len(PROMPTS),
                           per_device_train_batch_size=12, **extra)
    gtrl.attach(trainer, sinks=[sink])
    trainer.train()
    records = read_jsonl(tmp_path / "grpo.jsonl")
    assert [r["violations"] for r in records] == [[], []]
    m = records[1]["metrics"]
    assert m["grpo/groups/degenerate_rate"] > 0
    if term == "kl":
        assert m["grpo/weights/degenerate_share"] > 0
    else:
        assert m["grpo/weights/degenerate_share"] == 0.0


def test_measuring_leaves_trls_update_bit_identical(tiny_model_path, tmp_path):
    """One dapo step with gradient accumulation, with and without the monitor measuring every micro-batch's
    weights: the same parameters afterwards, bit for bit (autograd.grad touches no .grad)."""
    def trained(out, monitored: bool):
        trainer = make_trainer(tiny_model_path, out, reward_funcs=[has_a], beta=0.0, loss_type="dapo",
                               max_completion_length=16, max_steps=1, prompts=PROMPTS, dataset_size=len(PROMPTS),
                               per_device_train_batch_size=6, gradient_accumulation_steps=2)
        monitor = gtrl.attach(trainer, sinks=[JSONLSink(out / "grpo.jsonl")]) if monitored else None
        trainer.train()
        if monitor is not None:
            assert read_jsonl(out / "grpo.jsonl")[0]["metrics"]["grpo/weights/measured"] == 1.0
            gtrl.detach(trainer)
        return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    plain, monitored = trained(tmp_path / "plain", False), trained(tmp_path / "monitored", True)
    assert plain.keys() == monitored.keys()
    assert all(torch.equal(plain[k], monitored[k]) for k in plain)


NOT_DECLARED = {  # settings under which TRL's reward term is not -A c at ratio 1, or its count is an estimate
    "dapo-steps-per-generation-2": ("dapo", dict(steps_per_generation=2)),
    "grpo-top-entropy-quantile": ("grpo", dict(top_entropy_quantile=0.5)),
    "cispo-epsilon-high-below-1": ("cispo", dict(epsilon_high=0.2)),
}


@pytest.mark.parametrize("case", list(NOT_DECLARED))
def test_settings_that_change_the_weights_are_fitted_not_checked(case, tiny_model_path, tmp_path):
    """Where the declaration would not hold (dapo's denominator estimated from the generation batch, an entropy
    mask, cispo's clip acting at ratio 1), the integration declares 'auto': no false alarm. Declared anyway, the
    same run breaks the check: the rule is needed."""
    loss_type, extra = NOT_DECLARED[case]

    def trainer_for(out):
        return make_trainer(tiny_model_path, out, reward_funcs=[has_a], beta=0.0, loss_type=loss_type,
                            max_completion_length=16, max_steps=1, prompts=PROMPTS, dataset_size=len(PROMPTS),
                            per_device_train_batch_size=12 // extra.get("steps_per_generation", 1),
                            gradient_accumulation_steps=1, **extra)

    trainer = trainer_for(tmp_path / "auto")
    monitor = gtrl.attach(trainer, sinks=[JSONLSink(tmp_path / "auto.jsonl")])
    assert monitor.config.loss_aggregation == "auto"
    trainer.train()
    assert all(r["violations"] == [] for r in read_jsonl(tmp_path / "auto.jsonl"))
    declared = trainer_for(tmp_path / "declared")
    gtrl.attach(declared, config=MonitorConfig(loss_aggregation=f"trl.{loss_type}"), sinks=[])
    with pytest.raises(InvariantViolation, match="loss_aggregation"):
        declared.train()
