"""The integration scripts in examples/ run on CPU and print what they promise (launched at once, then checked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXPECTED = {
    "torch_loop.py": ["step 4: reward", "5 steps monitored"],
    "hf_trainer_example.py": ["step 4: degenerate rate"],
    "trl_example.py": ["step 3: degenerate rate 0.50 (TRL frac_reward_zero_std 0.00, gap 0.50)", "violations 0"],
    "verl_example.py": ["step 1: degenerate rate 0.25", "breach: degenerate_zero", "detached: True"],
    "distributed_example.py": ["step 1: 8 groups over 2 ranks", "rank 0 stopped at step 2", "rank 1 stopped at step 2",
                               "['grpo-rank0.jsonl'] (rank 0 only)"],
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Run every example concurrently (each with a 240 s limit); name -> (exit code, output)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")
    cwd = tmp_path_factory.mktemp("examples")
    procs = {name: subprocess.Popen([sys.executable, str(EXAMPLES / name)], cwd=cwd, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for name in EXPECTED}
    results = {}
    for name, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        results[name] = (proc.returncode, out)
    return results


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name, outputs):
    """The script exits 0 and prints its expected lines."""
    code, out = outputs[name]
    assert code == 0, out[-3000:]
    for line in EXPECTED[name]:
        assert line in out, f"{line!r} missing from:\n{out[-3000:]}"


def test_torch_loop_bug_stops_the_run(tmp_path):
    """``torch_loop.py --bug`` (std over the prompt axis) is stopped at step 0 with a worded breach."""
    out = subprocess.run([sys.executable, str(EXAMPLES / "torch_loop.py"), "--bug", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "stopped by grpo-monitor" in out.stdout and "zero_group_mean" in out.stdout
