"""grpo-monitor around OpenRLHF's own advantage computation (OpenRLHF 0.11.2, CPU, a few seconds).

``grpo_openrlhf.attach()`` wraps ``RemoteExperienceMaker.compute_advantages_and_returns``,
which OpenRLHF's ``PPOTrainer`` calls once per step on its rollout (``make_experience_batch``).
The monitor is built at the first call from OpenRLHF's own ``args``: ``group_norm`` declares
the registry entry ``openrlhf.group_norm`` (Bessel std + 1e-9), groups are
``index // n_samples_per_prompt``. Three steps run quietly on shuffled micro-batches; then a
fork whose ``group_norm`` takes the std over the prompts instead of the group is stopped
with ``InvariantViolation`` before its advantages reach an update.

Run in a venv with OpenRLHF (``bash scripts/framework_venv.sh openrlhf``):
``.venvs/openrlhf/bin/python examples/openrlhf_example.py`` (``--out DIR`` keeps the monitor's log in
``DIR/grpo-monitor/``; by default it goes to a temporary folder, removed at the end).
"""

from __future__ import annotations

from _framework import output_folder, require_framework

require_framework("openrlhf")  # not installed here: prints the command that builds its venv, exits 2

import argparse
from pathlib import Path
from types import SimpleNamespace

import torch

from grpo_monitor import InvariantViolation
from grpo_monitor.integrations import openrlhf as grpo_openrlhf

grpo_openrlhf.stub_gpu_modules()  # CPU only: flash_attn and vllm are not installed here
from openrlhf.trainer.ppo_utils.experience import Experience  # noqa: E402
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker  # noqa: E402
from openrlhf.trainer.ppo_utils.kl_controller import FixedKLController  # noqa: E402
from openrlhf.utils.config import hierarchize  # noqa: E402

G, PROMPTS, T = 8, 4, 12


class PromptAxisStd(RemoteExperienceMaker):
    """A fork's group_norm with the std over the prompts (dim 0) instead of over the group (dim -1)."""

    def compute_advantages_and_returns(self, experiences):
        index = torch.tensor([i for e in experiences for i in e.index])
        grid = torch.empty(len(index))
        grid[index] = torch.cat([e.rewards for e in experiences])
        grid = grid.view(-1, G)
        z = ((grid - grid.mean(-1, keepdim=True)) / (grid.std(0, keepdim=True) + 1e-9)).view(-1)[index]
        for e, rows in zip(experiences, z.split([len(e.index) for e in experiences]), strict=True):
            e.advantages = e.returns = rows[:, None] * e.action_mask
        return experiences


def make_maker(out: Path, cls=RemoteExperienceMaker):
    """The experience maker as PPOTrainer builds it; only its args and KL controller matter here (the monitor's
    log goes to ``<ckpt.output_dir>/grpo-monitor/``, as in a real run without a tracker)."""
    args = hierarchize(argparse.Namespace(**{
        "ckpt.output_dir": str(out),
        "algo.advantage.estimator": "group_norm", "algo.advantage.no_std_norm": False, "algo.advantage.gamma": 1.0,
        "algo.kl.use_loss": True, "rollout.n_samples_per_prompt": G, "reward.clip_range": (-10.0, 10.0),
        "reward.overlong_buffer_len": None, "reward.stop_properly_penalty_coef": None}))
    return cls(None, None, None, None, FixedKLController(0.001), SimpleNamespace(args=args), None)


def rollout(step: int) -> list[Experience]:
    """PROMPTS x G responses scored 0/1, rows shuffled into micro-batches of 6 (as split_rollout_samples does)."""
    gen = torch.Generator().manual_seed(step)
    p = torch.rand(PROMPTS, 1, generator=gen).expand(PROMPTS, G).reshape(-1)
    scores = (torch.rand(PROMPTS * G, generator=gen) < p).float()
    scores[:G] = 1.0  # one prompt solved by every response: a degenerate group
    lengths = torch.randint(2, T + 1, (PROMPTS * G,), generator=gen)
    logp = -torch.rand(PROMPTS * G, T, generator=gen)
    out = []
    for rows in torch.randperm(PROMPTS * G, generator=gen).split(6):
        mask = torch.arange(T)[None, :] < lengths[rows, None]
        out.append(Experience(action_mask=mask, rewards=scores[rows].clone(), index=rows.tolist(),
                              action_log_probs=logp[rows], base_action_log_probs=logp[rows] + 0.01,
                              kl=torch.zeros(len(rows), T), response_length=lengths[rows], info={}))
    return out


def main() -> int:
    with output_folder(__doc__.splitlines()[0]) as out:
        return run(out)


def run(out: Path) -> int:
    attachment = grpo_openrlhf.attach()  # the one line
    try:
        maker = make_maker(out)
        for step in range(3):
            maker.compute_advantages_and_returns(rollout(step))  # what PPOTrainer.train_step runs
            report = attachment.reports[-1]
            m = report.metrics
            print(f"step {step}: {m['grpo/groups/total']:.0f} groups, degenerate rate "
                  f"{m['grpo/groups/degenerate_rate']:.2f}, estimator {report.convention}, "
                  f"violations {len(report.violations)}")
    finally:
        grpo_openrlhf.detach()
    grpo_openrlhf.attach(sinks=None)
    try:
        make_maker(out, PromptAxisStd).compute_advantages_and_returns(rollout(3))
        print("broken fork: not stopped")
    except InvariantViolation as exc:
        print("broken fork stopped:", ", ".join(sorted({v.invariant for v in exc.violations})))
    finally:
        grpo_openrlhf.detach()
    print("detached:", "__grpo_monitor_original__" not in vars(RemoteExperienceMaker.compute_advantages_and_returns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
