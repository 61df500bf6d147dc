"""Measure the universal invariants' statistics on real numerical noise and on the real bugs of the tests.

    python benchmarks/universal_calibration.py [--seeds 3]

Under ``estimator="auto"``, when no registry entry explains a step, three statistics decide
between an ``unknown_estimator`` warning and an error (:mod:`grpo_monitor.invariants.universal`),
each in typical |advantage| units (the median |advantage| over rows of groups with reward variation):

* ``ratio``: the largest |advantage| (error beyond ``MAX_RATIO`` = 1e3);
* ``fall``: the most an advantage falls below the advantage of a strictly lower reward in its group
  (error beyond ``tolerances.affine_residual`` = 1e-3);
* ``spread``: the farthest a constant group's advantage sits from the constant groups' common value
  (error beyond ``tolerances.degenerate_error`` = 0.25).

Noise: every registry entry (the long tail included; multi-reward ones on two reward columns) on the
batch kinds of ``tests/estimators/test_estimators_long_tail.py`` (binary, continuous, graded, constant
non-dyadic, 10-100 scale), computed two ways per precision (float32, bfloat16): ``cast``, the float64
reference on the rewards cast to the precision, its output cast back (what a trainer's buffers hold),
and ``native``, group z-score / centring / leave-one-out / token whitening computed in torch in that
precision. Bugs: ``REAL_BUGS`` of that test module, float32. Prints the worst noise per statistic and
each bug's figures; these are the numbers in docs/universal_invariants.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "estimators"))
from grpo_monitor.config import Tolerances  # noqa: E402
from grpo_monitor.estimators import ESTIMATORS  # noqa: E402
from grpo_monitor.invariants.universal import MAX_RATIO  # noqa: E402
from test_estimators_long_tail import KINDS, REAL_BUGS, _rewards  # noqa: E402

G, B = 8, 24
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def statistics(r: np.ndarray, a: np.ndarray) -> dict[str, float]:
    """ratio, fall, spread of advantages ``a`` (B, G) on rewards ``r`` (B, G), in typical |advantage| units."""
    constant = r.max(1) == r.min(1)
    live = np.abs(a[~constant])
    typ = float(np.median(live)) if live.size and np.median(live) > 0 else float(live.mean() or 1.0)
    fall = 0.0
    for rg, ag in zip(r[~constant], a[~constant], strict=True):
        order = np.argsort(rg, kind="stable")
        rs, as_ = rg[order], ag[order]
        for level in np.unique(rs)[1:]:
            below = as_[rs < level].max()
            fall = max(fall, float(below - as_[rs == level].min()))
    spread = 0.0
    if constant.any():
        const = a[constant]
        spread = float(np.abs(const - np.median(const)).max())
    return {"ratio": float(np.abs(a).max()) / typ, "fall": fall / typ, "spread": spread / typ}


def cast(x: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).to(torch.float64).numpy()


def registry_noise(seeds: int, limits: dict[str, float], by_design: dict[tuple[str, str], float]
                   ) -> dict[str, tuple[float, str]]:
    """The worst of each statistic over every entry, kind, seed and precision (``cast`` model), with where.

    A statistic the entry's float64 reference already puts beyond its threshold is the entry's design (a
    batch-level baseline gives constant groups different advantages; a multi-reward one is monotone in
    each column, not in their sum): it goes to ``by_design`` (entry, statistic) -> worst value instead.
    """
    worst = {"ratio": (0.0, ""), "fall": (0.0, ""), "spread": (0.0, "")}
    gid = np.repeat(np.arange(B), G)
    for name, est in ESTIMATORS.items():
        for kind in KINDS:
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                lengths = rng.integers(20, 400, size=B * G).astype(np.float64)
                shape = (B, G, 2) if est.multi_reward else (B, G)
                x = _rewards(kind, rng, shape)
                xf = cast(x, torch.float32)
                exact = statistics(xf.sum(-1) if est.multi_reward else xf,
                                   est(xf.reshape(B * G, -1) if est.multi_reward else xf.reshape(-1), gid,
                                       lengths=lengths).reshape(B, G))
                for key, value in exact.items():
                    if value > limits[key]:
                        by_design[(name, key)] = max(by_design.get((name, key), 0.0), value)
                for dname, dtype in DTYPES.items():
                    xd = cast(x, torch.float32)  # the trainer's float32 rewards
                    data = cast(xd, dtype).reshape(B * G, -1) if est.multi_reward else cast(xd, dtype).reshape(-1)
                    a = cast(est(data, gid, lengths=lengths), dtype).reshape(B, G)
                    r = xd.sum(-1) if est.multi_reward else xd
                    for key, value in statistics(r, a).items():
                        if (name, key) not in by_design and value > worst[key][0]:
                            worst[key] = (value, f"{name} on {kind} (seed {seed}, {dname})")
    return worst


def native(kind: str, dtype: torch.dtype, seed: int) -> dict[str, dict[str, float]]:
    """Group z-score (Bessel + 1e-6), centring, leave-one-out and token whitening computed in ``dtype``."""
    rng = np.random.default_rng(seed)
    r64 = cast(_rewards(kind, rng, (B, G)), torch.float32)
    r = torch.from_numpy(r64).to(dtype)
    w = torch.from_numpy(rng.integers(20, 400, size=(B, G)).astype(np.float64)).to(dtype)
    c = r - r.mean(1, keepdim=True)
    out = {
        "zscore": c / (r.std(1, keepdim=True) + 1e-6),
        "centred": c,
        "leave_one_out": r - (r.sum(1, keepdim=True) - r) / (G - 1),
        "whitened": (c - (c * w).sum() / w.sum()) * torch.rsqrt((((c - (c * w).sum() / w.sum()) ** 2) * w).sum()
                                                                 / w.sum() + 1e-8),
    }
    return {k: statistics(r64, v.to(torch.float64).numpy()) for k, v in out.items()}


def native_noise(seeds: int) -> dict[str, tuple[float, str]]:
    worst = {"ratio": (0.0, ""), "fall": (0.0, ""), "spread": (0.0, "")}
    for kind in KINDS:
        for seed in range(seeds):
            for dname, dtype in DTYPES.items():
                for fam, stats in native(kind, dtype, seed).items():
                    for key, value in stats.items():
                        # a z-score's constant groups are degenerate_zero's business, not a shared shift
                        if key == "spread" and fam == "zscore":
                            continue
                        if value > worst[key][0]:
                            worst[key] = (value, f"{fam} on {kind} (seed {seed}, {dname})")
    return worst


def bugs() -> dict[str, dict[str, float]]:
    """Each real bug's statistics on the inputs its test uses (float32 advantages)."""
    out = {}
    for name, bug in REAL_BUGS.items():
        rng = np.random.default_rng(5)
        r = (rng.random((B, G)) < rng.random((B, 1))).astype(np.float64)
        if name == "wrong-group-slice":
            r = rng.random((B, G))
        r[0], r[1] = 1.0, 0.0
        if name == "nan-counted-as-zero":
            r[2:10, 0] = np.nan
        a = np.nan_to_num(bug(r).astype(np.float32).astype(np.float64), nan=0.0)
        valid = ~np.isnan(r).any(1)
        out[name] = statistics(r[valid], a[valid])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    tol = Tolerances()
    limits = {"ratio": MAX_RATIO, "fall": tol.affine_residual, "spread": tol.degenerate_error}
    print(f"{len(ESTIMATORS)} registry entries x {len(KINDS)} kinds x {args.seeds} seeds x {list(DTYPES)}, "
          f"B={B} groups of G={G}")
    by_design: dict[tuple[str, str], float] = {}
    for label, worst in (("noise, registry (cast)", registry_noise(args.seeds, limits, by_design)),
                         ("noise, native torch arithmetic", native_noise(args.seeds))):
        print(label)
        for key, (value, where) in worst.items():
            margin = f"{limits[key] / value:.3g}x" if value > 0 else "exact"
            print(f"  {key:6s} worst {value:.3g}  (threshold {limits[key]:g}, margin {margin})  at {where or '-'}")
    print("beyond a threshold in float64 already, by the entry's design (named by replay, never universal):")
    for (name, key), value in sorted(by_design.items()):
        print(f"  {name:28s} {key:6s} {value:.3g}")
    print("real bugs (float32):  ratio  fall  spread  -> caught by")
    for name, stats in bugs().items():
        over = [k for k, v in stats.items() if v > limits[k]]
        print(f"  {name:34s} {stats['ratio']:9.3g} {stats['fall']:7.3g} {stats['spread']:7.3g}  -> "
              f"{', '.join(over) or 'none of the three (another check)'}")


if __name__ == "__main__":
    main()
