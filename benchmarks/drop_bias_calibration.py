"""False-alarm rate and power of the staleness drop's selection-bias flag (not a test: run it by hand).

    .venv/bin/python benchmarks/drop_bias_calibration.py [--trials 4000] [--groups 64] [--G 8]

Each trial generates ``groups`` prompts of ``G`` rows: per prompt a pass probability p ~ U(0, 1)
(hard and easy problems), 0/1 rewards, lengths longer on failed rows (lognormal). Drops:

* ``random rows``: each row dropped with probability 0.25, whatever it holds (no bias: false alarms);
* ``random groups``: whole groups dropped with probability 0.25 (rows of a group share p);
* ``delay ~ reward``: a row is dropped when its delay, exponential with a mean 2x longer on failed rows,
  exceeds the 75th percentile of the delays (slow, hard problems dropped: must be flagged).

It prints, per scenario, the share of trials flagged (``drop_biased``) through the monitor's own
``drop_fields`` / ``drop_metrics`` (the sums an ``observe_generation(dropped=)`` call adds).
"""

from __future__ import annotations

import argparse

import torch

from grpo_monitor.stats.drop_bias import Z_FLAG, drop_fields, drop_metrics
from grpo_monitor.stats.segments import Segments


def trial(gen: torch.Generator, groups: int, G: int, scenario: str) -> float:
    p = torch.rand(groups, 1, generator=gen).expand(groups, G)
    reward = (torch.rand(groups, G, generator=gen) < p).double().reshape(-1)
    lengths = torch.exp(torch.randn(groups * G, generator=gen, dtype=torch.float64) * 0.5 + 5 + 0.3 * (1 - reward))
    if scenario == "random rows":
        dropped = torch.rand(groups * G, generator=gen) < 0.25
    elif scenario == "random groups":
        dropped = (torch.rand(groups, 1, generator=gen) < 0.25).expand(groups, G).reshape(-1)
    else:
        delay = -torch.log(torch.rand(groups * G, generator=gen, dtype=torch.float64)) * (1 + (reward == 0).double())
        dropped = delay > delay.quantile(0.75)
    v = {k: float(t) for k, t in drop_fields(reward, dropped, lengths, Segments.blocks(groups, G)).items()}
    return drop_metrics(v).get("grpo/offpolicy/drop_biased", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4000)
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--G", type=int, default=8)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"Z_FLAG {Z_FLAG}; {args.trials} trials of {args.groups} groups x {args.G} rows")
    for scenario in ("random rows", "random groups", "delay ~ reward"):
        flagged = sum(trial(gen, args.groups, args.G, scenario) for _ in range(args.trials))
        print(f"{scenario:>15}: flagged {flagged / args.trials:.4f} ({int(flagged)} of {args.trials})")


if __name__ == "__main__":
    main()
