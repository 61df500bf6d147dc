"""The teaching demo: end to end through the CLI, its numbers against exact theory, every injected bug."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpo_monitor import GRPOMonitor, MonitorConfig, load_repro
from grpo_monitor.sinks.jsonl import read_jsonl
from grpo_monitor.tools.cli import main
from grpo_monitor.tools.demo import BUGS, DemoConfig, DemoTrainer, run_demo
from grpo_monitor.tools.demo.run import monitor_config


@pytest.fixture(autouse=True)
def _one_thread():
    """The demo's tensors hold a few hundred numbers: one intra-op thread, as run_demo uses."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _degenerate(p: float, G: int) -> float:
    """Independent reference: probability that G iid Bernoulli(p) draws are all equal."""
    return p**G + (1 - p) ** G


def _drive(config: DemoConfig, tmp_path: Path, steps: int):
    """Run the trainer step by step; return (reports, theory rows, success probabilities before each step)."""
    trainer = DemoTrainer(config, GRPOMonitor(monitor_config(config, tmp_path)))
    reports, rows, probs = [], [], []
    for _ in range(steps):
        probs.append(trainer.policy.success_prob().clone())
        report, row = trainer.step()
        reports.append(report)
        rows.append(row)
    return trainer, reports, rows, probs


# ------------------------------------------------------------------------------ end to end
def test_demo_cli_writes_every_output(tmp_path, capsys):
    """`grpo-monitor demo` trains, logs JSONL + TensorBoard + theory, writes the report and prints a summary."""
    out = tmp_path / "run"
    rc = main(["demo", "--out", str(out), "--steps", "30", "--no-progress", "--no-wandb"])
    text = capsys.readouterr().out
    assert rc == 0
    records = read_jsonl(out / "monitor.jsonl")
    assert [r["step"] for r in records] == list(range(30))
    assert all(r["violations"] == [] and r["convention"] == "population" for r in records)
    assert "grpo/kl/k3_mean" in records[-1]["metrics"] and "grpo/reward/question_std" in records[-1]["histograms"]
    assert len((out / "theory.jsonl").read_text().splitlines()) == 30
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert (out / "report.html").stat().st_size > 10_000 and (out / "plots" / "degenerate.png").is_file()
    assert json.loads((out / "run.json").read_text())["group_size"] == 8
    for expected in ("degenerate rate, training batch", "exact p^G + (1-p)^G", "KL to the reference",
                     "violations: none"):
        assert expected in text


def test_demo_rerun_replaces_the_log(tmp_path):
    """A second run into the same folder starts a fresh log instead of appending to the old one."""
    for steps in (6, 4):
        run_demo(DemoConfig(steps=steps), tmp_path, wandb=False, tensorboard=False, progress=False, report=False)
    assert [r["step"] for r in read_jsonl(tmp_path / "monitor.jsonl")] == [0, 1, 2, 3]


def test_demo_writes_a_wandb_offline_run(tmp_path):
    """With W&B installed, the demo leaves an offline run holding the monitor's history rows."""
    pytest.importorskip("wandb")
    from grpo_monitor.sinks.wandb_reader import history_rows, wait_for_exit

    run_demo(DemoConfig(steps=3), tmp_path, wandb=True, tensorboard=False, progress=False, report=False)
    files = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    rows = history_rows(wait_for_exit(files[0]))  # W&B's service may flush after finish() returns
    assert sum("grpo/groups/degenerate_rate" in row for row in rows) == 3


# ------------------------------------------------------------------------- theory holds
def test_degenerate_rate_follows_p_to_the_G(tmp_path):
    """Observed degenerate groups match sum of p^G + (1-p)^G from the policy's own sigmoid(z_q), within sampling
    error."""
    config = DemoConfig(steps=150)
    _, reports, rows, probs = _drive(config, tmp_path, config.steps)
    G, observed, expected, var = config.group_size, 0.0, 0.0, 0.0
    for report, row, p_all in zip(reports, rows, probs, strict=True):
        assert all(any(abs(p - q) < 1e-12 for q in p_all.tolist()) for p in row.trained_p)  # p at sampling time
        d = [_degenerate(p, G) for p in row.trained_p]
        observed += report.metrics["grpo/groups/degenerate_rate"] * report.metrics["grpo/groups/total"]
        expected += sum(d)
        var += sum(x * (1 - x) for x in d)
    z = (observed - expected) / math.sqrt(var)
    assert abs(z) < 4, f"observed {observed} vs expected {expected:.1f} degenerate groups (z = {z:.2f})"
    first = sum(r.metrics["grpo/groups/degenerate_rate"] for r in reports[:30]) / 30
    last = sum(r.metrics["grpo/groups/degenerate_rate"] for r in reports[-30:]) / 30
    assert last > first + 0.1, "the degenerate rate rises as questions saturate"


def test_dynamic_sampling_ledger_follows_G_over_alpha(tmp_path):
    """Generated groups per step match groups_per_step / mean alpha(p_q) (negative binomial), degenerate share
    matches p^G + (1-p)^G."""
    config = DemoConfig(steps=80, dynamic_sampling=True, max_gen_batches=50)
    _, reports, rows, probs = _drive(config, tmp_path, config.steps)
    G, B = config.group_size, config.groups_per_step
    gen, gen_expected, gen_var, deg, deg_expected, deg_var = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for report, row, p_all in zip(reports, rows, probs, strict=True):
        m = report.metrics
        assert m["grpo/sampling/retained_groups"] == B and m["grpo/groups/degenerate_rate"] == 0.0
        alpha = float(torch.mean(1 - p_all**G - (1 - p_all) ** G))  # attempts redraw the question uniformly
        gen += m["grpo/sampling/generated_groups"]
        gen_expected += B / alpha
        gen_var += B * (1 - alpha) / alpha**2
        expected_responses = G * m["grpo/sampling/generated_groups"] / B
        assert m["grpo/sampling/responses_per_retained_group"] == pytest.approx(expected_responses)
        d = [_degenerate(p, G) for p in row.generated_p]
        deg += m["grpo/sampling/generated_degenerate_rate"] * m["grpo/sampling/generated_groups"]
        deg_expected += sum(d)
        deg_var += sum(x * (1 - x) for x in d)
    for name, obs, exp, var in (("generated groups", gen, gen_expected, gen_var),
                                ("degenerate", deg, deg_expected, deg_var)):
        z = (obs - exp) / math.sqrt(var)
        assert abs(z) < 4, f"{name}: observed {obs} vs expected {exp:.1f} (z = {z:.2f})"


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "dynamic-sampling"])
def test_kl_estimators_match_exact_expectation(tmp_path, dynamic):
    """With the policy frozen, k1 and k3 per token average to their exact expectation on the trained responses.

    Without filtering that is KL(policy || reference). Dynamic sampling keeps question q with
    probability alpha_q and its retained answers are correct with probability
    p' = (p - p^G) / alpha, so the expectation moves away from the KL.
    """
    config = DemoConfig(steps=60, dynamic_sampling=dynamic, max_gen_batches=50)
    trainer, *_ = _drive(config, tmp_path, config.steps)
    trainer.config.lr = 0.0
    reports = [trainer.step()[0] for _ in range(40)]
    G, T, pol, ref = config.group_size, config.max_len, trainer.policy, trainer.reference
    p, p_ref = torch.sigmoid(pol.z.detach().double()), torch.sigmoid(ref.z.double())
    alpha = 1 - p**G - (1 - p) ** G
    seen, weight = ((p - p**G) / alpha, alpha) if dynamic else (p, torch.ones_like(p))
    log_ratio_1, log_ratio_0 = torch.log(p_ref / p), torch.log((1 - p_ref) / (1 - p))
    lw, lw_ref = torch.log_softmax(pol.w.detach().double(), -1), torch.log_softmax(ref.w.double(), -1)
    kl_reasoning = (lw.exp() * (lw - lw_ref)).sum(-1)  # reasoning tokens are never filtered
    mean_len = (T + 1) / 2  # lengths uniform on 1..T; the last token is the answer
    for key, per_answer in (
        ("grpo/kl/k1_mean", -(seen * log_ratio_1 + (1 - seen) * log_ratio_0)),
        ("grpo/kl/k3_mean",
         seen * (log_ratio_1.exp() - log_ratio_1 - 1) + (1 - seen) * (log_ratio_0.exp() - log_ratio_0 - 1)),
    ):
        per_question = ((mean_len - 1) * kl_reasoning + per_answer) / mean_len
        exact = float((weight * per_question).sum() / weight.sum())
        tokens = [r.metrics["grpo/tokens/valid"] for r in reports]
        estimate = sum(r.metrics[key] * n for r, n in zip(reports, tokens, strict=True)) / sum(tokens)
        assert estimate == pytest.approx(exact, rel=0.15), key
    assert all(r.metrics["grpo/kl/k3_neg_frac"] == 0 for r in reports)


# ------------------------------------------------------------------------------ the bugs
@pytest.mark.parametrize("name", sorted(BUGS), ids=sorted(BUGS))
def test_injected_bug_stops_the_run(tmp_path, name):
    """Each injected bug ends the run at once with one of the invariants it is known to break, and a loadable repro."""
    result = run_demo(DemoConfig(steps=5), tmp_path, bug=name, wandb=False, tensorboard=False, progress=False,
                      report=False)
    assert result.failed and len(result.reports) == 0
    broken = {v.invariant for v in result.failure.violations}
    assert broken & set(BUGS[name].invariants), f"{name} broke {broken}, expected one of {BUGS[name].invariants}"
    path = result.failure.violations[0].repro_path
    assert path and Path(path).parent == tmp_path / "repro"
    assert load_repro(path)["step"] == 0
    last = read_jsonl(tmp_path / "monitor.jsonl")[-1]
    assert last["failed"] and {v["invariant"] for v in last["violations"]} == broken


def test_inject_bug_cli_exits_nonzero_with_message_and_repro(tmp_path, capsys):
    """`demo --inject-bug` exits 1 and prints the InvariantViolation message and the repro path."""
    out = tmp_path / "bug"
    rc = main(["demo", "--inject-bug", "wrong_axis", "--out", str(out), "--steps", "5", "--no-progress", "--no-wandb"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "injected bug 'wrong_axis'" in err and "InvariantViolation" in err and "zero_group_mean" in err
    repro = [line.split("Repro file: ")[1] for line in err.splitlines() if line.startswith("Repro file: ")]
    assert repro and Path(repro[0]).is_file()
    assert "Run stopped at step 0" in (out / "report.html").read_text()


def test_list_bugs(capsys):
    """`demo --list-bugs` names every bug with the invariants that catch it."""
    assert main(["demo", "--list-bugs"]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in BUGS)


@pytest.mark.parametrize("field,value", [("group_size", 1), ("steps", 0), ("groups_per_step", 100)],
                         ids=["group-size-1", "zero-steps", "more-groups-than-questions"])
def test_demo_config_errors_are_worded(field, value):
    """Bad settings fail at construction with the argument's name."""
    with pytest.raises(ValueError, match=field):
        DemoConfig(**{field: value})


# ------------------------------------------------------------------------------ examples
def _run_example(name: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_demo_plain_example(tmp_path):
    """examples/demo_plain.py trains cleanly: 200 logged steps, no violation, the degenerate rate rises."""
    done = _run_example("demo_plain.py", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_jsonl(tmp_path / "runs" / "demo_plain" / "monitor.jsonl")
    assert len(records) == 200 and not any(r["violations"] for r in records)
    rate = [r["metrics"]["grpo/groups/degenerate_rate"] for r in records]
    assert sum(rate[-50:]) / 50 > sum(rate[:50]) / 50 + 0.1
    assert "grpo/kl/k3_mean" in records[-1]["metrics"]


@pytest.mark.slow
def test_custom_loop_example(tmp_path):
    """examples/custom_loop.py learns, keeps the declared Bessel convention, and checkpoints the monitor state."""
    done = _run_example("custom_loop.py", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_jsonl(tmp_path / "runs" / "custom_loop" / "monitor.jsonl")
    assert not any(r["violations"] for r in records)
    assert {r["convention"] for r in records} - {None} == {"bessel"}  # None: a step whose groups all agreed
    reward = [r["metrics"]["grpo/reward/mean"] for r in records]
    assert sum(reward[-20:]) / 20 > sum(reward[:20]) / 20 + 0.2
    assert records[-1]["metrics"]["grpo/ratio/clip_frac"] > 0  # the second inner epoch moves the ratio
    state = torch.load(tmp_path / "runs" / "custom_loop" / "checkpoint.pt", weights_only=False)["monitor"]
    fresh = GRPOMonitor(MonitorConfig(group_size=state["config"]["group_size"], std_convention="bessel"))
    fresh.load_state_dict(state)  # the run's own declared estimator: taken (another one is refused by default)
    assert fresh.step == len(records)
