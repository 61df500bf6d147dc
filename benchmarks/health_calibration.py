"""Run-health calibration on real TRL runs (tiny local Llama, CPU): what each finding reads on healthy runs and on
the stalls it must name. Prints, per run, the findings opened (step, severity, figure), the worst status, the
share of steps per status and the reward_plateau false-alarm rate; docs/health.md quotes its output.

    python benchmarks/health_calibration.py                 # the three healthy configurations, 70 steps each
    python benchmarks/health_calibration.py --runs degenerate truncated collapse --steps 20

Runs one trainer at a time (about 2.5 s per optimizer step on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integrations"))

HEALTHY = ("healthy-group-grpo", "healthy-batch-dapo", "healthy-none-drgrpo")


def summarize(name: str, reports: list, seconds: float) -> dict:
    """The figures of one run (see the module docstring)."""
    judged = [r for r in reports if r.health is not None]
    opened = [(r.step, f.name, f.severity, round(f.figure, 3)) for r in judged for f in r.health.opened]
    statuses = Counter(r.health.status for r in judged)
    plateau_steps = [r for r in judged if "grpo/health/reward_plateau" in r.metrics]
    plateau_on = sum(any(f.name == "reward_plateau" for f in r.health.active) for r in plateau_steps)
    collapse = [(r.step, round(r.metrics.get("grpo/health/entropy_collapse", float("nan")), 1),
                 round(r.metrics.get("grpo/entropy/mean", float("nan")), 3)) for r in judged]
    return {"run": name, "steps": len(judged), "seconds": round(seconds, 1), "opened": opened,
            "worst_status": max(statuses, default=0), "status_share": {k: v / len(judged) for k, v in statuses.items()},
            "plateau_alarm_rate": plateau_on / len(plateau_steps) if plateau_steps else None,
            "plateau_judged_steps": len(plateau_steps),
            "plateau_alarm_steps": [r.step for r in plateau_steps
                                    if any(f.name == "reward_plateau" for f in r.health.active)],
            "reward_by_10_steps": [_mean(judged[i:i + 10], "grpo/reward/mean") for i in range(0, len(judged), 10)],
            "degenerate_mean": _mean(judged, "grpo/groups/degenerate_rate"),
            "truncated_mean": _mean(judged, "grpo/rows/truncated_rate"),
            "zero_gradient_share": _last(judged, "grpo/health/zero_gradient_steps"),
            "entropy_first_last": (collapse[0][2], collapse[-1][2]) if collapse else None,
            "reward_first_last_10": (_mean(judged[:10], "grpo/reward/mean"), _mean(judged[-10:], "grpo/reward/mean")),
            "findings_active_share": {n: round(c / len(judged), 3) for n, c in Counter(
                f.name for r in judged for f in r.health.active).items()},
            "entropy_trace": collapse}


def replay(log: Path) -> list:
    """The log's steps as reports judged again by a fresh tracker (config from the log's run record)."""
    from types import SimpleNamespace

    from grpo_monitor import MonitorConfig
    from grpo_monitor.health import HealthTracker
    from grpo_monitor.sinks import read_jsonl

    records = read_jsonl(log)
    run = next((r["run"] for r in records if "run" in r), {})
    config = MonitorConfig(group_size=(run.get("config") or {}).get("group_size"))
    tracker, out = HealthTracker(config, run.get("integration", "api")), []
    for record in records:
        metrics = {k: v for k, v in record["metrics"].items() if not k.startswith("grpo/health/")}
        update = tracker.update(record["step"], metrics)
        out.append(SimpleNamespace(step=record["step"], health=update, metrics={**metrics, **update.metrics}))
    return out


def _mean(reports: list, key: str) -> float | None:
    values = [r.metrics[key] for r in reports if key in r.metrics]
    return round(sum(values) / len(values), 3) if values else None


def _last(reports: list, key: str) -> float | None:
    values = [r.metrics[key] for r in reports if key in r.metrics]
    return round(values[-1], 3) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=list(HEALTHY))
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", action="store_true", help="print the entropy trace (step, steps to floor, entropy)")
    parser.add_argument("--replay", nargs="+", default=None, metavar="LOG",
                        help="instead of training, run the tracker again over these runs' grpo.jsonl logs (the "
                        "thresholds' effect without retraining; no wall-clock and no question supply)")
    args = parser.parse_args(argv)
    if args.replay:
        for log in args.replay:
            figures = summarize(Path(log).stem, replay(Path(log)), 0.0)
            figures.pop("entropy_trace")
            print("HEALTH-REPLAY", figures, flush=True)
        return 0
    from health_scenarios import run
    from tiny_trl import build_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="health-calibration-"))
    model = build_tiny_model(folder / "model")
    for name in args.runs:
        start = time.perf_counter()
        _, reports = run(model, folder / name, name, args.steps, seed=args.seed)
        figures = summarize(name, reports, time.perf_counter() - start)
        trace = figures.pop("entropy_trace")
        print("HEALTH-CALIBRATION", figures, flush=True)
        if args.trace:
            print("ENTROPY-TRACE", name, trace, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
