"""What the framework case scripts share: grouped batches, running one case, the JSON line they print.

A case script runs inside a framework's own venv (``scripts/framework_venv.sh``), calls the
framework's real advantage entry point with grpo-monitor attached, and prints one line
``GRPO_CASES {json}`` mapping each case id to what happened; the pytest tests in
``tests/integrations/test_<framework>.py`` (main venv) assert on it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from grpo_monitor import InvariantViolation
from grpo_monitor.estimators import ESTIMATORS

MARKER = "GRPO_CASES "
REPRO_DIR = tempfile.mkdtemp(prefix="grpo-cases-")


def outcome_batch(groups: int, g: int, t: int, seed: int = 0):
    """Binary rewards with ``g, 0, 1, 2, ...`` successes in groups ``0, 1, 2, 3, ...`` (two constant groups,
    live groups of different stds), response lengths 1..t, and a row permutation.

    Returns ``scores (N,)``, ``lengths (N,)``, ``mask (N, t)`` float and ``perm (N,)``.
    """
    gen = torch.Generator().manual_seed(seed)
    counts = [g, 0] + [1 + (k % (g - 1)) for k in range(groups - 2)]
    scores = torch.cat([(torch.randperm(g, generator=gen) < c).float() for c in counts])
    n = groups * g
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    return scores, lengths, mask, torch.randperm(n, generator=gen)


def reference_error(name: str, rewards: Any, gid: Any, row_adv: Any, lengths: Any = None, **params: Any) -> float:
    """Max |framework row advantage - the registry entry's float64 reference (``params`` overridden)| over rows."""
    r = np.asarray(torch.as_tensor(rewards).double())
    g = np.unique(np.asarray(gid), return_inverse=True)[1]
    w = None if lengths is None else np.asarray(torch.as_tensor(lengths).double())
    ref = ESTIMATORS[name](r, g, lengths=w, **params)
    return float(np.max(np.abs(ref - np.asarray(torch.as_tensor(row_adv).double()))))


def scale_spread(name: str, rewards: Any, gid: Any, row_adv: Any, lengths: Any = None) -> float:
    """(max - min) / mean of framework / reference advantage over rows where the reference is not ~0."""
    r = np.asarray(torch.as_tensor(rewards).double())
    g = np.unique(np.asarray(gid), return_inverse=True)[1]
    ref = ESTIMATORS[name](r, g)
    live = np.abs(ref) > 1e-9
    ratio = np.asarray(torch.as_tensor(row_adv).double())[live] / ref[live]
    return float((ratio.max() - ratio.min()) / abs(ratio.mean()))


def summary(attachment: Any) -> dict[str, Any]:
    """The attachment's last report: convention, violations (invariant, severity), a few metrics."""
    report = attachment.reports[-1] if attachment.reports else None
    if report is None:
        return {"steps": 0}
    keys = ("grpo/groups/total", "grpo/groups/degenerate_rate", "grpo/tokens/valid", "grpo/kl/k3_mean",
            "grpo/kl/user_mean")
    return {
        "steps": len(attachment.reports),
        "convention": report.convention,
        "declared": attachment.monitor.config.std_convention,
        "stabilizer": attachment.monitor.config.stabilizer,
        "group_size": attachment.monitor.config.group_size,
        "violations": [[v.invariant, v.severity] for v in report.violations],
        "metrics": {k: report.metrics[k] for k in keys if k in report.metrics},
    }


def run(cases: dict[str, Callable[[], dict[str, Any]]], selected: list[str]) -> None:
    """Run each case (all when ``selected`` is empty), catching what it raises; print the JSON line."""
    results = {}
    for name, case in cases.items():
        if selected and name not in selected:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = case()
            except InvariantViolation as exc:
                result = {"raised": "InvariantViolation", "message": str(exc),
                          "invariants": sorted({v.invariant for v in exc.violations})}
            except Exception as exc:  # reported, so the test shows the framework's own error
                result = {"raised": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
        result["warnings"] = [str(w.message) for w in caught if str(w.message).startswith("grpo-monitor")]
        results[name] = result
    sys.stdout.flush()
    print(MARKER + json.dumps(results, default=str), flush=True)


def config_kwargs() -> dict[str, Any]:
    """MonitorConfig fields every case uses: strict (faults raise), repro files in a temp folder."""
    return {"strict": True, "repro_dir": REPRO_DIR}


os.environ.setdefault("WANDB_MODE", "offline")
