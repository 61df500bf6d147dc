"""The long tail of shipped estimators is quiet on every kind of batch, declared and under "auto" (where "auto"
cannot name one it warns, never stops), and every real bug collected is still an error under "auto"."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, InvariantViolation, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS

G, B = 8, 24
#: The long-tail entries (issue 21), each reproducing a cited source (see its ``source``).
LONG_TAIL = ("verl.opo", "length_weighted_loo", "roll.grpo_clip", "none_clip_negative", "roll.batch_mean",
             "roll.batch_norm", "verl.gdpo")
KINDS = ("binary", "continuous", "graded", "constant_nondyadic", "scale_10_100")


def _rewards(kind: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "binary":
        r = (rng.random(shape) < rng.random(shape[:1] + (1,) * (len(shape) - 1))).astype(np.float64)
    elif kind == "continuous":
        r = rng.random(shape)
    elif kind == "graded":
        r = rng.choice([0.0, 0.25, 0.5, 1.0], size=shape)
    elif kind == "constant_nondyadic":
        r = np.where(rng.random(shape) < 0.5, 0.7, 0.2)
        r[:4] = np.array([0.7, 1 / 3, 0.3, 0.9]).reshape((4,) + (1,) * (len(shape) - 1))
    else:
        r = rng.uniform(10.0, 100.0, shape)
    r[-1] = r[-1].flat[0]  # one constant group in every batch
    return r


def _case(name: str, kind: str, seed: int = 0):
    """(rewards (B, G), advantages (B, G) float32-rounded, lengths (B, G), components (B, G, K) or None)."""
    rng = np.random.default_rng(seed)
    est = ESTIMATORS[name]
    gid = np.repeat(np.arange(B), G)
    lengths = rng.integers(20, 400, size=B * G).astype(np.float64)
    comps = None
    if est.multi_reward:
        comps = _rewards(kind, rng, (B, G, 2))
        r = comps.sum(-1)
        a = est(comps.reshape(-1, 2), gid, lengths=lengths)
    else:
        r = _rewards(kind, rng, (B, G))
        a = est(r.reshape(-1), gid, lengths=lengths)
    a = a.astype(np.float32).astype(np.float64).reshape(B, G)
    return r, a, lengths.reshape(B, G), comps


def _run(declared: str, r, a, lengths, comps, steps: int = 2) -> list:
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention=declared, on_violation="warn"))
    found = []
    extra = {} if comps is None else {"reward_components": torch.from_numpy(comps)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a),
                                lengths=torch.from_numpy(lengths), **extra)
            found += mon.end_step().violations
    return found


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", LONG_TAIL)
def test_declared_long_tail_estimator_is_quiet(name, kind):
    """Declared by name, the estimator's own numbers break nothing (no error, no warning but float32 residue)."""
    found = _run(name, *_case(name, kind))
    assert not [v for v in found if v.severity == "error"], [v.message() for v in found]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", LONG_TAIL)
def test_long_tail_estimator_under_auto_never_stops(name, kind):
    """Under "auto" the entry is named by replay, or (nothing identifiable) an unknown_estimator warning."""
    found = _run("auto", *_case(name, kind))
    assert not [v for v in found if v.severity == "error"], [v.message() for v in found]
    assert {v.invariant for v in found} <= {"unknown_estimator", "degenerate_zero"}


def test_auto_names_the_long_tail_entry_given_what_it_needs():
    """With token counts and reward components, "auto" names each entry itself (a clip, a length weighting)."""
    expect = {"verl.opo": "verl.opo", "roll.grpo_clip": "roll.grpo_clip", "roll.batch_mean": "roll.batch_mean",
              "none_clip_negative": "none_clip_negative", "length_weighted_loo": "length_weighted_loo"}
    for name, named in expect.items():
        r, a, lengths, comps = _case(name, "continuous", seed=3)
        mon = GRPOMonitor(MonitorConfig(group_size=G))
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a), lengths=torch.from_numpy(lengths))
        assert mon.end_step().convention == named, name


def test_gdpo_replayed_from_its_components_catches_a_wrong_weight(tmp_path):
    """verl.gdpo is replayed on the reward components: advantages made with other weights are an error."""
    r, _, lengths, comps = _case("verl.gdpo", "continuous")
    gid = np.repeat(np.arange(B), G)
    wrong = ESTIMATORS["verl.gdpo"](comps.reshape(-1, 2), gid, lengths=lengths.reshape(-1), weights=(1.0, 3.0))
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="verl.gdpo", repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation, match="convention"):
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(wrong.reshape(B, G)),
                            lengths=torch.from_numpy(lengths), reward_components=torch.from_numpy(comps),
                            reward_weights=[1.0, 1.0])


# ------------------------------------------------------------------------------------ real bugs
def _z(r):
    return (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)


def _shuffled(r):  # advantages of a shuffled batch, rewards in the original order
    return _z(r)[np.random.default_rng(1).permutation(len(r))]


def _wrong_slice(r):  # groups sliced with the wrong size: view(-1, G/2)
    half = r.reshape(-1, G // 2)
    return _z(half).reshape(r.shape)


def _sign_flip(r):
    return -_z(r)


def _nan_as_zero(r):
    out = _z(np.nan_to_num(r, nan=0.0))
    return out


def _eps_blowup(r):  # leave-one-out std + 1e-6: ~1e6 where the other rows are all equal
    n = r.shape[1]
    m = (r.sum(1, keepdims=True) - r) / (n - 1)
    s = np.sqrt(np.clip(((r * r).sum(1, keepdims=True) - r * r) / (n - 1) - m * m, 0, None))
    return (r - m) / (s + 1e-6)


def _batch_mean_group_std(r):  # the batch mean as baseline, the group std as scale
    return (r - r.mean()) / (r.std(1, ddof=1, keepdims=True) + 1e-4)


def _forgot_centring(r):
    return r / (r.std(1, ddof=1, keepdims=True) + 1e-4)


def _plus_constant(r):
    return _z(r) + 0.1


def _constant_groups_differ(r):  # an epsilon as a floor: constant groups get (r - 0) / eps-ish values
    return (r - r.mean(1, keepdims=True) + np.where(r.std(1, keepdims=True) == 0, r, 0.0)) / 0.5


REAL_BUGS = {
    "rows-misaligned-after-a-shuffle": _shuffled, "wrong-group-slice": _wrong_slice, "sign-flip": _sign_flip,
    "nan-counted-as-zero": _nan_as_zero, "loo-std-eps-blowup": _eps_blowup,
    "batch-mean-with-group-std": _batch_mean_group_std, "forgotten-centring": _forgot_centring,
    "uniform-shift": _plus_constant, "constant-groups-get-their-reward": _constant_groups_differ,
}


@pytest.mark.parametrize("bug", list(REAL_BUGS))
def test_every_real_bug_is_still_an_error_under_auto(bug, tmp_path):
    """Each bug raises under "auto": no registry entry explains it and it breaks a universal invariant."""
    rng = np.random.default_rng(5)
    r = (rng.random((B, G)) < rng.random((B, 1))).astype(np.float64)
    if bug == "wrong-group-slice":  # on 0/1 rewards each half's z-scores still rise with the reward: see below
        r = rng.random((B, G))
    r[0], r[1] = 1.0, 0.0
    if bug == "nan-counted-as-zero":
        r[2:10, 0] = np.nan
    a = np.nan_to_num(REAL_BUGS[bug](r).astype(np.float32).astype(np.float64), nan=0.0)
    mon = GRPOMonitor(MonitorConfig(group_size=G, repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation) as info:
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a))
    assert all(v.severity == "error" for v in info.value.violations)


def test_a_wrong_group_slice_on_binary_rewards_is_caught_once_declared(tmp_path):
    """Halves of 0/1 groups z-scored separately keep every universal invariant (ones above zeros, constant
    groups 0): "auto" can only warn; the declared estimator's replay makes it an error."""
    rng = np.random.default_rng(5)
    r = (rng.random((B, G)) < 0.5).astype(np.float64)
    a = _wrong_slice(r).astype(np.float32).astype(np.float64)
    auto = _run("auto", r, a, np.ones((B, G)), None, steps=1)
    assert {(v.invariant, v.severity) for v in auto} == {("unknown_estimator", "warning")}
    mon = GRPOMonitor(MonitorConfig(group_size=G, std_convention="trl.group", repro_dir=str(tmp_path)))
    with pytest.raises(InvariantViolation):
        mon.observe_rollout(torch.from_numpy(r), advantages=torch.from_numpy(a))


def test_a_shift_that_leaves_every_advantage_positive_is_no_whitening():
    """Forgotten centring that shifts every group alike (all advantages positive) stays an error under "auto":
    whatever its token counts, a whitened batch averages to 0, so it has advantages of both signs."""
    import torch

    from grpo_monitor import GRPOMonitor, MonitorConfig

    mon = GRPOMonitor(MonitorConfig(group_size=2, on_violation="ignore"))
    mon.observe_rollout(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), advantages=torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
    report = mon.end_step()
    assert [(v.invariant, v.severity) for v in report.violations] == [("zero_group_mean", "error")]
