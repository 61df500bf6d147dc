"""The integration scripts in examples/ run on CPU, print what they promise and what the monitor concluded (in its
words and severity, as their JSONL log holds it), and leave no temporary folder behind (launched at once, then
checked)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from grpo_monitor.sinks import read_jsonl

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPECTED = {
    "torch_loop.py": ["step 4: reward", "5 steps logged (0 to 4): no violations"],
    "custom_loop.py": ["after 100 steps; convention bessel", "100 steps logged (0 to 99)"],
    "demo_plain.py": ["final degenerate rate", "200 steps logged (0 to 199)"],
    "hf_trainer_example.py": ["step 4: degenerate rate"],
    # TRL's own frac_reward_zero_std misses the constant 0.7 group: the trainer_metric warning (issue 30), no error
    "trl_example.py": ["step 3: degenerate rate 0.50 (TRL frac_reward_zero_std 0.00, gap 0.50)", "violations 1",
                       "invariant 'trainer_metric' warning", "no errors"],
    "verl_example.py": ["step 1: degenerate rate 0.25", "warning: step 1: invariant 'degenerate_zero' warning",
                        "detached: True"],
    "distributed_example.py": ["step 1: 8 groups over 2 ranks", "rank 0 stopped at step 2", "rank 1 stopped at step 2",
                               "['grpo-rank0.jsonl'] (rank 0 only)"],
}
#: The JSONL log each example writes under its --out folder.
LOG = {"custom_loop.py": "monitor.jsonl", "demo_plain.py": "monitor.jsonl",
       "torch_loop.py": "grpo.jsonl", "hf_trainer_example.py": "grpo.jsonl", "trl_example.py": "grpo.jsonl",
       "verl_example.py": "grpo.jsonl", "distributed_example.py": "grpo-rank0.jsonl"}
_PRINTED = re.compile(r"^\s+(error|warning): step (\d+): invariant '(\w+)' (broken|warning)", re.M)
_COUNTS = re.compile(r"^(\d+) steps? logged[^:]*: "
                     r"(?:no violations|(no errors|\d+ errors?), (no warnings|\d+ warnings?))", re.M)


def _env(tmpdir: Path) -> dict[str, str]:
    tmpdir.mkdir(parents=True, exist_ok=True)
    return dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false",
                OMP_NUM_THREADS="1", TMPDIR=str(tmpdir))


def _ours(tmpdir: Path) -> list[str]:
    """The examples' own temporary folders left in ``tmpdir`` (grpo-*; torch's caches are not theirs)."""
    return sorted(p.name for p in tmpdir.glob("grpo-*"))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Run every example concurrently (each with a 600 s limit, its files under --out); name -> (exit code,
    output, the --out folder)."""
    cwd = tmp_path_factory.mktemp("examples")
    env = _env(cwd / "tmp")
    procs = {name: subprocess.Popen([sys.executable, str(EXAMPLES / name), "--out", str(cwd / name)], cwd=cwd,
                                    env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for name in EXPECTED}
    results = {}
    for name, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        results[name] = (proc.returncode, out, cwd / name)
    assert _ours(cwd / "tmp") == [], "an example left a temporary folder although --out was given"
    return results


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name, outputs):
    """The script exits 0 and prints its expected lines."""
    code, out, _ = outputs[name]
    assert code == 0, out[-3000:]
    for line in EXPECTED[name]:
        assert line in out, f"{line!r} missing from:\n{out[-3000:]}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_printed_severities_are_the_logs(name, outputs):
    """Every violation the script prints carries the severity its JSONL log gives it, each logged one is printed,
    and the closing count line states the log's steps, errors and warnings."""
    _, out, folder = outputs[name]
    logged = [(r["step"], v["invariant"], v["severity"]) for r in read_jsonl(folder / LOG[name])
              for v in r["violations"]]
    printed = [(int(step), inv, sev) for sev, step, inv, word in _PRINTED.findall(out)
               if word == ("broken" if sev == "error" else "warning")]
    assert len(printed) == len(_PRINTED.findall(out)), "a printed severity contradicts the message's own word"
    assert set(printed) == set(logged), (printed, logged)
    assert "breach" not in out.lower() or any(s == "error" for _, _, s in logged)
    counts = _COUNTS.search(out)
    assert counts, out[-2000:]
    steps = len({r["step"] for r in read_jsonl(folder / LOG[name])})
    severities = Counter(s for _, _, s in logged)
    assert int(counts[1]) == steps
    if logged:
        assert counts[2] == (f"{severities['error']} error" if severities["error"] else "no errors") + \
            ("s" if severities["error"] > 1 else "")
        assert counts[3] == (f"{severities['warning']} warning" if severities["warning"] else "no warnings") + \
            ("s" if severities["warning"] > 1 else "")


def test_an_example_without_out_cleans_up(tmp_path):
    """Run without --out, an example writes to a temporary folder and removes it at the end."""
    out = subprocess.run([sys.executable, str(EXAMPLES / "torch_loop.py"), "--steps", "2"], cwd=tmp_path,
                         env=_env(tmp_path / "tmp"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "log removed with its temporary folder" in out.stdout
    assert _ours(tmp_path / "tmp") == [] and not list(tmp_path.glob("*.jsonl"))


def test_torch_loop_bug_stops_the_run(tmp_path):
    """``torch_loop.py --bug`` (std over the prompt axis) is stopped at step 0 with a worded breach."""
    out = subprocess.run([sys.executable, str(EXAMPLES / "torch_loop.py"), "--bug", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert "stopped by grpo-monitor" in out.stdout and "zero_group_mean" in out.stdout
