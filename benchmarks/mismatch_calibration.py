"""Measure the mismatch statistics of real numerical noise and of real defects on a tiny causal LM (CPU).

    python benchmarks/mismatch_calibration.py [--steps 200] [--rows 16] [--tokens 12] [--lag-seeds 0,1]

The lab (``tests/mismatch_lab.py``): a random 2-layer Llama with peaked distributions samples
with ``generate`` (bf16 weights, KV cache: the sampler) and is scored by a float32 full forward
(the trainer) while it trains with Adam. Prints, per sampler path, the per-step distribution of
``grpo/mismatch/k3_mean``, ``ratio_mean`` and ``ratio_mean_z`` under noise, then each defect's
figures; these are the numbers in docs/mismatch.md that the tolerances are set from. Last, for a
sampler whose weights lag the trainer's by one (and two) optimizer steps over the whole run,
the exact policy movement it carries (``Lab.policy_kl``: KL(sampler weights ‖ trainer weights)
over the full vocabulary at every sampled position, float64) against the monitor's k3 and
whether the error threshold caught it: when a lag is detectable.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from grpo_monitor.stats.tokens import token_metrics, token_sufficient_stats  # noqa: E402
from mismatch_lab import DEFECTS, Lab  # noqa: E402

KEYS = ("k3_mean", "k1_mean", "abs_diff_mean", "abs_diff_p99", "abs_diff_max", "ratio_mean", "ratio_mean_z")


def metrics(batch) -> dict[str, float]:
    vec = token_sufficient_stats(batch.mask, sampler_logprobs=batch.sampler_logprobs, old_logprobs=batch.old_logprobs,
                                 entropy=batch.entropy, compile=False)
    return {k.split("/")[-1]: v for k, v in token_metrics(vec).items() if k.startswith(("grpo/mismatch/",
                                                                                          "grpo/entropy/"))}


def noise(dtype: torch.dtype, steps: int, rows: int, tokens: int) -> None:
    lab, t0 = Lab(rows=rows, new_tokens=tokens, sampler_dtype=dtype), time.time()
    runs = [metrics(lab.step()) for _ in range(steps)]
    k3 = np.array([r["k3_mean"] for r in runs])
    dev = np.array([abs(r["ratio_mean"] - 1) for r in runs])
    z = np.array([abs(r["ratio_mean_z"]) for r in runs])
    print(f"noise, sampler {str(dtype)[6:]} + KV cache vs trainer float32 full forward, {steps} steps of "
          f"{rows}x{tokens} tokens ({time.time() - t0:.0f} s): entropy mean {np.mean([r['mean'] for r in runs]):.3f}")
    for name, x in (("k3_mean", k3), ("|ratio_mean - 1|", dev), ("|ratio_mean_z|", z)):
        print(f"  {name:18s} median {np.median(x):.3g}  p99 {np.percentile(x, 99):.3g}  max {x.max():.3g}")
    print(f"  abs_diff_max over the run {max(r['abs_diff_max'] for r in runs):.3g}, "
          f"abs_diff_p99 median {np.median([r['abs_diff_p99'] for r in runs]):.3g}")
    both = [(a, b) for a, b in zip(dev, z, strict=True) if b > 8]
    print(f"  steps with |z| > 8: {len(both)}; of those with |ratio_mean - 1| > 0.01: {sum(a > 0.01 for a, _ in both)}")


def defects(rows: int, tokens: int, warm: int = 20) -> None:
    lab = Lab(rows=rows, new_tokens=tokens)
    for _ in range(warm):
        lab.step()
    print(f"defects (bf16 sampler, after {warm} training steps; 3 steps each):")
    for name in DEFECTS + ("stale_weights@8", "stale_weights@16"):
        defect, _, lag = name.partition("@")
        runs = [metrics(lab.step(defect, lag=int(lag or 1))) for _ in range(3)]
        print(f"  {name:17s} " + "  ".join(f"{k} {np.mean([r[k] for r in runs]):.4g}" for k in KEYS))


#: Bins of the exact lag KL, in multiples of the error threshold ``mismatch_k3``.
LAG_BINS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf"))


def lag_curve(lag: int, seed: int, steps: int, rows: int, tokens: int) -> np.ndarray:
    """(step, exact lag KL, monitor k3) of a run whose sampler lags by ``lag`` optimizer steps throughout."""
    lab = Lab(seed=seed, rows=rows, new_tokens=tokens)
    out = []
    for step in range(steps):
        batch = lab.step("stale_weights", lag=lag)
        out.append((step, lab.policy_kl(batch), metrics(batch)["k3_mean"]))
    return np.array(out)


def lags(seeds: list[int], steps: int, rows: int, tokens: int) -> None:
    from grpo_monitor import MonitorConfig

    threshold = MonitorConfig().tolerances.mismatch_k3
    for lag in (1, 2):
        runs = {seed: lag_curve(lag, seed, steps, rows, tokens) for seed in seeds}
        a = np.concatenate(list(runs.values()))
        moved = a[:, 1] > 0
        print(f"sampler {lag} optimizer step(s) stale, {steps} steps x seeds {seeds}: exact lag KL per step "
              f"median {np.median(a[:, 1]):.3g}, p90 {np.percentile(a[:, 1], 90):.3g}, max {a[:, 1].max():.3g}; "
              f"k3 / exact KL median {np.median(a[moved, 2] / a[moved, 1]) if moved.any() else float('nan'):.3f}")
        for lo, hi in zip(LAG_BINS[:-1], LAG_BINS[1:], strict=True):
            sel = (a[:, 1] >= lo * threshold) & (a[:, 1] < hi * threshold)
            print(f"  exact KL in [{lo:g}, {hi:g}) x mismatch_k3: {sel.sum():4d} steps, caught "
                  f"{(a[sel, 2] > threshold).sum():4d}")
        for seed, run in runs.items():
            windows = "  ".join(f"{w * 20}-{w * 20 + 19}: {np.median(run[w * 20:(w + 1) * 20, 1]):.3g}"
                                for w in range(len(run) // 20))
            first = int(run[run[:, 2] > threshold, 0].min()) if (run[:, 2] > threshold).any() else None
            print(f"  seed {seed}: first step caught {first}; median exact KL per 20 steps: {windows}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--tokens", type=int, default=12)
    p.add_argument("--skip-fp32", action="store_true")
    p.add_argument("--skip-noise", action="store_true", help="only the defects and the lag curves")
    p.add_argument("--lag-seeds", default="0,1", help="lab seeds of the lag curves (empty: none)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if not args.skip_noise:
        noise(torch.bfloat16, args.steps, args.rows, args.tokens)
    if not (args.skip_fp32 or args.skip_noise):
        noise(torch.float32, args.steps, args.rows, args.tokens)
    defects(args.rows, args.tokens)
    if args.lag_seeds:
        lags([int(s) for s in args.lag_seeds.split(",")], args.steps, args.rows, args.tokens)


if __name__ == "__main__":
    main()
