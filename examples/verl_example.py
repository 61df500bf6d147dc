"""grpo-monitor inside verl's own advantage step (verl 0.9.1, CPU): one line, no end_step().

``grpo_verl.attach()`` wraps ``ray_trainer.compute_advantage``, the function verl's
``RayPPOTrainer.fit`` calls once per training step before ``update_actor``. This script
calls it the way ``fit`` does, on real ``DataProto`` batches whose rows are shuffled and
grouped by ``uid``: each call is one monitor step, declared ``verl.grpo`` from the call's
``adv_estimator``. The second step holds a constant group of eight rewards of 0.7, for
which verl's float32 std (~6e-8) and epsilon 1e-6 give every response an advantage of
~0.056 instead of 0. The monitor logs that as a *warning* (float32 rounding verl's epsilon
explains, small next to a live group's advantage std; a warning never stops the run) and
the script prints it as the monitor worded it, then what the JSONL log holds. Run:
``python examples/verl_example.py`` (``--out DIR`` keeps the log; by default it is written
to a temporary folder, removed at the end). Under ``main_ppo`` the same attach runs in the
``TaskRunner`` actor through Ray's ``worker_process_setup_hook`` (docs/integrations.md).
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore", module="verl")  # verl warns about missing GPU engines on import
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import ray_trainer  # noqa: E402

from grpo_monitor import MonitorConfig  # noqa: E402
from grpo_monitor.integrations import verl as grpo_verl  # noqa: E402
from grpo_monitor.sinks import JSONLSink  # noqa: E402
from grpo_monitor.tools.reporting import log_digest  # noqa: E402

G, T, GROUPS = 8, 6, 4


def batch(step: int, constant_group: bool) -> DataProto:
    """A shuffled verl batch as fit() has it before compute_advantage: token_level_rewards, response_mask, uid."""
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
    tensors = {"token_level_rewards": token_level_rewards[perm], "response_mask": response_mask[perm]}
    return DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid[perm.numpy()]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the JSONL log (default: a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="grpo-monitor", category=RuntimeWarning)  # printed below instead
    with tempfile.TemporaryDirectory(prefix="grpo-verl-") as scratch:
        log = (args.out or Path(scratch)) / "grpo.jsonl"
        attachment = grpo_verl.attach(config=MonitorConfig(group_size=G), sinks=[JSONLSink(log)])  # the one line
        try:
            for step in range(2):
                ray_trainer.compute_advantage(batch(step, constant_group=step == 1), adv_estimator="grpo")
                report = attachment.reports[-1]
                print(f"step {step}: degenerate rate {report.metrics['grpo/groups/degenerate_rate']:.2f}, "
                      f"estimator {report.estimator}")
                for v in report.violations:  # the monitor's own words and severity
                    print(f"  {v.severity}: {v.message()}")
        finally:
            grpo_verl.detach()
        print("detached:", grpo_verl.attached() is None)
        print("\n".join(log_digest(log, limit=0)))
        print(f"log: {log}" if args.out else "log removed with its temporary folder (pass --out DIR to keep it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
