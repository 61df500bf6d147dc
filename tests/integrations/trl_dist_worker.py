"""One rank of a 2-process TRL GRPOTrainer run on CPU (accelerate reads RANK/WORLD_SIZE from the env).

``python trl_dist_worker.py <scenario> <outdir> <model_path>``; scenario ``healthy`` or
``broken`` (advantages shifted on rank 1 only). Writes ``<outdir>/rank<r>.pt``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from tiny_trl import make_trainer  # noqa: E402


class ShiftOnRankOne:
    """Shifts this process's slice of the advantages on rank 1 only."""

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if self.accelerator.process_index == 1:
            out["advantages"] = out["advantages"] + 0.3
        return out


def main() -> None:
    from trl import GRPOTrainer

    from grpo_monitor import InvariantViolation, MonitorConfig
    from grpo_monitor.integrations import trl as gtrl
    from grpo_monitor.sinks import JSONLSink

    scenario, outdir, model_path = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    rank = int(os.environ["RANK"])
    cls = type("Broken", (ShiftOnRankOne, GRPOTrainer), {}) if scenario == "broken" else GRPOTrainer
    trainer = make_trainer(model_path, outdir / "out", trainer_cls=cls, max_steps=2, per_device_train_batch_size=4,
                           prompts=("spell a", "say bb", "cab?", "a b c"))
    sink = JSONLSink(outdir / f"rank{rank}.jsonl")
    gtrl.attach(trainer, config=MonitorConfig(repro_dir=str(outdir / "repro")), sinks=[sink])
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, gtrl.GRPOMonitorCallback))
    result = {"raised": None, "world": trainer.accelerator.num_processes}
    try:
        trainer.train()
    except InvariantViolation as exc:
        result["raised"] = sorted({v.invariant for v in exc.violations})
    result["metrics"] = [r.metrics for r in callback.reports]
    result["log_history"] = trainer.state.log_history
    torch.save(result, outdir / f"rank{rank}.pt")
    # accelerate never destroys the process group it created; without this, gloo's worker threads
    # can outlive the interpreter and abort the process at exit ("terminate called without an
    # active exception", pytorch/pytorch#190489), intermittently failing a run that passed.
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
