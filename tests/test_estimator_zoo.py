"""Every shipped estimator is quiet on healthy batches, declared or found by "auto"; real bugs that swap one
valid convention for another are errors under the declared estimator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS

G, B = 8, 32
KINDS = ("binary", "continuous", "graded")
SHIPPED = [n for n, e in ESTIMATORS.items() if not e.multi_reward]


def _rewards(kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "binary":
        r = (rng.random((B, G)) < rng.random((B, 1))).astype(np.float64)
    elif kind == "continuous":
        r = rng.random((B, G))
    else:
        r = rng.choice([0.0, 0.5, 1.0], size=(B, G))
    r[0] = 1.0  # a solved prompt and an unsolved one: degenerate groups in every batch
    r[1] = 0.0
    return r.reshape(-1)


def _advantages(name: str, r: np.ndarray) -> np.ndarray:
    """The framework's numbers: the float64 reference rounded to float32, as trainers hand them over."""
    gid = np.repeat(np.arange(B), G)
    return ESTIMATORS[name](r, gid).astype(np.float32).astype(np.float64)


def _errors(name: str, declared: str, r: np.ndarray, a: np.ndarray, steps: int = 2, lengths=None) -> list:
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention=declared, on_violation="warn"))
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a), lengths=lengths)
            report = mon.end_step()
            found += [v for v in report.violations if v.severity == "error"]
    return found


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_estimator_declared_is_quiet(name, kind):
    """The estimator's own numbers, declared by name: no error-severity violation."""
    r = _rewards(kind, seed=hash((name, kind)) % 2**16)
    if ESTIMATORS[name].reward_domain == "nonnegative":
        r = np.abs(r)
    found = _errors(name, name, r, _advantages(name, r))
    assert not found, [v.message() for v in found]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_estimator_under_auto_is_quiet_and_named(name, kind):
    """Under "auto" the estimator is recognised (the device fit or the registry replay) and nothing stops."""
    r = _rewards(kind, seed=1 + hash((name, kind)) % 2**16)
    found = _errors(name, "auto", r, _advantages(name, r))
    assert not found, [v.message() for v in found]


def _walrus(r2d):  # `if (std := r.std()) > 0: a /= std > 0` divides by True: plain centring
    return r2d - r2d.mean(1, keepdims=True)


def _swapped(r2d):  # group / batch std branches swapped: the batch std where the group's was meant
    return (r2d - r2d.mean(1, keepdims=True)) / (r2d.std(ddof=1) + 1e-4)


def _ignores_no_std(r2d):  # a vectorized path that divides although norm_adv_by_std_in_grpo=False
    return (r2d - r2d.mean(1, keepdims=True)) / (r2d.std(1, ddof=1, keepdims=True) + 1e-6)


def _plain_bessel(r2d):  # NeMo-RL declared (leave-one-out baseline and std) but the trainer z-scores
    return (r2d - r2d.mean(1, keepdims=True)) / (r2d.std(1, ddof=1, keepdims=True) + 1e-6)


def _credits_all(r2d):  # a pass@k estimator that credits every row like GRPO
    return _plain_bessel(r2d)


BUGS = [
    pytest.param("trl.group", _walrus, id="walrus-divides-by-True-under-trl.group"),
    pytest.param("trl.group", _swapped, id="swapped-batch-std-under-trl.group"),
    pytest.param("verl.grpo_no_std", _ignores_no_std, id="ignores-norm_adv_by_std_False"),
    pytest.param("nemo_rl.grpo", _plain_bessel, id="nemo-declared-plain-zscore"),
    pytest.param("verl.grpo_passk", _credits_all, id="passk-credits-every-row"),
]


@pytest.mark.parametrize("declared, bug", BUGS)
@pytest.mark.parametrize("kind", ["binary", "continuous"])
def test_a_convention_swap_is_an_error_under_the_declared_estimator(declared, bug, kind, tmp_path):
    """The swap raises InvariantViolation at once (eager check), naming what was declared."""
    r = _rewards(kind, seed=7)
    a = bug(r.reshape(B, G)).astype(np.float32).reshape(-1).astype(np.float64)
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention=declared, repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a))
    assert all(v.severity == "error" for v in info.value.violations)
    assert {v.invariant for v in info.value.violations} & {"convention", "one_nonzero_per_group"}


def test_auto_names_a_framework_default_and_reports_it(tmp_path):
    """NeMo-RL's default under "auto": replay names nemo_rl.grpo, the report and its metric say so."""
    r = _rewards("binary", seed=3)
    mon = GRPOMonitor(MonitorConfig(group_size=G))
    mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(_advantages("nemo_rl.grpo", r)))
    report = mon.end_step()
    assert report.convention == "nemo_rl.grpo" and not report.violations
    assert report.metrics["grpo/adv/convention_id"] == ESTIMATORS["nemo_rl.grpo"].id


@pytest.mark.parametrize("how", ["declared-no-lengths", "declared-with-lengths", "auto-with-lengths"])
@pytest.mark.parametrize("name", [n for n, e in ESTIMATORS.items() if e.token_weighted and not e.multi_reward])
def test_token_whitening_with_unequal_lengths_is_quiet(name, how):
    """Whitening over tokens of unequal rows shifts every advantage by one offset: declared, the replay
    fits that offset and scale (or uses the token counts); under "auto" the token counts pin it."""
    r = _rewards("binary", seed=11)
    lengths = np.random.default_rng(5).integers(20, 400, size=B * G).astype(np.float64)
    a = ESTIMATORS[name](r, np.repeat(np.arange(B), G), lengths=lengths).astype(np.float32).astype(np.float64)
    declared = "auto" if how.startswith("auto") else name
    given = torch.from_numpy(lengths) if "with-lengths" in how else None
    found = _errors(name, declared, r, a, lengths=given)
    assert not found, [v.message() for v in found]


def test_a_forgotten_centring_is_not_mistaken_for_token_whitening_under_auto(tmp_path):
    """Without lengths "auto" recognises token whitening as one global affine map of the group step; a
    forgotten centring (r / std_g: a per-group offset) is no such map and stays a zero_group_mean error."""
    r = _rewards("binary", seed=4).reshape(B, G)
    a = (r / (r.std(1, ddof=1, keepdims=True) + 1e-4)).reshape(-1)
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation, match="zero_group_mean"):
        mon.observe_rollout(torch.from_numpy(r.reshape(-1)), advantages=torch.from_numpy(a))


@pytest.mark.parametrize("with_lengths", [False, True], ids=["no-lengths", "with-lengths"])
def test_a_uniform_shift_is_not_mistaken_for_token_whitening_under_auto(tmp_path, with_lengths):
    """Every advantage + 0.1 (an added term): whitening explains a global shift only with a scale that is the
    tokens' std, never exactly 1, so the shift stays a zero_group_mean error; with token counts the replay
    pins the shift too."""
    r = _rewards("binary", seed=4)
    a = _advantages("bessel", r) + 0.1
    lengths = torch.from_numpy(np.random.default_rng(2).integers(20, 400, size=B * G).astype(np.float64))
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation, match="zero_group_mean"):
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a),
                            lengths=lengths if with_lengths else None)
