"""``sinks="auto"`` under AReaL: the monitor follows AReaL's own ``stats_logger`` config.

Run in the AReaL venv: ``python areal_tracker_cases.py ROOT [CASE ...]``; prints ``GRPO_CASES {json}``.
Each case builds AReaL's real ``GRPOConfig`` / ``StatsLoggerConfig``, opens AReaL's real
``StatsLogger`` where it says so, and calls the real ``PPOActor.compute_advantages`` from a
trainer whose ``self.config`` is that experiment config (as ``PPOTrainer.train`` does), with
``grpo_monitor.integrations.areal.attach()`` (``sinks="auto"``) and no ``end_step()``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(sys.argv[1])
os.environ["TRACKIO_DIR"] = str(ROOT / "trackio")  # before trackio is imported (AReaL's StatsLogger imports it)

from areal.api import FinetuneSpec  # noqa: E402
from areal.api.cli_args import (  # noqa: E402
    GRPOConfig,
    StatsLoggerConfig,
    SwanlabConfig,
    TensorBoardConfig,
    TrackioConfig,
    WandBConfig,
)
from areal.utils.stats_logger import StatsLogger  # noqa: E402

from _cases import run  # noqa: E402
from areal_cases import NORMS, actor, batch  # noqa: E402
from grpo_monitor.integrations import areal as gar  # noqa: E402

STEPS = 2


class Trainer:
    """What matters of AReaL's ``PPOTrainer`` here: ``self.config`` (the experiment) and its advantage call."""

    def __init__(self, config: GRPOConfig):
        self.config = config
        self.actor = actor(*NORMS["grpo"])

    def step(self, seed: int) -> None:
        self.actor.compute_advantages([batch(seed)])


def experiment(name: str, **trackers: Any) -> GRPOConfig:
    logger = StatsLoggerConfig(experiment_name="grpomon", trial_name=name, fileroot=str(ROOT), **trackers)
    return GRPOConfig(experiment_name="grpomon", trial_name=name, stats_logger=logger)


def train(config: GRPOConfig, open_logger: bool) -> dict[str, Any]:
    """AReaL's StatsLogger (when ``open_logger``) around STEPS trainer steps with the monitor attached."""
    stats = StatsLogger(config, FinetuneSpec(total_train_epochs=1, dataset_size=STEPS, train_batch_size=1)) \
        if open_logger else None
    wandb_file = None
    if stats is not None and config.stats_logger.wandb.mode != "disabled":
        import wandb

        wandb_file = str(wandb.run.settings.sync_file)
    trainer = Trainer(config)
    active = getattr(sys.modules.get("wandb"), "run", None)
    err = io.StringIO()
    att = gar.attach()
    try:
        with contextlib.redirect_stderr(err):
            for step in range(STEPS):
                trainer.step(step)
                if stats is not None:
                    stats.commit(0, step, step, {"areal/own": float(step)})
        sinks = [type(s).__name__ for s in att.monitor.sinks.sinks] if att.monitor is not None else []
        reports = [r.step for r in att.reports]
    finally:
        gar.detach()
        if stats is not None:
            stats.close()
    return {"sinks": sinks, "steps": reports, "wandb_run": type(active).__name__ if active is not None else None,
            "stderr": err.getvalue(), "wandb_file": wandb_file,
            "log_path": StatsLogger.get_log_path(config.stats_logger)}


def wandb_trackio_tensorboard() -> dict[str, Any]:
    """AReaL logs to W&B (offline), Trackio (local) and TensorBoard: the monitor logs into each of them."""
    config = experiment("all3", wandb=WandBConfig(mode="offline"), trackio=TrackioConfig(mode="local"),
                        tensorboard=TensorBoardConfig(path=str(ROOT / "tb")))
    out = train(config, open_logger=True)
    import trackio

    from grpo_monitor.sinks.wandb_reader import history_rows, wait_for_exit

    rows = history_rows(wait_for_exit(out["wandb_file"]))
    out["wandb_keys"] = sorted({k for row in rows for k in row if k.startswith(("grpo/", "areal/"))})
    logs = trackio.SQLiteStorage.get_logs("grpomon", "all3")
    out["trackio_runs"] = trackio.SQLiteStorage.get_runs("grpomon")
    out["trackio_keys"] = sorted({k for row in logs for k in row if k.startswith(("grpo/", "areal/"))})
    out["tensorboard_dir"] = str(ROOT / "tb")
    return out


def swanlab_only() -> dict[str, Any]:
    """AReaL logs only to SwanLab (no sink): one warning naming it, a JSONL log in AReaL's log folder."""
    return train(experiment("swan", swanlab=SwanlabConfig(mode="local")), open_logger=False)


def trackers_disabled() -> dict[str, Any]:
    """AReaL's defaults (every tracker disabled; its StatsLogger leaves wandb's no-op run active): JSONL log."""
    return train(experiment("none"), open_logger=True)


CASES = {"wandb_trackio_tensorboard": wandb_trackio_tensorboard, "swanlab_only": swanlab_only,
         "trackers_disabled": trackers_disabled}

if __name__ == "__main__":
    run(CASES, sys.argv[2:])
