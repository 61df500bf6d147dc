"""grpo-monitor around verl's own advantage and KL estimators (verl 0.9.1, CPU).

``attach(monitor)`` wraps ``core_algos.compute_grpo_outcome_advantage`` (which verl's
``ray_trainer.compute_advantage`` calls for "grpo"), the ``ADV_ESTIMATOR_REGISTRY``
entries (``get_adv_estimator_fn``) and ``kl_penalty`` (including the copy imported by
``verl.workers.utils.losses``). This script calls them the way verl's trainer does, on a
batch whose rows are shuffled and grouped by ``uid``; the second step holds a constant
group of eight rewards of 0.7, for which verl's float32 std (~6e-8) and epsilon 1e-6 give
every response an advantage of ~0.056 instead of 0. The monitor logs that as a *warning*
(float32 rounding verl's epsilon explains, small next to a live group's advantage std; a
warning never stops the run) and the script prints it as the monitor worded it, then what
the JSONL log holds. Run: ``python examples/verl_example.py`` (``--out DIR`` keeps the log;
by default it is written to a temporary folder, removed at the end).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore", module="verl")  # verl warns about missing GPU engines on import
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.utils import losses  # noqa: E402

from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from grpo_monitor.integrations import verl as grpo_verl  # noqa: E402
from grpo_monitor.reporting import log_digest  # noqa: E402
from grpo_monitor.sinks import JSONLSink  # noqa: E402

G, T, GROUPS = 8, 6, 4


def batch(step: int, constant_group: bool):
    """A shuffled verl-style batch: token_level_rewards, response_mask, uid index, logprobs."""
    gen = torch.Generator().manual_seed(step)
    n = G * GROUPS
    scores = (torch.rand(n, generator=gen) < 0.4).float()
    if constant_group:
        scores[:G] = 0.7
    lengths = torch.randint(1, T + 1, (n,), generator=gen)
    response_mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    token_level_rewards = torch.zeros(n, T)
    token_level_rewards[torch.arange(n), lengths - 1] = scores
    uid = np.array([f"{step}-{i // G}" for i in range(n)], dtype=object)
    perm = torch.randperm(n, generator=gen)
    logprob = -torch.rand(n, T, generator=gen)
    ref_logprob = logprob + 0.05 * torch.randn(n, T, generator=gen)
    return token_level_rewards[perm], response_mask[perm], uid[perm.numpy()], logprob, ref_logprob


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the JSONL log (default: a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="grpo-monitor", category=RuntimeWarning)  # printed below instead
    logging.getLogger("grpo_monitor").setLevel(logging.ERROR)  # likewise
    with tempfile.TemporaryDirectory(prefix="grpo-verl-") as scratch:
        log = (args.out or Path(scratch)) / "grpo.jsonl"
        monitor = GRPOMonitor(MonitorConfig(group_size=G, std_convention="bessel"), sinks=[JSONLSink(log)])
        grpo_verl.attach(monitor)
        try:
            for step in range(2):
                run_step(monitor, step)
        finally:
            grpo_verl.detach()
            monitor.close()
        print("detached:", core_algos.ADV_ESTIMATOR_REGISTRY["grpo"] is core_algos.compute_grpo_outcome_advantage)
        print("\n".join(log_digest(log, limit=0)))
        print(f"log: {log}" if args.out else "log removed with its temporary folder (pass --out DIR to keep it)")
    return 0


def run_step(monitor: GRPOMonitor, step: int) -> None:
    """One step as verl's trainer makes it: advantages, the KL loss, then the monitor's step end."""
    rewards, response_mask, uid, logprob, ref_logprob = batch(step, constant_group=step == 1)
    # what ray_trainer.compute_advantage does for adv_estimator="grpo"
    core_algos.compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=response_mask, index=uid)
    # what the actor's loss does with use_kl_loss=True (response_mask is read from this frame)
    losses.kl_penalty(logprob=logprob, ref_logprob=ref_logprob, kl_penalty="low_var_kl")
    report = monitor.end_step()
    m = report.metrics
    print(f"step {step}: degenerate rate {m['grpo/groups/degenerate_rate']:.2f}, "
          f"convention {report.convention}, k3 KL {m['grpo/kl/k3_mean']:.5f} "
          f"(verl's {m['grpo/kl/user_mean']:.5f})")
    for v in report.violations:  # the monitor's own words and severity
        print(f"  {v.severity}: {v.message()}")


if __name__ == "__main__":
    raise SystemExit(main())
