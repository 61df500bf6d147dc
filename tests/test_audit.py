"""`grpo-monitor audit`: verdicts on real-world-style advantage functions, correct and broken."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from grpo_monitor.tools.audit import audit, load_function
from grpo_monitor.tools.cli import main

#: Advantage functions as users write them, each in the style of a known trainer or bug.
FUNCTIONS = textwrap.dedent('''
    import torch

    def population(r):            # DeepSeekMath eq. 5, computed in float64, all-equal groups exactly 0
        r64 = r.double()
        s = r64.std(1, keepdim=True, correction=0)
        return torch.where(s > 0, (r64 - r64.mean(1, keepdim=True)) / (s + 1e-6), 0.0)

    def trl(r):                   # TRL scale_rewards="group": torch.std (Bessel) + 1e-4
        return (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)

    def trl_batch(r):             # TRL scale_rewards="batch": one std for the whole batch
        return (r - r.mean(1, keepdim=True)) / (r.std() + 1e-4)

    def verl(r):                  # verl compute_grpo_outcome_advantage: torch.std + 1e-6, in the rewards' dtype
        return (r - r.mean(1, keepdim=True)) / (torch.std(r, dim=1, keepdim=True) + 1e-6)

    def verl_float64(r):          # the same in float64
        r = r.double()
        return (r - r.mean(1, keepdim=True)) / (torch.std(r, dim=1, keepdim=True) + 1e-6)

    def dr_grpo(r):               # Dr. GRPO: mean-centred, no std
        return r - r.mean(1, keepdim=True)

    def rloo(r):                  # leave-one-out baseline
        return r - (r.sum(1, keepdim=True) - r) / (r.shape[1] - 1)

    def wrong_axis(r):            # statistics over the prompt axis
        return (r - r.mean(0, keepdim=True)) / (r.std(0, keepdim=True, correction=0) + 1e-6)

    def misaligned(r):            # right advantages, rolled by one response inside each group
        return population(r).roll(1, dims=1)

    def nan_as_zero(r):           # unscorable rewards counted as 0
        return population(torch.nan_to_num(r, nan=0.0))

    def no_stabilizer(r):         # 0/0 on all-equal groups
        return (r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True, correction=0)
''')

#: name -> (convention, stabilizer or None, invariants broken or warned about)
VERDICTS = {
    "population": ("population", 1e-6, set()),
    "trl": ("bessel", 1e-4, set()),
    "trl_batch": ("batch", None, set()),
    "verl": ("bessel", 1e-6, {"degenerate_zero"}),  # float32 constant 0.7-groups: |A| ~ 0.06, a warning
    "verl_float64": ("bessel", 1e-6, set()),
    "dr_grpo": ("none", None, set()),
    "rloo": ("leave_one_out", None, set()),
    "wrong_axis": ("custom", None,
                   {"zero_group_mean", "affine_in_rewards", "degenerate_zero", "permutation_equivariance"}),
    "misaligned": ("custom", None, {"affine_in_rewards", "permutation_equivariance"}),
    "nan_as_zero": ("population", 1e-6, {"unscorable_rows", "zero_group_mean"}),
    "no_stabilizer": ("population", 0.0, {"finite"}),
}

#: name -> (verdict, exit code, the registry entry named first)
EXITS = {
    "population": ("ok", 0, "population"),
    "trl": ("ok", 0, "trl.group"),
    "trl_batch": ("ok", 0, "trl.batch"),
    "verl": ("ok", 0, "verl.grpo"),
    "verl_float64": ("ok", 0, "verl.grpo"),
    "dr_grpo": ("ok", 0, "none"),
    "rloo": ("ok", 0, "leave_one_out"),
    "wrong_axis": ("broken", 1, None),
    "misaligned": ("broken", 1, None),
    "nan_as_zero": ("broken", 1, "population"),  # right on scorable rewards, wrong on NaN rows
    "no_stabilizer": ("broken", 1, None),
}

#: Seed 000's table at G = 8 (population std, no stabilizer): standardized mean / true gradient.
SEED_STANDARDIZED = {0.01: 0.0258277 / 0.009900, 0.1: 0.2094920 / 0.090000, 0.5: 0.4639140 / 0.250000}


@pytest.fixture(scope="module")
def module_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user") / "advfns.py"
    path.write_text(FUNCTIONS)
    return path


@pytest.fixture(scope="module")
def results(module_file):
    """The audit of every function in FUNCTIONS at G = 8."""
    return {name: audit(load_function(f"{module_file}:{name}"), 8, name=name) for name in VERDICTS}


@pytest.mark.parametrize("name", list(VERDICTS), ids=list(VERDICTS))
def test_verdict(results, name):
    """The inferred convention, stabilizer and broken invariants match what the function really computes."""
    convention, stabilizer, broken = VERDICTS[name]
    r = results[name]
    assert r.convention == convention
    if stabilizer is None:
        assert r.stabilizer is None
    else:
        assert r.stabilizer == pytest.approx(stabilizer, rel=1e-3, abs=1e-9)
    assert {v["invariant"] for v in r.violations} == broken


@pytest.mark.parametrize("name", list(EXITS), ids=list(EXITS))
def test_verdict_and_exit_code(results, name):
    """Sound functions exit 0 and name their registry entry; broken ones exit 1; warnings never count."""
    verdict, code, inferred = EXITS[name]
    r = results[name]
    assert (r.verdict, r.exit_code, r.inferred) == (verdict, code, inferred)
    assert (inferred in r.matches) if inferred else not r.matches or r.verdict == "broken"


@pytest.mark.parametrize("name,equivariant,independent", [
    ("population", True, True), ("trl_batch", True, False), ("wrong_axis", False, False), ("misaligned", False, True),
], ids=["population", "batch-std", "wrong-axis", "misaligned"])
def test_equivariance_and_batch_independence(results, name, equivariant, independent):
    """Permuting responses inside a group moves their advantages with them; per-group conventions ignore the rest."""
    assert (results[name].equivariant, results[name].batch_independent) == (equivariant, independent)


@pytest.mark.parametrize("name,verdict", [
    ("population", "group_dropped"), ("trl", "propagates"), ("nan_as_zero", "counted"),
], ids=["dropped", "propagates", "counted"])
def test_nan_rows_verdict(results, name, verdict):
    """Unscorable rewards are classified; only the silent miscount is a violation."""
    assert results[name].nan_rows == verdict


def test_violation_carries_an_example(results):
    """A violation comes with the rewards and advantages of an offending group, its dtype and severity."""
    v = next(v for v in results["verl"].violations if v["invariant"] == "degenerate_zero")
    assert (v["probe"], v["dtype"], v["severity"]) == ("constant", "float32", "warning")
    ex = v["example"]
    assert len(set(ex["rewards"])) == 1 and abs(ex["advantages"][0]) > 0.01


def test_expected_gradient_matches_seed_table(results):
    """Exact enumeration reproduces seed 000: ratios 2.61/2.33/1.86 (population std), 7/8 (centred), 1 (RLOO)."""
    rows = {row["p"]: row for row in results["population"].gradient}
    for p, ratio in SEED_STANDARDIZED.items():
        assert rows[p]["ratio"] == pytest.approx(ratio, rel=2e-5)  # the stabilizer 1e-6 moves the 6th digit
    assert all(row["ratio"] == pytest.approx(7 / 8, rel=1e-12) for row in results["dr_grpo"].gradient)
    assert all(row["ratio"] == pytest.approx(1.0, rel=1e-12) for row in results["rloo"].gradient)
    assert rows[0.01]["true"] == pytest.approx(0.0099, rel=1e-12)


def test_expected_gradient_undefined_when_nan(results):
    """A function that returns NaN on all-equal groups has no expected gradient; the table says why."""
    assert all(row["ratio"] is None and "non-finite" in row["error"] for row in results["no_stabilizer"].gradient)


def test_declared_convention_mismatch_is_a_violation(module_file):
    """With expect="population", a Bessel function breaks the convention invariant, worded as such."""
    r = audit(load_function(f"{module_file}:verl_float64"), 8, expect="population")
    assert [v["invariant"] for v in r.violations] == ["convention"]
    assert (r.expected, r.expected_fits, r.inferred, r.exit_code) == ("population", False, "verl.grpo", 1)
    assert "Bessel std (torch.std's default, correction=1) where population std" in r.violations[0]["hint"]


def test_cli_json_and_exit_codes(module_file, monkeypatch, capsys):
    """--json prints one object with verdict, match, convention and violations; exit 0 when sound, 1 when broken."""
    monkeypatch.chdir(module_file.parent)  # dotted import from the current folder
    assert main(["audit", "advfns:rloo", "--json"]) == 0
    clean = json.loads(capsys.readouterr().out)
    assert clean["convention"] == "leave_one_out" and clean["violations"] == []
    assert (clean["verdict"], clean["inferred"], clean["exit_code"], clean["error"]) == ("ok", "leave_one_out", 0, None)
    assert {"leave_one_out", "verl.rloo", "openrlhf.rloo"} <= set(clean["matches"])
    assert main(["audit", "advfns:wrong_axis", "--json", "--group-size", "4"]) == 1
    broken = json.loads(capsys.readouterr().out)
    assert broken["group_size"] == 4 and {"zero_group_mean", "permutation_equivariance"} <= {
        v["invariant"] for v in broken["violations"]}


def test_cli_text_output(module_file, capsys):
    """The text report names the convention, the broken invariant with an example, and the gradient table."""
    assert main(["audit", f"{module_file}:verl"]) == 0  # the float32 residue is a warning
    text = capsys.readouterr().out
    assert "verdict               OK: matches verl.grpo: (r - mean_g) / (torch.std_g + 1e-6)" in text
    assert "(eps fitted 1.0e-06)" in text
    assert "bessel (stabilizer 1e-06)" in text and "degenerate_zero (warning) (probes: constant@float32)" in text
    assert "e.g. rewards [0.7, 0.7" in text and "Expected gradient vs the true gradient" in text


@pytest.mark.parametrize("spec,message", [
    ("no_colon", "expected MODULE:FUNCTION"),
    ("/nonexistent/x.py:f", "does not exist"),
    ("FILE:missing", "has no attribute"),
], ids=["no-colon", "missing-file", "missing-function"])
def test_cli_load_errors(module_file, capsys, spec, message):
    """An unloadable MODULE:FUNCTION exits 2 with a worded error."""
    assert main(["audit", spec.replace("FILE", str(module_file))]) == 2
    assert message in capsys.readouterr().err
