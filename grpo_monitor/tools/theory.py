"""Exact finite-group theory of group-relative advantages (seeds 000 and 002).

The teaching model is the finite-group article's one-token Bernoulli policy: ``a_i ~ Bernoulli(p)``,
reward ``r_i = a_i`` and score ``d/dz log pi(a_i) = a_i - p``. A group holds ``G``
independent responses; ``K`` counts its successes. Every expectation below is a finite
sum over ``K`` with binomial probabilities. Probabilities and unnormalised sums are exact
``Fraction``s; only square roots (the standardized estimator) are floats.

The estimators here are the article's gradient estimators (:data:`GradientEstimator`), a
different thing from the advantage estimators of ``grpo_monitor.ESTIMATORS``; ``Estimator`` and
``ESTIMATORS``, their names before 0.4, still work with a ``DeprecationWarning``.

Probabilities are accepted as ``Fraction``, ``int``, ``str`` (``"0.1"``, ``"1/3"``) or
``float``; a float is read as its shortest decimal ``repr``, so ``0.1`` means ``1/10``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from numbers import Integral, Real
from typing import Any, Literal, TypeVar

import torch

ProbabilityLike = Fraction | int | float | str
GradientEstimator = Literal["true", "reinforce", "centered", "leave_one_out", "standardized"]
StdConvention = Literal["population", "bessel"]
_Choice = TypeVar("_Choice", bound=str)

#: Every estimator ``expected_gradient`` knows.
GRADIENT_ESTIMATORS: tuple[GradientEstimator, ...] = ("true", "reinforce", "centered", "leave_one_out", "standardized")
#: Estimators that vanish on all-equal groups, so rejection sampling only rescales them.
RETAINABLE_ESTIMATORS: tuple[GradientEstimator, ...] = ("centered", "leave_one_out", "standardized")
STD_CONVENTIONS: tuple[StdConvention, ...] = ("population", "bessel")
_RENAMED = {"Estimator": "GradientEstimator", "ESTIMATORS": "GRADIENT_ESTIMATORS"}
_warned: set[str] = set()


def __getattr__(name: str) -> Any:
    """``Estimator`` and ``ESTIMATORS``, the names before 0.4: one ``DeprecationWarning`` each."""
    if name not in _RENAMED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _warned:
        _warned.add(name)
        warnings.warn(f"grpo_monitor.tools.theory.{name} is deprecated: it is {_RENAMED[name]} (the gradient "
                      "estimators, not grpo_monitor.ESTIMATORS)", DeprecationWarning, stacklevel=2)
    return globals()[_RENAMED[name]]


# ----------------------------------------------------------------------------- checks
def _as_probability(p: Any, name: str = "p") -> Fraction:
    """``p`` as an exact Fraction in [0, 1], or a worded error."""
    if isinstance(p, bool) or not isinstance(p, (Fraction, Integral, Real, str)):
        raise TypeError(f"Expected argument `{name}` to be a Fraction, int, float or str but got {p!r}")
    try:
        if isinstance(p, Fraction):
            value = p
        elif isinstance(p, Integral):
            value = Fraction(int(p))
        elif isinstance(p, str):
            value = Fraction(p.strip())
        else:
            value = Fraction(repr(float(p)))
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"Expected argument `{name}` to be a probability in [0, 1] but got {p!r}") from None
    if not 0 <= value <= 1:
        raise ValueError(f"Expected argument `{name}` to be a probability in [0, 1] but got {p!r}")
    return value


def _check_group_size(G: Any) -> int:
    if isinstance(G, bool) or not isinstance(G, Integral) or G < 2:
        raise ValueError(f"Expected argument `G` to be an int >= 2 but got {G!r}")
    return int(G)


def _check_choice(value: Any, name: str, choices: Sequence[_Choice]) -> _Choice:
    if value not in choices:
        raise ValueError(f"Expected argument `{name}` to be one of {', '.join(choices)} but got {value!r}")
    return value


def _check_eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, Real) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"Expected argument `eps` to be a finite number >= 0 but got {eps!r}")
    return float(eps)


def _binomial_pmf(p: Fraction, G: int) -> list[Fraction]:
    """Exact ``Pr[K = k]`` for ``k = 0..G``."""
    return [math.comb(G, k) * p**k * (1 - p) ** (G - k) for k in range(G + 1)]


# ------------------------------------------------------------------ sampling ledger
def degenerate_probability(p: ProbabilityLike, G: int) -> Fraction:
    """Probability ``p^G + (1-p)^G`` that a group of ``G`` has all-equal rewards (no signal).

    >>> float(degenerate_probability(0.9, 4))
    0.6562
    """
    p, G = _as_probability(p), _check_group_size(G)
    return p**G + (1 - p) ** G


def retention_probability(p: ProbabilityLike, G: int) -> Fraction:
    """Probability ``alpha = 1 - p^G - (1-p)^G`` that dynamic sampling keeps a group.

    >>> retention_probability("1/2", 8)
    Fraction(127, 128)
    """
    return 1 - degenerate_probability(p, G)


def expected_groups_per_retained_group(p: ProbabilityLike, G: int) -> Fraction | float:
    """Expected groups drawn (retained one included) per retained group: ``1 / alpha``.

    ``math.inf`` when ``alpha == 0`` (``p`` is 0 or 1): no group is ever retained.

    >>> expected_groups_per_retained_group("1/2", 2)
    Fraction(2, 1)
    """
    alpha = retention_probability(p, G)
    return math.inf if alpha == 0 else 1 / alpha


def expected_responses_per_retained_group(p: ProbabilityLike, G: int) -> Fraction | float:
    """Expected responses generated per retained group, failed retries included: ``G / alpha``.

    ``math.inf`` when ``alpha == 0`` (``p`` is 0 or 1): the question can never be retained,
    so unlimited retries never end. Counts responses, not tokens or time.

    >>> round(float(expected_responses_per_retained_group(0.1, 8)), 4)
    14.0466
    """
    groups = expected_groups_per_retained_group(p, G)
    return groups if groups == math.inf else G * groups


def non_degenerate_groups_per_budget(p: ProbabilityLike, G: int, budget: int = 1000) -> Fraction:
    """Expected groups with signal among the ``budget // G`` groups a response budget buys.

    The worked numerical example's cost-normalised view: larger ``G`` buys fewer prompts.

    >>> float(non_degenerate_groups_per_budget("0.5", 4, 1000))
    218.75
    """
    if isinstance(budget, bool) or not isinstance(budget, Integral) or budget < 0:
        raise ValueError(f"Expected argument `budget` to be an int >= 0 but got {budget!r}")
    return (int(budget) // _check_group_size(G)) * retention_probability(p, G)


# ---------------------------------------------------------------- expected gradients
def _group_advantages(K: int, G: int, estimator: str, std: str, eps: float) -> tuple[Any, Any]:
    """(advantage of each success, advantage of each failure) in a group with ``K`` successes."""
    if estimator == "reinforce":
        return Fraction(1), Fraction(0)
    if estimator == "leave_one_out":
        return Fraction(G - K, G - 1), Fraction(-K, G - 1)
    mean = Fraction(K, G)
    if estimator == "centered":
        return 1 - mean, -mean
    if K in (0, G):  # all-equal group: advantages are set to zero (no 0/0)
        return Fraction(0), Fraction(0)
    variance = mean * (1 - mean) * (Fraction(G, G - 1) if std == "bessel" else 1)
    scale = math.sqrt(variance) + eps  # the stabilizer sits outside the square root
    return float(1 - mean) / scale, float(-mean) / scale


def _expected_score_product(p: Fraction, G: int, sums: Iterable[tuple[Any, Any]]) -> Any:
    """``E[(1/G) sum_i A_i (a_i - p)]`` from, per ``K``, the advantage sums over successes and failures."""
    pmf = _binomial_pmf(p, G)
    total: Any = Fraction(0)
    for prob, (success_sum, failure_sum) in zip(pmf, sums, strict=True):
        total += prob * (success_sum * (1 - p) - failure_sum * p) / G
    return total


def expected_gradient(
    p: ProbabilityLike,
    G: int,
    estimator: GradientEstimator,
    *,
    std: StdConvention = "population",
    eps: float = 0.0,
) -> Fraction | float:
    """Expected per-response mean of advantage x score, ``E[(1/G) sum_i A_i (a_i - p)]``.

    ``"true"`` is the target gradient ``p(1-p)``; ``"reinforce"`` uses ``A_i = r_i``;
    ``"centered"`` ``r_i - mean`` (expectation ``(1 - 1/G) p(1-p)``); ``"leave_one_out"``
    subtracts the others' mean (unbiased); ``"standardized"`` divides the centered reward
    by the group std (``std`` population or bessel, plus ``eps`` outside the root; all-equal
    groups get zero). Exact Fraction, except a float for ``"standardized"``.

    >>> expected_gradient("0.1", 8, "centered")
    Fraction(63, 800)
    >>> round(expected_gradient(0.1, 8, "standardized"), 7)
    0.209492
    """
    p, G = _as_probability(p), _check_group_size(G)
    estimator = _check_choice(estimator, "estimator", GRADIENT_ESTIMATORS)
    std = _check_choice(std, "std", STD_CONVENTIONS)
    eps = _check_eps(eps)
    if estimator == "true":
        return p * (1 - p)
    per_k = (_group_advantages(K, G, estimator, std, eps) for K in range(G + 1))
    total = _expected_score_product(p, G, ((K * a, (G - K) * b) for K, (a, b) in enumerate(per_k)))
    return float(total) if estimator == "standardized" else total


def _advantages_of(advantage_fn: Callable[[torch.Tensor], Any], K: int, G: int) -> torch.Tensor:
    """``advantage_fn`` on the group ``[1]*K + [0]*(G-K)``, checked to be a finite (1, G) tensor."""
    rewards = torch.zeros(1, G, dtype=torch.float64)
    rewards[0, :K] = 1.0
    advantages = torch.as_tensor(advantage_fn(rewards)).detach().to(torch.float64)
    if advantages.shape != (1, G):
        raise ValueError(
            f"advantage_fn returned shape {tuple(advantages.shape)} for rewards of shape (1, {G}); "
            f"return advantages aligned with rewards, shape (1, {G})"
        )
    if not torch.isfinite(advantages).all():
        raise ValueError(
            f"advantage_fn returned non-finite advantages {advantages.tolist()} for rewards {rewards.tolist()}"
        )
    return advantages[0]


def expected_gradient_of(advantage_fn: Callable[[torch.Tensor], Any], p: ProbabilityLike, G: int) -> float:
    """``E[(1/G) sum_i A_i (a_i - p)]`` for any advantage function, by enumeration over ``K``.

    ``advantage_fn`` maps rewards (a float64 tensor of shape (1, G) holding 0/1) to
    advantages of the same shape. It is called once per ``K`` on the sorted group
    ``[1]*K + [0]*(G-K)``; by exchangeability this equals the full expectation when the
    function is permutation-equivariant (check that separately). Compare the result with
    ``expected_gradient(p, G, "true")`` to read its bias.

    >>> centered = lambda r: r - r.mean(dim=1, keepdim=True)
    >>> round(expected_gradient_of(centered, 0.5, 8), 10)
    0.21875
    """
    p, G = _as_probability(p), _check_group_size(G)
    if not callable(advantage_fn):
        raise TypeError(f"Expected argument `advantage_fn` to be callable but got {advantage_fn!r}")
    sums = []
    for K in range(G + 1):
        advantages = _advantages_of(advantage_fn, K, G)
        sums.append((Fraction(advantages[:K].sum().item()), Fraction(advantages[K:].sum().item())))
    return float(_expected_score_product(p, G, sums))


def retained_conditional_gradient(
    p: ProbabilityLike,
    G: int,
    estimator: GradientEstimator,
    *,
    std: StdConvention = "population",
    eps: float = 0.0,
) -> Fraction | float:
    """Expected gradient of one group given dynamic sampling retained it: ``E[g] / alpha``.

    Valid only for estimators that vanish on all-equal groups (centered, leave-one-out,
    standardized); raw REINFORCE and the true gradient are refused. Raises when
    ``alpha == 0`` (``p`` is 0 or 1): no group is ever retained, so it is undefined.

    >>> retained_conditional_gradient("1/2", 2, "centered")
    Fraction(1, 4)
    """
    if estimator not in RETAINABLE_ESTIMATORS:
        raise ValueError(
            f"Expected argument `estimator` to be one of {', '.join(RETAINABLE_ESTIMATORS)} but got "
            f"{estimator!r}; only estimators that are zero on all-equal groups have E[g | retained] = E[g] / alpha "
            "(raw REINFORCE still gives all-success groups a gradient)"
        )
    alpha = retention_probability(p, G)
    if alpha == 0:
        raise ValueError(
            f"Expected argument `p` to be strictly between 0 and 1 but got {p!r}: the retention probability "
            f"is 0, no group of {G} is ever retained and unlimited retries never end"
        )
    return expected_gradient(p, G, estimator, std=std, eps=eps) / alpha


# --------------------------------------------------------------------------- tables
def _ratio(value: Any, reference: Any) -> float:
    return math.nan if reference == 0 else float(value / reference)


def _gradient_row(p: Fraction, G: int, std: StdConvention, eps: float) -> dict[str, float]:
    row: dict[str, Fraction | float] = {"p": float(p)}
    for name in ("true", "centered", "leave_one_out", "standardized"):
        row[name] = expected_gradient(p, G, name, std=std, eps=eps)
    for name in ("centered", "leave_one_out", "standardized"):
        row[f"{name}_ratio"] = _ratio(row[name], row["true"])
    return {key: float(value) for key, value in row.items()}


def _ledger_row(p: Fraction, G: int, budget: int) -> dict[str, float]:
    return {
        "p": float(p),
        "retention": float(retention_probability(p, G)),
        "degenerate": float(degenerate_probability(p, G)),
        "groups_per_retained": float(expected_groups_per_retained_group(p, G)),
        "responses_per_retained": float(expected_responses_per_retained_group(p, G)),
        "non_degenerate_per_budget": float(non_degenerate_groups_per_budget(p, G, budget)),
    }


def theory_tables(
    G: int,
    ps: Sequence[ProbabilityLike],
    *,
    std: StdConvention = "population",
    eps: float = 0.0,
    budget: int = 1000,
) -> dict[str, list[dict[str, float]]]:
    """The finite-group article's two tables as floats: ``{"gradient": rows, "ledger": rows}``, one row per ``p``.

    Gradient rows: p, true, centered, leave_one_out, standardized and each estimator's
    ratio to the true gradient (NaN where it is 0). Ledger rows: p, retention (alpha),
    degenerate, groups_per_retained and responses_per_retained (inf where alpha is 0),
    non_degenerate_per_budget (groups with signal per ``budget`` responses).

    >>> theory_tables(8, ["0.5"])["ledger"][0]["retention"]
    0.9921875
    """
    G = _check_group_size(G)
    if isinstance(ps, (str, bytes)) or not isinstance(ps, Sequence) or len(ps) == 0:
        raise ValueError(f"Expected argument `ps` to be a non-empty sequence of probabilities but got {ps!r}")
    fractions = [_as_probability(p, "ps") for p in ps]
    std = _check_choice(std, "std", STD_CONVENTIONS)
    eps = _check_eps(eps)
    return {
        "gradient": [_gradient_row(p, G, std, eps) for p in fractions],
        "ledger": [_ledger_row(p, G, budget) for p in fractions],
    }
