"""Float64 numpy references for the sampler's side: grpo/mismatch/*, grpo/entropy/*, truncation and the split.

Each metric is computed from its definition over the selected valid tokens (boolean
indexing, ``np.mean``, ``np.std``, ``np.searchsorted``), sharing no code with the
sufficient-statistics pass under test.
"""

from __future__ import annotations

import math

import numpy as np

#: The histogram edges as the catalogue describes them: (1, 1.25, 1.5, 1.75) x 2^e for e in [-16, 6), then 2^6.
EDGES = np.array(sorted({(1 + q / 4) * 2.0 ** e for e in range(-16, 6) for q in range(4)} | {2.0 ** 6}))


def p99_from_histogram(absd: np.ndarray, q: float = 0.99) -> float:
    """Upper edge of the bin (edges[i-1] <= x < edges[i]) holding the q quantile, at most max |d|."""
    bins = np.searchsorted(EDGES, absd, side="right")
    cum = np.cumsum(np.bincount(bins, minlength=len(EDGES) + 1))
    i = int(np.argmax(cum >= q * absd.size))
    top = float(absd.max())
    return min(float(EDGES[i]), top) if i < len(EDGES) else top


def mismatch_reference(mask, sampler, old=None, logprobs=None, entropy=None, band=(0.5, 2.0),
                       low=0.01) -> dict[str, float]:
    """Every grpo/mismatch/* and grpo/entropy/* key from the valid tokens, in float64."""
    m = np.asarray(mask, dtype=np.float64)
    valid = m > 0
    s = np.asarray(sampler, dtype=np.float64)
    out: dict[str, float] = {}
    trainer = old if old is not None else logprobs
    if trainer is not None and valid.any():
        t = np.asarray(trainer, dtype=np.float64)
        d = t[valid] - s[valid]
        rho = np.exp(d)
        dev = rho - 1.0
        if d.size < 2 or dev.mean() == 0:
            z = 0.0
        else:
            z = dev.mean() / (dev.std() / math.sqrt(d.size)) if dev.std() > 0 else math.copysign(math.inf, dev.mean())
        w = np.array([math.exp(np.mean(t[r][valid[r]] - s[r][valid[r]])) for r in range(len(m)) if valid[r].any()])
        out.update({
            "grpo/mismatch/k1_mean": float(np.mean(-d)),
            "grpo/mismatch/k3_mean": float(np.mean(np.exp(d) - d - 1)),
            "grpo/mismatch/abs_diff_mean": float(np.mean(np.abs(d))),
            "grpo/mismatch/abs_diff_max": float(np.max(np.abs(d))),
            "grpo/mismatch/abs_diff_p99": p99_from_histogram(np.abs(d)),
            "grpo/mismatch/ratio_mean": float(rho.mean()),
            "grpo/mismatch/ratio_min": float(rho.min()),
            "grpo/mismatch/ratio_max": float(rho.max()),
            "grpo/mismatch/ratio_mean_z": float(z),
            "grpo/mismatch/outside_frac": float(np.mean((rho < band[0]) | (rho > band[1]))),
            "grpo/mismatch/seq_ratio_mean": float(w.mean()),
            "grpo/mismatch/seq_ess": float(w.sum() ** 2 / (w.size * (w * w).sum())),
            "grpo/mismatch/mult_prob_error": float(np.mean(np.exp(np.abs(d)))),
        })
    if valid.any():
        out["grpo/entropy/sampled_nll_mean"] = float(-s[valid].mean())
    if entropy is not None and valid.any():
        e = np.asarray(entropy, dtype=np.float64)[valid]
        out.update({"grpo/entropy/mean": float(e.mean()), "grpo/entropy/std": float(e.std()),
                    "grpo/entropy/low_frac": float(np.mean(e < low))})
    return out


def split_reference(rewards: np.ndarray, truncated: np.ndarray | None = None,
                    lengths: np.ndarray | None = None) -> dict[str, float]:
    """Truncation and the degenerate split of (B, G) rewards (NaN: unscorable), group by group in float64."""
    r = np.asarray(rewards, dtype=np.float64)
    scorable = r[~np.isnan(r)]
    lo, hi = scorable.min(), scorable.max()
    low = high = other = cut_groups = 0
    above, below = [], []
    for i, row in enumerate(r):
        vals = row[~np.isnan(row)]
        degenerate = vals.size < 2 or vals.min() == vals.max()
        if degenerate:
            if vals.size and vals[0] == lo and (lo != hi or vals[0] <= 0):
                low += 1
            elif vals.size and vals[0] == hi:
                high += 1
            else:
                other += 1
            if truncated is not None and truncated[i].all():
                cut_groups += 1
        elif lengths is not None:
            mean = vals.mean()
            for j, x in enumerate(row):
                if not np.isnan(x) and x > mean:
                    above.append(lengths[i][j])
                elif not np.isnan(x) and x < mean:
                    below.append(lengths[i][j])
    B = len(r)
    out = {"grpo/groups/degenerate_low_rate": low / B, "grpo/groups/degenerate_high_rate": high / B,
           "grpo/groups/degenerate_other_rate": other / B}
    if truncated is not None:
        out["grpo/rows/truncated_rate"] = float(np.mean(truncated))
        out["grpo/groups/degenerate_truncated_rate"] = cut_groups / B
    if above:
        out["grpo/rows/length_above_mean"] = float(np.mean(above))
    if below:
        out["grpo/rows/length_below_mean"] = float(np.mean(below))
    return out
