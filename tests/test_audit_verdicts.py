"""`grpo-monitor audit` verdicts: float32 functions are not blamed for rounding, real bugs exit 1 with the
right cause, functions that do not run exit 2 with the reason, in text and --json, as users run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_monitor.tools.audit import audit, load_function
from grpo_monitor.tools.audit.probes import make_probes, offset_for
from grpo_monitor.tools.cli import main

#: Advantage functions written as trainers write them: float32 arithmetic, some with a bug.
FUNCTIONS = textwrap.dedent('''
    import torch

    SEEN = set()

    def trl32(r):                 # TRL's arithmetic in float32: what every framework does
        r = r.float()
        return (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)

    def verl32(r):
        r = r.float()
        return (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)

    def recorder(r):              # remembers the dtypes it was given
        SEEN.add(r.dtype)
        return r - r.mean(1, keepdim=True)

    def std_over_dim0(r):         # the std over the prompt axis
        r = r.float()
        return (r - r.mean(1, keepdim=True)) / (r.std(0, keepdim=True) + 1e-6)

    def sign_flip(r):
        return -verl32(r)

    def nan_as_zero(r):           # unscorable rewards counted as 0
        return trl32(torch.nan_to_num(r, nan=0.0))

    def bessel(r):                # declared population, computes Bessel
        return verl32(r)

    def eps_floor(r):             # an epsilon used as a floor, in float32
        r = r.float()
        return (r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True).clamp(min=1e-8)

    def shifted(r):               # a constant added: constant groups get nonzero advantages in float64 too
        return r - r.mean(1, keepdim=True) + 0.01

    def batch_mean(r):            # the batch mean as the baseline
        r = r.float()
        return (r - r.mean()) / (r.std(1, keepdim=True) + 1e-4)

    def float64_only(r):
        assert r.dtype == torch.float64, "expected float64 rewards"
        return r - r.mean(1, keepdim=True)

    def raises(r):
        raise RuntimeError("no GPU")

    def returns_none(r):
        (r - r.mean(1, keepdim=True)).div_(2)

    def returns_list(r):
        return (r - r.mean(1, keepdim=True)).tolist()

    def flat(r):
        return (r - r.mean(1, keepdim=True)).reshape(-1)
''')

#: name -> (the cause the verdict names, a hint that must not appear)
BUGS = {
    "std_over_dim0": ("statistics over the wrong axis", "float32 rounding"),
    "sign_flip": ("sign flip: the negated advantages match verl.grpo", "wrong axis"),
    "nan_as_zero": ("unscorable (NaN) rewards enter the group statistics", "float32 rounding"),
    "eps_floor": ("divided by a tiny stabilizer or an epsilon used as a floor", "wrong axis"),
    "shifted": ("all-equal groups get nonzero advantages even on 0/1 rewards", "float32 rounding"),
    "batch_mean": ("a baseline over the whole batch instead of each group's mean", "float32 rounding"),
}

#: name -> the reason a function that does not run is given
NOT_RUNNING = {
    "raises": "raised RuntimeError: no GPU (on every probe of 0/1 and of continuous rewards, in float64 and float32)",
    "returns_none": "returned None for rewards of shape (18, 8); return the advantages as a tensor of shape (18, 8)",
    "returns_list": "returned a list, not a torch.Tensor, for rewards of shape (18, 8)",
    "flat": "returned shape (144,) for rewards of shape (18, 8); return one advantage per reward, shape (18, 8)",
}


@pytest.fixture(scope="module")
def module_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user32") / "adv32.py"
    path.write_text(FUNCTIONS)
    return path


def _errors(result) -> set[str]:
    return {v["invariant"] for v in result.violations if v["severity"] == "error"}


def test_every_probe_runs_in_float64_and_float32(module_file):
    """The function sees float64 and float32 rewards, and the offset is one float32 still resolves (not 1e6)."""
    fn = load_function(f"{module_file}:recorder")
    r = audit(fn, 8)
    import torch

    assert sys.modules["_grpo_audit_adv32"].SEEN >= {torch.float64, torch.float32}
    dtypes = ("float64", "float32")
    assert {(p.name, p.dtype) for p in r.probes} == {(p.name, d) for p in make_probes(8) for d in dtypes}
    assert offset_for(8) == 100.0 and "rewards + 100" in next(p.description for p in r.probes if p.name == "offset")


@pytest.mark.parametrize("name,inferred", [("trl32", "trl.group"), ("verl32", "verl.grpo")])
def test_float32_arithmetic_is_not_a_bug(module_file, name, inferred):
    """A function computing in float32 breaks no invariant from rounding: exit 0, and the entry is named."""
    r = audit(load_function(f"{module_file}:{name}"), 8)
    assert (r.verdict, r.exit_code, r.inferred) == ("ok", 0, inferred)
    assert not _errors(r) and not {"zero_group_mean", "affine_in_rewards"} & {v["invariant"] for v in r.violations}


@pytest.mark.parametrize("name", list(BUGS))
def test_real_bugs_exit_1_with_the_right_cause(module_file, name):
    """Each bug is an error whose verdict names the cause its symptoms give away, and not another one."""
    cause, not_this = BUGS[name]
    r = audit(load_function(f"{module_file}:{name}"), 8)
    assert (r.verdict, r.exit_code) == ("broken", 1)
    assert any(cause in c for c in r.causes) or any(cause in v["hint"] for v in r.violations)
    assert not any(not_this in v["hint"] for v in r.violations if v["severity"] == "error")


def test_float32_residue_alone_is_a_warning_named_rounding(module_file):
    """A small constant-group residue of the function's own float32 arithmetic (0/1 constants exact) is 'float32
    rounding' and a warning, even where the monitor could not fit a stabilizer (the signs are flipped)."""
    r = audit(load_function(f"{module_file}:sign_flip"), 8)
    residue = [v for v in r.violations if v["invariant"] == "degenerate_zero"]
    assert residue and {v["probe"] for v in residue} == {"constant"}
    assert all(v["severity"] == "warning" and v["hint"].startswith("float32 rounding") for v in residue)
    assert _errors(r) == {"affine_in_rewards"}


def test_expect_population_on_bessel_exits_1(module_file, capsys):
    """--expect shows the inferred entry beside the expected one, and a Bessel function is not population."""
    assert main(["audit", f"{module_file}:bessel", "--expect", "population"]) == 1
    text = capsys.readouterr().out
    assert "expected              population, inferred verl.grpo: population does NOT reproduce it" in text
    assert "Bessel std (torch.std's default, correction=1) where population std (correction=0) was expected" in text
    assert main(["audit", f"{module_file}:bessel", "--expect", "verl.grpo", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["expected"], out["inferred"], out["expected_fits"], out["verdict"]) == (
        "verl.grpo", "verl.grpo", True, "ok")


@pytest.mark.parametrize("name,message", [
    ("nope", "unknown estimator 'nope'; did you mean 'none'?"),
    ("trl.normalize_then_sum", "takes several reward columns"),
], ids=["unknown", "multi-reward"])
def test_expect_must_name_a_single_reward_entry(module_file, capsys, name, message):
    """--expect takes a registry name the audit can replay; anything else exits 2 with a worded error."""
    assert main(["audit", f"{module_file}:trl32", "--expect", name]) == 2
    assert message in capsys.readouterr().err


def test_raising_in_float32_only_is_a_bug(module_file):
    """A function that refuses float32 rewards (what trainers pass) exits 1, each failing probe a `runs` error."""
    r = audit(load_function(f"{module_file}:float64_only"), 8)
    runs = [v for v in r.violations if v["invariant"] == "runs"]
    assert r.exit_code == 1 and runs and {v["dtype"] for v in runs} == {"float32"}
    assert "AssertionError: expected float64 rewards" in runs[0]["observed"] and "float32" in runs[0]["hint"]


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("name", list(NOT_RUNNING))
def test_function_that_does_not_run_exits_2(module_file, capsys, name, fmt):
    """Raising everywhere, returning None, a list or the wrong shape: verdict error, exit 2, the reason worded."""
    args = ["--json"] if fmt == "json" else []
    assert main(["audit", f"{module_file}:{name}", *args]) == 2
    out = capsys.readouterr().out
    if fmt == "json":
        record = json.loads(out)
        assert (record["verdict"], record["exit_code"], record["violations"]) == ("error", 2, [])
        assert record["error"].startswith("the function does not run: ") and NOT_RUNNING[name] in record["error"]
    else:
        assert "verdict               ERROR: the function does not run: " in out and NOT_RUNNING[name] in out
        assert "violations" not in out


def test_doctests():
    """The probes module's examples hold."""
    import doctest

    import grpo_monitor.tools.audit.probes

    assert doctest.testmod(grpo_monitor.tools.audit.probes).failed == 0


# ------------------------------------------------------------------ as users run it
def _cli(module_file: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "grpo_monitor", "audit", *args], cwd=module_file.parent, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("spec,args,code,expected", [
    ("adv32.py:trl32", (), 0, "verdict               OK: matches trl.group: (r - nanmean_g) / (nanstd_g + 1e-4)"),
    ("adv32.py:std_over_dim0", ("--json",), 1, '"verdict": "broken"'),
    ("adv32:returns_none", ("--json",), 2, '"error": "the function does not run: returned None'),
    ("adv32.py:bessel", ("--expect", "population", "-G", "4"), 1, "expected              population, inferred"),
], ids=["ok", "broken-json", "error-json", "expect"])
def test_cli_subprocess(module_file, spec, args, code, expected):
    """`python -m grpo_monitor audit FILE.py:fn` (or a dotted module from the current folder): exit code and output."""
    done = _cli(module_file, spec, *args)
    assert done.returncode == code, done.stderr[-2000:]
    assert expected in done.stdout
    if "--json" in args:
        assert json.loads(done.stdout)["exit_code"] == code
