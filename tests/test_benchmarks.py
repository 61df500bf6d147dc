"""Every script in benchmarks/ runs to completion in a small smoke mode, on public API only.

The figures themselves are printed by the scripts (docs/performance.md holds them); this
only shows that each still runs, so a refactor cannot leave a benchmark broken unseen.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SMOKE = {
    "bench_rollout.py": ["--responses", "4096", "--reps", "1"],
    "bench_loss.py": ["--sizes", "1M", "--reps", "1", "--backends", "eager", "--no-memory", "--no-trainer",
                      "--routing", "1K,4,2"],
    "roofline_tokens.py": ["--tokens", "1M", "--reps", "1", "--rounds", "1"],
    "bench_long_line.py": ["--sizes", "1", "--dir", "{tmp}"],
    "bench_weights.py": ["--steps", "2"],
    "bench_scan.py": ["--steps", "3", "--rows", "64", "--repeat", "1", "--data", "{tmp}/verl"],
    "mismatch_calibration.py": ["--steps", "3", "--rows", "4", "--tokens", "6", "--skip-fp32"],
    "universal_calibration.py": ["--seeds", "1"],
    "drop_bias_calibration.py": ["--trials", "5"],
    "moe_routing_calibration.py": ["--seeds", "1", "--batch", "2", "--seq", "8", "--lrs", "1e-4", "--sharp", "1"],
    "bench_step.py": ["--groups", "4", "--prompts", "8", "--steps", "2", "--repeats", "1"],
    "bench_health.py": ["--questions", "2000", "--steps", "5"],
    "health_calibration.py": ["--runs", "healthy-group-grpo", "--steps", "2"],
    "soak_memory.py": ["--steps", "40", "--every", "20", "--groups", "8", "--questions", "100",
                       "--history-cap", "50", "--max-growth-mib", "1000"],
}


def test_every_benchmark_has_a_smoke_mode():
    """A new script in benchmarks/ gets a smoke entry here."""
    assert sorted(SMOKE) == sorted(p.name for p in (REPO / "benchmarks").glob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_in_smoke_mode(script, tmp_path):
    """The script exits 0 and prints its figures."""
    args = [a.format(tmp=tmp_path) for a in SMOKE[script]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRPO_MONITOR_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{script} printed nothing"
