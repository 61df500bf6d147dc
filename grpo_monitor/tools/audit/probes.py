"""The probe batches of ``grpo-monitor audit`` and the checks run on them, in float64 and float32.

A probe is a batch of rewards ``(B, G)`` built in float64; each is fed to the function
twice, as float64 and cast to float32 (what trainers pass), and each run goes through a
fresh :class:`GRPOMonitor` (policy ``"ignore"``). The reward offset is sized to float32's
precision (:func:`offset_for`), so a sound float32 function is not blamed for rounding
the rewards themselves. What the function returns must be a floating tensor of the
rewards' shape: anything else is a :class:`ContractError`.

The float64 runs are replayed against the estimator registry in :mod:`grpo_monitor.tools.audit.registry`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from ...config import MonitorConfig
from ...invariants import probes as probe_invariants
from ...invariants.probes import relative as relative
from ...monitor import GRPOMonitor
from .. import theory

AdvantageFn = Callable[..., Any]
#: ``rewards (B, G) -> token counts (B, G)``: the audit's ``--lengths``.
LengthsFn = Callable[[torch.Tensor], Any]
#: Reward columns ``--reward-components K`` builds per response (a sine of each row's own reward per column).
MAX_COMPONENTS = 16
#: The precisions every probe is run in: float64, and float32 as trainers compute.
DTYPES: dict[str, torch.dtype] = {"float64": torch.float64, "float32": torch.float32}
#: Probes whose reward scale is 1: the convention is judged on these.
UNIT_SCALE = ("binary", "continuous")
#: The offset probe keeps G ulp32(offset) below this fraction of the reward spread (1).
OFFSET_RESOLUTION = 1e-4
#: Relative rounding float32 arithmetic may add, in units of G eps32 |reward| / spread.
ROUNDING_ULPS = 8.0
#: Success probabilities of the expected-gradient table.
P_GRID: tuple[str, ...] = ("0.01", "0.05", "0.1", "0.25", "0.5", "0.75", "0.9", "0.99")


class ContractError(ValueError):
    """The function returned something that is not advantages: None, a non-tensor, a wrong shape or dtype."""


@dataclasses.dataclass(frozen=True)
class Probe:
    """One crafted batch: ``rewards`` (B, G) float64, cast to each dtype of :data:`DTYPES` when run."""

    name: str
    description: str
    rewards: torch.Tensor


@dataclasses.dataclass
class ProbeResult:
    """What one probe run showed: the monitor's verdict, or the error the function raised."""

    name: str
    description: str
    dtype: str = "float64"
    convention: str | None = None
    stabilizer: float | None = None
    violations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    error: str | None = None
    contract: bool = False  # the error is a broken contract (None, non-tensor, shape), not an exception


@dataclasses.dataclass(frozen=True)
class Match:
    """A registry entry that reproduces the function on every float64 probe of :data:`MATCH_PROBES`.

    ``params`` is the fitted stabilizer; ``residual`` the worst per-group rms residual over
    the probes, x typical |advantage|; ``rank`` how well the entry names it (0 best, see
    :func:`registry_matches`).
    """

    name: str
    description: str
    params: dict[str, float]
    residual: float
    rank: int


def offset_for(G: int) -> float:
    """The largest power of ten whose float32 ulp, times G, stays under ``OFFSET_RESOLUTION`` of a unit spread.

    >>> offset_for(8), offset_for(64)
    (100.0, 10.0)
    """
    eps32 = torch.finfo(torch.float32).eps
    return float(10 ** math.floor(math.log10(OFFSET_RESOLUTION / (G * eps32))))


def make_probes(G: int, seed: int = 0) -> list[Probe]:
    """Every probe batch, float64; the run casts it to each dtype."""
    gen = torch.Generator().manual_seed(seed)
    binary = torch.stack([_row_with(K, G, gen) for K in range(G + 1) for _ in range(2)])
    continuous = torch.randn(16, G, generator=gen, dtype=torch.float64)
    consts = torch.tensor([0.7, 1 / 3, 0.3, 0.9], dtype=torch.float64)[:, None].expand(4, G)
    live = torch.where(binary[1:2 * G - 1] > 0, 0.7, 0.2)
    nan_rows = binary.clone()
    nan_rows[2:2 * G:2, 0] = torch.nan  # one unscorable response in every other group
    nan_rows[3, :2] = torch.nan
    offset = offset_for(G)
    return [
        Probe("binary", f"0/1 rewards at every success count K = 0..{G}, shuffled within groups", binary),
        Probe("continuous", "standard-normal rewards", continuous),
        Probe("constant", "groups of non-dyadic constants (0.7, 1/3, 0.3, 0.9) among 0.7/0.2 groups",
              torch.cat([consts, live])),
        Probe("nan_rows", "0/1 rewards with NaN (unscorable) responses in some groups", nan_rows),
        Probe("offset", f"continuous rewards + {offset:g} (sized so float32 still resolves them)", continuous + offset),
        Probe("scale_up", "continuous rewards x 1e4", continuous * 1e4),
        Probe("scale_down", "continuous rewards x 1e-4", continuous * 1e-4),
    ]


def _row_with(K: int, G: int, gen: torch.Generator) -> torch.Tensor:
    row = torch.zeros(G, dtype=torch.float64)
    row[torch.randperm(G, generator=gen)[:K]] = 1.0
    return row


def call(fn: AdvantageFn, rewards: torch.Tensor) -> torch.Tensor:
    """``fn(rewards)`` checked to be a floating tensor of the rewards' shape (its warnings muted).

    Raises :class:`ContractError` naming what came back; exceptions of ``fn`` propagate.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(rewards.clone())
    shape = tuple(rewards.shape)
    if out is None:
        raise ContractError(f"returned None for rewards of shape {shape}; return the advantages as a tensor "
                            f"of shape {shape}")
    if not isinstance(out, torch.Tensor):
        raise ContractError(f"returned a {type(out).__name__}, not a torch.Tensor, for rewards of shape {shape}; "
                            f"return the advantages as a tensor of shape {shape}")
    if tuple(out.shape) != shape:
        raise ContractError(f"returned shape {tuple(out.shape)} for rewards of shape {shape}; return one "
                            f"advantage per reward, shape {shape}")
    if not out.dtype.is_floating_point:
        raise ContractError(f"returned a {out.dtype} tensor; advantages must be floating point")
    return out.detach()


def run_probe(fn: AdvantageFn, probe: Probe, dtype: str, G: int, lengths: LengthsFn | None = None,
              components: int | None = None) -> tuple[ProbeResult, torch.Tensor | None]:
    """One probe in one dtype: the function's advantages (or None) through a fresh monitor (policy 'ignore').

    ``lengths`` (``rewards (B, G) -> token counts (B, G)``) gives the monitor the token counts the
    function was called with (see :func:`with_lengths`), as the live API's ``lengths=`` does.
    """
    result = ProbeResult(probe.name, probe.description, dtype)
    rewards = probe.rewards.to(DTYPES[dtype])
    try:
        adv = call(fn, rewards)
    except Exception as exc:  # noqa: BLE001 - the user's function may fail in any way
        result.error, result.contract = _worded(exc), isinstance(exc, ContractError)
        return result, None
    report = monitor_report(rewards, adv, G, token_counts(lengths, rewards), components)
    result.convention = report.estimator
    result.stabilizer = report.metrics.get("grpo/adv/stabilizer")
    for v in report.violations:
        rows = [g for g in v.groups if isinstance(g, int)][:1]
        example = {"rewards": _short(rewards[rows[0]]), "advantages": _short(adv[rows[0]])} if rows else None
        result.violations.append(finding(probe.name, dtype, v.invariant, str(v.observed), str(v.expected), v.hint,
                                         v.severity, example))
    return result, adv


def finding(probe: str, dtype: str, invariant: str, observed: str, expected: str, hint: str,
            severity: str = "error", example: dict | None = None) -> dict[str, Any]:
    """One violation as the audit reports it (``--json``'s ``violations`` entries)."""
    return {"probe": probe, "dtype": dtype, "invariant": invariant, "severity": severity, "observed": observed,
            "expected": expected, "hint": hint, "example": example}


def monitor_report(rewards: torch.Tensor, advantages: torch.Tensor, G: int, lengths: torch.Tensor | None = None,
                   components: int | None = None):
    """The report of one step of a fresh monitor (policy 'ignore') on ``rewards`` and ``advantages``
    (with the probes' ``components`` reward columns, as the live API's ``reward_components=``)."""
    mon = GRPOMonitor(MonitorConfig(group_size=G, on_violation="ignore", strict=True))
    extra = {} if components is None else {"reward_components": reward_components(rewards, components)}
    mon.observe_rollout(rewards, advantages=advantages, lengths=lengths, **extra)
    return mon.end_step()


def check_components(k: Any) -> int:
    """``k`` as a number of reward columns, 1..MAX_COMPONENTS, or a worded ValueError."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_COMPONENTS:
        raise ValueError(f"reward_components must be an int from 1 to {MAX_COMPONENTS} (reward columns per "
                         f"response), got {k!r}")
    return k


def reward_components(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """``k`` reward columns ``(B, G, k)`` summing to ``rewards``: column j is ``r / k + sin(3 r + 2 pi j / k) / (4 k)``.

    Each column is a strictly increasing, non-affine function of the row's own reward (slope at least
    ``1 / (4 k)``), so the columns differ, a constant group stays constant in every column, a NaN row is
    NaN in every column, and for ``k >= 2`` the sines cancel in the sum.

    >>> c = reward_components(torch.tensor([[0.0, 1.0]], dtype=torch.float64), 2)
    >>> tuple(c.shape), torch.allclose(c.sum(-1), torch.tensor([[0.0, 1.0]], dtype=torch.float64))
    ((1, 2, 2), True)
    """
    if k == 1:
        return rewards[..., None].clone()
    phase = 2 * math.pi * torch.arange(k, dtype=rewards.dtype) / k
    r = rewards[..., None]
    return r / k + torch.sin(3 * r + phase) / (4 * k)


def with_components(fn: AdvantageFn, k: int) -> AdvantageFn:
    """``fn`` called as ``fn(rewards, reward_components=reward_components(rewards, k))`` (composes with
    :func:`with_lengths`)."""
    def bound(rewards: torch.Tensor, **kwargs: Any) -> Any:
        return fn(rewards, reward_components=reward_components(rewards, k), **kwargs)

    bound.__qualname__ = getattr(fn, "__qualname__", "fn")
    return bound


def token_counts(lengths: LengthsFn | None, rewards: torch.Tensor) -> torch.Tensor | None:
    """``lengths(rewards)`` as float64 token counts ``(B, G)`` (None without ``lengths``), or a ContractError."""
    if lengths is None:
        return None
    out = lengths(rewards.clone())
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(rewards.shape):
        raise ContractError(f"the lengths function returned {type(out).__name__} "
                            f"{tuple(getattr(out, 'shape', ()))} for rewards of shape {tuple(rewards.shape)}; "
                            "return token counts of the rewards' shape")
    return out.to(torch.float64)


def with_lengths(fn: AdvantageFn, lengths: LengthsFn) -> AdvantageFn:
    """``fn`` called as ``fn(rewards, lengths=lengths(rewards))``: the probes' token counts, one rule."""
    def bound(rewards: torch.Tensor) -> Any:
        counts = token_counts(lengths, rewards)
        assert counts is not None, "lengths is given"
        return fn(rewards, lengths=counts.to(rewards.dtype))

    bound.__qualname__ = getattr(fn, "__qualname__", "fn")
    return bound


def _worded(exc: Exception) -> str:
    return str(exc) if isinstance(exc, ContractError) else f"raised {type(exc).__name__}: {exc}"


def _short(t: torch.Tensor) -> list[float]:
    return [float(f"{x:.6g}") for x in t.to(torch.float64).tolist()]


# ------------------------------------------------------------------- extra checks
def equivariance_error(fn: AdvantageFn, rewards: torch.Tensor, seed: int = 1) -> float:
    """Max |f(r permuted within each row) - f(r) permuted| relative to max |f(r)| (the probe's definition:
    :func:`grpo_monitor.invariants.probes.equivariance_error`, on the contract-checked function)."""
    return probe_invariants.equivariance_error(lambda r: call(fn, r), rewards, seed)


def batch_dependence(fn: AdvantageFn, rewards: torch.Tensor) -> float:
    """Max difference between each group's advantages in the batch and alone, relative to max |advantage|."""
    return probe_invariants.batch_dependence(lambda r: call(fn, r), rewards)


def scale_response(fn: AdvantageFn, rewards: torch.Tensor) -> dict[str, float]:
    """Median |advantage| ratio when the rewards are scaled by 1e-4 and 1e4 (1.0: scale invariant)."""
    base = call(fn, rewards).to(torch.float64).abs().median()
    out = {}
    for factor in (1e-4, 1e4):
        scaled = call(fn, rewards * factor).to(torch.float64).abs().median()
        out[f"x{factor:g}"] = float(scaled / base) if base > 0 else math.nan
    return out


def nan_verdict(probe: ProbeResult, adv: torch.Tensor | None, rewards: torch.Tensor) -> str:
    """How unscorable (NaN-reward) rows are treated.

    ``excluded``: they get 0 and stay out of their group's statistics (correct);
    ``counted``: finite advantages that break an invariant (silently wrong, a violation);
    ``group_dropped``: every advantage of a group holding a NaN is 0 (the group is skipped);
    ``propagates``: NaN advantages come out (loud); ``raises``: the function raised.
    """
    if adv is None:
        return "raises"
    adv = adv.to(torch.float64)
    if not torch.isfinite(adv).all():
        return "propagates"
    with_nan = torch.isnan(rewards).any(dim=1)
    if bool((adv[with_nan] == 0).all()):
        return "group_dropped"
    wrong = {"unscorable_rows", "zero_group_mean", "affine_in_rewards"}
    return "counted" if any(v["invariant"] in wrong for v in probe.violations) else "excluded"


def rounding_excess(fn: AdvantageFn, rewards32: torch.Tensor, adv32: torch.Tensor) -> tuple[float, float]:
    """(deviation, bound): how far float32 advantages are from the function's own float64 output on the same
    rewards, and what float32 rounding explains, both relative to the typical |advantage|.

    The bound is ``ROUNDING_ULPS * G * eps32 * max|reward| / spread`` (spread: the median
    within-group reward std of groups with variation); a deviation above it is not rounding.
    (inf, 0) when the function fails on the float64 copy: nothing to compare with.
    """
    r = rewards32.to(torch.float64)
    try:
        ref = call(fn, r).to(torch.float64)
    except Exception:  # noqa: BLE001 - the user's function may fail in any way
        return math.inf, 0.0
    live = torch.nan_to_num(r.std(1, correction=0), nan=0.0) > 0
    if not bool(live.any()) or not bool(torch.isfinite(ref[live]).all()):
        return math.inf, 0.0
    typical = ref[live].abs().median().clamp(min=1e-300)
    deviation = float((adv32.to(torch.float64) - ref)[live].abs().max() / typical)
    spread = float(r[live].std(1, correction=0).median())
    scale = float(torch.nan_to_num(r.abs(), nan=0.0).max())
    bound = ROUNDING_ULPS * r.shape[1] * torch.finfo(torch.float32).eps * scale / spread
    return deviation, bound


def residue_ratio(rewards: torch.Tensor, adv: torch.Tensor) -> float:
    """Max |advantage| of the all-equal groups over the median |advantage| of the others (0 without either)."""
    r, a = rewards.to(torch.float64), adv.to(torch.float64)
    constant = (r.amax(1) == r.amin(1)) & ~torch.isnan(r).any(1)
    if not bool(constant.any()) or bool(constant.all()):
        return 0.0
    typical = a[~constant].abs().median().clamp(min=1e-300)
    return float(a[constant].abs().max() / typical)


def gradient_table(fn: AdvantageFn, G: int) -> list[dict[str, Any]]:
    """Expected gradient of ``fn`` against the true ``p(1-p)`` by exact enumeration (finite-group theory).

    ``function`` and ``ratio`` are None, with ``error`` set, where the expectation is
    undefined (e.g. NaN advantages on an all-equal group).
    """
    rows = []
    for p in P_GRID:
        true = float(theory.expected_gradient(p, G, "true"))
        row: dict[str, Any] = {"p": float(p), "true": true, "function": None, "ratio": None}
        try:
            value = theory.expected_gradient_of(lambda r: call(fn, r), p, G)
            row.update(function=value, ratio=value / true)
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows
