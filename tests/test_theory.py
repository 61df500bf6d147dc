"""grpo_monitor.tools.theory against the seeds' tables, a brute-force enumeration and exact identities."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_monitor.tools import theory
from references import advantages

# ----------------------------------------------------------- independent reference
# Plain-Python enumeration of all 2^G ordered binary groups: probabilities and centered
# sums are Fractions, square roots floats. It shares no code with grpo_monitor.tools.theory.


def _reference_advantages(rewards, estimator, std, eps):
    G = len(rewards)
    mean = Fraction(sum(rewards), G)
    if estimator == "reinforce":
        return [Fraction(r) for r in rewards]
    if estimator == "centered":
        return [r - mean for r in rewards]
    if estimator == "leave_one_out":
        return [r - Fraction(sum(rewards) - r, G - 1) for r in rewards]
    squares = sum((r - mean) ** 2 for r in rewards)
    if squares == 0:
        return [Fraction(0)] * G
    sigma = math.sqrt(squares / (G - 1 if std == "bessel" else G))
    return [float(r - mean) / (sigma + eps) for r in rewards]


def _reference_gradient(p, G, estimator, std="population", eps=0.0, retained_only=False):
    total, mass = Fraction(0), Fraction(0)
    for rewards in itertools.product((0, 1), repeat=G):
        K = sum(rewards)
        if retained_only and K in (0, G):
            continue
        prob = p**K * (1 - p) ** (G - K)
        advantages = _reference_advantages(rewards, estimator, std, eps)
        total += prob * sum(a * (r - p) for a, r in zip(advantages, rewards, strict=True)) / G
        mass += prob
    return total / mass if retained_only else total


SMALL_P = [Fraction(0), Fraction(1, 100), Fraction(1, 10), Fraction(1, 3), Fraction(1, 2), Fraction(9, 10), Fraction(1)]
probabilities = st.fractions(min_value=0, max_value=1, max_denominator=1000)
group_sizes = st.integers(min_value=2, max_value=24)


# ------------------------------------------------------------------- seed 000 tables
SEED000_GRADIENTS = [  # p, true, centered, standardized (G=8, population std, eps=0)
    ("0.01", 0.009900, 0.0086625, 0.0258277),
    ("0.1", 0.090000, 0.0787500, 0.2094920),
    ("0.5", 0.250000, 0.2187500, 0.4639140),
]
SEED000_LEDGER = [("0.01", 0.0772553, 103.5528), ("0.1", 0.5695328, 14.0466), ("0.5", 0.9921875, 8.0630)]


@pytest.mark.parametrize("p, true, centered, standardized", SEED000_GRADIENTS, ids=lambda v: str(v))
def test_seed000_gradient_table(p, true, centered, standardized):
    """The G=8 gradient table of seed 000 is reproduced to its printed digits."""
    assert float(theory.expected_gradient(p, 8, "true")) == pytest.approx(true, abs=5e-7)
    assert float(theory.expected_gradient(p, 8, "centered")) == pytest.approx(centered, abs=5e-8)
    assert theory.expected_gradient(p, 8, "standardized") == pytest.approx(standardized, abs=5e-8)


@pytest.mark.parametrize("p, ratio", [("0.01", 2.61), ("0.1", 2.33), ("0.5", 1.86)], ids=["p=0.01", "p=0.1", "p=0.5"])
def test_seed000_ratios(p, ratio):
    """Centered/true is exactly 7/8 and standardized/true matches the seed's 2.61, 2.33, 1.86."""
    true = theory.expected_gradient(p, 8, "true")
    assert theory.expected_gradient(p, 8, "centered") / true == Fraction(7, 8)
    assert round(theory.expected_gradient(p, 8, "standardized") / float(true), 2) == ratio


@pytest.mark.parametrize("p, alpha, responses", SEED000_LEDGER, ids=lambda v: str(v))
def test_seed000_ledger(p, alpha, responses):
    """Retention probability and responses per retained group match seed 000's ledger."""
    assert float(theory.retention_probability(p, 8)) == pytest.approx(alpha, abs=5e-8)
    assert float(theory.expected_responses_per_retained_group(p, 8)) == pytest.approx(responses, abs=5e-5)
    assert theory.expected_groups_per_retained_group(p, 8) * 8 == theory.expected_responses_per_retained_group(p, 8)


def test_seed000_one_success_standardized_advantages():
    """With one success the standardized advantages are sqrt(G-1) and -1/sqrt(G-1) (seed 000)."""
    for G in range(2, 12):
        success, failure = theory._group_advantages(1, G, "standardized", "population", 0.0)
        assert success == pytest.approx(math.sqrt(G - 1)) and failure == pytest.approx(-1 / math.sqrt(G - 1))


# ------------------------------------------------------------------- seed 002 tables
SEED002_DEGENERATE = {  # p: (G=4, G=8, G=16) theory column
    "0.1": (0.6562, 0.4305, 0.1853),
    "0.3": (0.2482, 0.0577, 0.0033),
    "0.5": (0.1250, 0.0078, 0.0000),
    "0.7": (0.2482, 0.0577, 0.0033),
    "0.9": (0.6562, 0.4305, 0.1853),
}
SEED002_COST = [  # p, G, groups per 1000 rollouts, non-degenerate
    ("0.5", 4, 250, 218.8), ("0.5", 8, 125, 124.0), ("0.5", 16, 62, 62.0),
    ("0.7", 4, 250, 188.0), ("0.7", 8, 125, 117.8), ("0.7", 16, 62, 61.8),
    ("0.9", 4, 250, 86.0), ("0.9", 8, 125, 71.2), ("0.9", 16, 62, 50.5),
]


@pytest.mark.parametrize("p", sorted(SEED002_DEGENERATE))
@pytest.mark.parametrize("index, G", [(0, 4), (1, 8), (2, 16)], ids=["G=4", "G=8", "G=16"])
def test_seed002_degenerate_table(p, index, G):
    """p^G + (1-p)^G reproduces seed 002's theory column to four decimals."""
    assert float(theory.degenerate_probability(p, G)) == pytest.approx(SEED002_DEGENERATE[p][index], abs=5e-5)


@pytest.mark.parametrize("p, G, groups, useful", SEED002_COST, ids=lambda v: str(v))
def test_seed002_cost_normalised_table(p, G, groups, useful):
    """Non-degenerate groups per 1000 rollouts match seed 002's cost-normalised column."""
    assert 1000 // G == groups
    assert float(theory.non_degenerate_groups_per_budget(p, G, 1000)) == pytest.approx(useful, abs=0.05 + 1e-9)


# Seed 002 prints 0.9841 for G=32, but sqrt(31/32) = 0.98425 rounds to 0.9843 (its "1.6%" agrees
# with either); the other three printed ratios are exact to four decimals.
@pytest.mark.parametrize("G, ratio", [(4, 0.8660), (8, 0.9354), (16, 0.9682), (32, 0.9843)], ids=lambda v: str(v))
def test_seed002_bessel_shrink(G, ratio):
    """With eps=0, Bessel std shrinks the standardized gradient by seed 002's sqrt((G-1)/G)."""
    bessel = theory.expected_gradient("0.3", G, "standardized", std="bessel")
    assert round(bessel / theory.expected_gradient("0.3", G, "standardized"), 4) == ratio


# ---------------------------------------------------------- brute-force enumeration
@pytest.mark.parametrize("G", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("estimator", ["reinforce", "centered", "leave_one_out"])
def test_exact_estimators_match_enumeration(G, estimator):
    """The exact estimators equal the 2^G enumeration as Fractions, not just approximately."""
    for p in SMALL_P:
        assert theory.expected_gradient(p, G, estimator) == _reference_gradient(p, G, estimator)


@pytest.mark.parametrize("G", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("std", ["population", "bessel"])
@pytest.mark.parametrize("eps", [0.0, 1e-6, 0.1])
def test_standardized_matches_enumeration(G, std, eps):
    """The standardized estimator equals the 2^G enumeration for both conventions and stabilizers."""
    for p in SMALL_P:
        expected = float(_reference_gradient(p, G, "standardized", std, eps))
        assert theory.expected_gradient(p, G, "standardized", std=std, eps=eps) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("G", [2, 3, 5, 6])
@pytest.mark.parametrize("estimator", ["centered", "leave_one_out", "standardized"])
def test_retained_conditional_matches_enumeration(G, estimator):
    """E[g | 0<K<G] from enumerating only mixed groups equals E[g] / alpha (seed 000 section 4)."""
    for p in SMALL_P[1:-1]:
        expected = _reference_gradient(p, G, estimator, retained_only=True)
        got = theory.retained_conditional_gradient(p, G, estimator)
        assert float(got) == pytest.approx(float(expected), rel=1e-12)


def test_enumeration_of_an_advantage_function():
    """expected_gradient_of scores torch advantage functions like the enumeration does."""

    def standardized(r):  # Bessel z-scores; an all-equal group's centred rewards are exactly 0
        return advantages(r, "bessel", 1e-6)

    functions = {
        "reinforce": lambda r: r.clone(),
        "centered": lambda r: advantages(r, "none"),
        "leave_one_out": lambda r: advantages(r, "leave_one_out"),
    }
    for G in (2, 4, 6):
        for p in SMALL_P:
            for name, fn in functions.items():
                expected = float(_reference_gradient(p, G, name))
                assert theory.expected_gradient_of(fn, p, G) == pytest.approx(expected, rel=1e-12, abs=1e-15)
            expected = float(_reference_gradient(p, G, "standardized", "bessel", 1e-6))
            assert theory.expected_gradient_of(standardized, p, G) == pytest.approx(expected, rel=1e-12, abs=1e-15)


# ---------------------------------------------------------------------- properties
@settings(max_examples=200, deadline=None)
@given(p=probabilities, G=group_sizes)
def test_retention_is_symmetric(p, G):
    """alpha(p) = alpha(1-p), and alpha + degenerate = 1 exactly."""
    assert theory.retention_probability(p, G) == theory.retention_probability(1 - p, G)
    assert theory.retention_probability(p, G) + theory.degenerate_probability(p, G) == 1


@settings(max_examples=200, deadline=None)
@given(p=probabilities, G=group_sizes)
def test_finite_group_factor_and_leave_one_out(p, G):
    """Centered = (1 - 1/G) x true exactly; leave-one-out and REINFORCE equal the true gradient."""
    true = theory.expected_gradient(p, G, "true")
    assert true == p * (1 - p)
    assert theory.expected_gradient(p, G, "centered") == (1 - Fraction(1, G)) * true
    assert theory.expected_gradient(p, G, "leave_one_out") == true
    assert theory.expected_gradient(p, G, "reinforce") == true


@settings(max_examples=200, deadline=None)
@given(p=probabilities)
def test_group_of_two_standardized_is_true(p):
    """For G=2 the standardized expectation is exactly p(1-p) (seed 000)."""
    assert theory.expected_gradient(p, 2, "standardized") == pytest.approx(float(p * (1 - p)), rel=1e-12, abs=1e-300)


@settings(max_examples=200, deadline=None)
@given(p=probabilities, G=group_sizes)
def test_bessel_is_a_fixed_factor_without_stabilizer(p, G):
    """With eps=0, Bessel = sqrt((G-1)/G) x population."""
    population = theory.expected_gradient(p, G, "standardized")
    bessel = theory.expected_gradient(p, G, "standardized", std="bessel")
    assert bessel == pytest.approx(math.sqrt((G - 1) / G) * population, rel=1e-12, abs=1e-300)


# --------------------------------------------------------- inputs, edges and errors
def test_probability_spellings_agree():
    """0.1, "0.1", "1/10" and Fraction(1, 10) are the same probability."""
    values = {theory.expected_gradient(p, 8, "centered") for p in (0.1, "0.1", "1/10", Fraction(1, 10))}
    assert values == {Fraction(63, 800)}


def test_never_retained_questions():
    """At p in {0, 1} nothing is retained: infinite retries, and the conditional gradient is refused."""
    for p in (0, 1, "0", 1.0):
        assert theory.expected_responses_per_retained_group(p, 8) == math.inf
        assert theory.expected_groups_per_retained_group(p, 8) == math.inf
        with pytest.raises(ValueError, match="retention probability is 0"):
            theory.retained_conditional_gradient(p, 8, "centered")


@pytest.mark.parametrize("estimator", ["reinforce", "true"])
def test_conditional_refuses_estimators_alive_on_equal_groups(estimator):
    """REINFORCE (and the true gradient) do not vanish on rejected groups, so E[g]/alpha is refused."""
    with pytest.raises(ValueError, match="zero on all-equal groups"):
        theory.retained_conditional_gradient("0.3", 8, estimator)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"G": 1}, "Expected argument `G` to be an int >= 2 but got 1"),
        ({"G": True}, "Expected argument `G` to be an int >= 2 but got True"),
        ({"G": 4.0}, "Expected argument `G` to be an int >= 2 but got 4.0"),
        ({"p": 1.5}, r"Expected argument `p` to be a probability in \[0, 1\] but got 1.5"),
        ({"p": "abc"}, r"Expected argument `p` to be a probability in \[0, 1\] but got 'abc'"),
        ({"p": math.nan}, r"Expected argument `p` to be a probability in \[0, 1\] but got nan"),
        ({"estimator": "grpo"}, "Expected argument `estimator` to be one of true, reinforce"),
        ({"std": "sample"}, "Expected argument `std` to be one of population, bessel but got 'sample'"),
        ({"eps": -1e-6}, "Expected argument `eps` to be a finite number >= 0 but got -1e-06"),
    ],
    ids=["G=1", "G=True", "G=4.0", "p=1.5", "p=abc", "p=nan", "estimator", "std", "eps"],
)
def test_worded_errors(kwargs, message):
    """Invalid arguments raise errors naming the argument, what was expected and what came."""
    arguments = {"p": "0.5", "G": 8, "estimator": "standardized", "std": "population", "eps": 0.0} | kwargs
    with pytest.raises(ValueError, match=message):
        theory.expected_gradient(arguments.pop("p"), arguments.pop("G"), arguments.pop("estimator"), **arguments)


def test_advantage_function_errors():
    """A badly shaped or non-finite advantage function is reported with the rewards it got."""
    with pytest.raises(ValueError, match=r"returned shape \(4,\) for rewards of shape \(1, 4\)"):
        theory.expected_gradient_of(lambda r: r[0], "0.5", 4)
    with pytest.raises(ValueError, match="non-finite advantages"):
        theory.expected_gradient_of(lambda r: (r - r.mean()) / r.std(), "0.5", 4)
    with pytest.raises(TypeError, match="`advantage_fn` to be callable"):
        theory.expected_gradient_of("centered", "0.5", 4)


def test_theory_tables_layout():
    """theory_tables returns one gradient row and one ledger row per p, NaN ratios where true is 0."""
    tables = theory.theory_tables(8, ["0", "0.1"], std="bessel", eps=1e-6)
    assert [row["p"] for row in tables["gradient"]] == [0.0, 0.1]
    assert math.isnan(tables["gradient"][0]["standardized_ratio"])
    assert tables["gradient"][1]["centered_ratio"] == 0.875
    assert tables["ledger"][0]["responses_per_retained"] == math.inf
    assert tables["ledger"][1]["responses_per_retained"] == pytest.approx(14.0466, abs=5e-5)
    expected = theory.expected_gradient("0.1", 8, "standardized", std="bessel", eps=1e-6)
    assert tables["gradient"][1]["standardized"] == expected
    with pytest.raises(ValueError, match="`ps` to be a non-empty sequence"):
        theory.theory_tables(8, [])
