"""The audit and the live API agree: on every catalogue entry (the registry, the long tail included) the audit's
verdict is "ok"/"consistent" exactly when the live monitor, given the same token counts, raises no error."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig
from grpo_monitor.estimators import ESTIMATORS, custom
from grpo_monitor.tools.audit.probes import UNIT_SCALE, make_probes
from grpo_monitor.tools.audit.run import audit

G = 8
#: Entries whose own arithmetic breaks an invariant on some probe: AReaL clips rewards to +-20, so the offset
#: (rewards ~100) and 1e4-scale probes are constant or clipped; both the audit and the live API say so.
BY_DESIGN = {"areal.grpo", "areal.dr_grpo"}
#: skyrl.maxrl divides by the group mean: on the standard-normal probes (negative means) its slope turns
#: negative, a run that trains against its reward. Both the audit and the live API call that an error.
OUTSIDE_DOMAIN = {"skyrl.maxrl"}
ENTRIES = [n for n, e in ESTIMATORS.items() if not e.multi_reward and e.singleton != "error"]


def token_counts(rewards: torch.Tensor) -> torch.Tensor:
    """Token counts from the rewards' values (permutation-equivariant): failed answers run longer."""
    return 40.0 + 300.0 * (1.0 - torch.nan_to_num(rewards.double(), nan=0.0).clamp(0, 1))


def as_function(name: str):
    """The registry entry as a user's function rewards (B, G) -> advantages (B, G), lengths= optional."""
    est = ESTIMATORS[name]

    def fn(rewards: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        r = rewards.double().reshape(-1).numpy()
        gid = np.repeat(np.arange(rewards.shape[0]), rewards.shape[1])
        w = None if lengths is None else lengths.double().reshape(-1).numpy()
        return torch.from_numpy(est(r, gid, lengths=w)).reshape(rewards.shape).to(rewards.dtype)

    return fn


def live_errors(fn, lengths) -> list[str]:
    """Errors of the live API (auto, lengths= given) on the audit's own probe batches, in float64, counted as
    the audit counts them (the convention is judged at unit reward scale only)."""
    out = []
    for probe in make_probes(G):
        r = probe.rewards
        mon = GRPOMonitor(MonitorConfig(group_size=G, on_violation="ignore"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mon.observe_rollout(r, advantages=fn(r, lengths=lengths(r)), lengths=lengths(r))
            found = mon.end_step().violations
        out += [f"{probe.name}:{v.invariant}" for v in found if v.severity == "error"
                and (v.invariant != "convention" or probe.name in UNIT_SCALE)]
    return out


@pytest.mark.parametrize("name", ENTRIES)
def test_audit_and_live_api_agree(name):
    """Audit (with --lengths) and live monitor (with lengths=) give the same verdict on a shipped estimator."""
    fn = as_function(name)
    result = audit(fn, G, lengths=token_counts)
    errors = live_errors(fn, token_counts)
    agree = (result.verdict in ("ok", "consistent")) == (not errors)
    assert agree, (result.verdict, result.causes, errors)
    if name not in BY_DESIGN | OUTSIDE_DOMAIN:
        assert result.verdict in ("ok", "consistent"), [v for v in result.violations if v["severity"] == "error"]


def test_expect_takes_your_own_reference():
    """--expect with a declared function: it fits its own numbers, and a sign flip of them does not."""
    def mine(r):
        c = r - r.mean(1, keepdim=True)
        return torch.tanh(c / (r.std(1, keepdim=True) + 1e-3))

    name = custom(mine, name="parity.mine").name
    assert audit(mine, G, expect=name).expected_fits is True
    flipped = audit(lambda r: -mine(r), G, expect=name)
    assert flipped.expected_fits is False and flipped.verdict == "broken"


# ------------------------------------------------------------------ several rewards per response
def _nanstd(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Bessel std over ``dim`` ignoring NaN (torch has nanmean, no nanstd)."""
    mean = torch.nanmean(x, dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim, keepdim=True)
    return (torch.nansum((x - mean) ** 2, dim, keepdim=True) / (count - 1).clamp(min=1)).sqrt()


def normalize_then_sum(variant: str = "healthy"):
    """A user's multi-reward estimator written in torch (as TRL's normalize_then_sum): each reward column z-scored
    within its group (+1e-4), summed, then z-scored over the batch (+1e-4); NaN-reward rows get 0. ``variant``:
    ``misaligned`` (column 1 one row off its response) or ``wrong_axis`` (columns z-scored across the groups)."""

    def fn(rewards: torch.Tensor, reward_components: torch.Tensor) -> torch.Tensor:
        c = reward_components.clone()
        if variant == "misaligned":
            flat = c.reshape(-1, c.shape[-1])
            flat[:, 1] = torch.roll(flat[:, 1], 1)
        dim = 0 if variant == "wrong_axis" else 1
        z = (c - torch.nanmean(c, dim, keepdim=True)) / (_nanstd(c, dim) + 1e-4)
        nan = torch.isnan(rewards)
        s = torch.where(nan, torch.nan, z.sum(-1))
        flat = s.reshape(-1)
        adv = (s - torch.nanmean(flat)) / (_nanstd(flat, 0) + 1e-4)
        return torch.where(nan, 0.0, adv)

    return fn


def live_errors_with_components(fn, k: int) -> list[str]:
    """Errors of the live API ("auto", reward_components= given) on the audit's probes, counted as the audit does."""
    from grpo_monitor.tools.audit.probes import reward_components

    out = []
    for probe in make_probes(G):
        r, comps = probe.rewards, reward_components(probe.rewards, k)
        mon = GRPOMonitor(MonitorConfig(group_size=G, on_violation="ignore"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mon.observe_rollout(r, advantages=fn(r, reward_components=comps), reward_components=comps)
            found = mon.end_step().violations
        out += [f"{probe.name}:{v.invariant}" for v in found if v.severity == "error"
                and (v.invariant != "convention" or probe.name in UNIT_SCALE)]
    return out


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("variant", ["healthy", "misaligned", "wrong_axis"])
def test_audit_and_live_api_agree_with_reward_components(variant, k):
    """audit(reward_components=K) calls fn(rewards, reward_components=C) and gives the live API's verdict (auto,
    reward_components= given): a torch normalize_then_sum is trl.normalize_then_sum for both, a column one row off
    or z-scored across the groups is broken for both."""
    fn = normalize_then_sum(variant)
    result = audit(fn, G, reward_components=k)
    errors = live_errors_with_components(fn, k)
    assert (result.verdict in ("ok", "consistent")) == (not errors), (result.verdict, result.causes, errors)
    if variant == "healthy":
        assert result.verdict == "ok" and result.inferred == "trl.normalize_then_sum", result.causes
        assert audit(fn, G, reward_components=k, expect="trl.normalize_then_sum").expected_fits is True
    else:
        assert result.verdict == "broken" and errors


def test_reward_components_argument_is_checked():
    """A multi-reward --expect without components, or a K that is not a count of columns, is a worded error."""
    fn = normalize_then_sum()
    with pytest.raises(ValueError, match="reward_components=K"):
        audit(fn, G, expect="trl.normalize_then_sum")
    for bad in (0, 2.5, True, 99):
        with pytest.raises(ValueError, match="reward_components must be an int from 1 to 16"):
            audit(fn, G, reward_components=bad)


def test_cli_reward_components(tmp_path, monkeypatch, capsys):
    """grpo-monitor audit MODULE:FUNCTION --reward-components 2: exit 0 and the multi-reward entry named; the
    misaligned variant exits 1."""
    import inspect
    import json

    from grpo_monitor.tools.cli import main

    source = "import torch\n" + inspect.getsource(_nanstd) + inspect.getsource(normalize_then_sum) + \
        "healthy = normalize_then_sum()\nmisaligned = normalize_then_sum('misaligned')\n"
    (tmp_path / "multi.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "multi:healthy", "--reward-components", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inferred"] == "trl.normalize_then_sum"
    assert main(["audit", "multi:misaligned", "--reward-components", "2", "--json"]) == 1
    assert main(["audit", "multi:healthy", "--reward-components", "0"]) == 2
    assert "reward_components must be an int" in capsys.readouterr().err
