"""Run the demo end to end: sinks in the output folder, progress bar, theory file, report.

Outputs in ``out_dir``: ``monitor.jsonl`` (one StepReport per line), ``theory.jsonl``
(what the policy's own success probabilities predict, per step), ``run.json`` (the
settings), ``tensorboard/``, ``wandb/`` (an offline run, when W&B is installed and
enabled), ``repro/`` (offending tensors of a breach) and ``report.html`` with ``plots/*.png``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ...config import MonitorConfig
from ...monitor import GRPOMonitor
from ...report import StepReport
from ...sinks.base import Sink
from ...violations import InvariantViolation
from .bugs import pipeline_for
from .trainer import DemoConfig, DemoTrainer

LOG_NAME = "monitor.jsonl"
THEORY_NAME = "theory.jsonl"
META_NAME = "run.json"


@dataclasses.dataclass
class DemoResult:
    """What a demo run produced: reports, theory rows, the breach (if any) and the output paths."""

    config: DemoConfig
    out_dir: Path
    reports: list[StepReport]
    theory: list[dict[str, Any]]
    failure: InvariantViolation | None
    bug: str | None
    seconds: float
    outputs: dict[str, str]

    @property
    def failed(self) -> bool:
        return self.failure is not None


def monitor_config(config: DemoConfig, out_dir: Path) -> MonitorConfig:
    """What the demo declares: its group size, the population std, on-policy first epoch; backpressure on sinks."""
    return MonitorConfig(
        group_size=config.group_size, estimator="population", expect_on_policy=True,
        clip_range=(config.clip, config.clip), repro_dir=str(out_dir / "repro"), on_violation="raise",
        sink_when_full="block",  # nothing waits on the demo's sinks: a slow W&B slows the demo, loses nothing
    )


def make_sinks(
    out_dir: Path, config: DemoConfig, *, tensorboard: bool, wandb: bool | None, bug: str | None
) -> tuple[list[Sink], dict[str, str]]:
    """JSONL always; TensorBoard when installed; W&B offline when installed (``wandb=None``) or asked."""
    from ...sinks.jsonl import JSONLSink

    outputs = {"jsonl": str(out_dir / LOG_NAME)}
    sinks: list[Sink] = [JSONLSink(out_dir / LOG_NAME, fsync=False)]
    if tensorboard and importlib.util.find_spec("tensorboard") is not None:
        from ...sinks.tensorboard_sink import TensorBoardSink

        sinks.append(TensorBoardSink(out_dir / "tensorboard"))
        outputs["tensorboard"] = str(out_dir / "tensorboard")
    use_wandb = importlib.util.find_spec("wandb") is not None if wandb is None else wandb
    if use_wandb:
        sinks.append(_wandb_sink(out_dir, config, bug))
        outputs["wandb"] = str(out_dir / "wandb")
    return sinks, outputs


def _wandb_sink(out_dir: Path, config: DemoConfig, bug: str | None) -> Sink:
    if importlib.util.find_spec("wandb") is None:
        raise ModuleNotFoundError("run_demo(wandb=True) needs the wandb package, which is not installed; install it "
                                  "with `pip install 'grpo-monitor[wandb]'`, or pass wandb=None", name="wandb")
    import wandb

    from ...sinks.wandb_sink import WandbSink

    name = f"demo-{bug}" if bug else ("demo-dynamic-sampling" if config.dynamic_sampling else "demo")
    return WandbSink(
        attach_to_active_run=False, mode="offline", dir=str(out_dir), project="grpo-monitor-demo", name=name,
        config={**dataclasses.asdict(config), "bug": bug}, settings=wandb.Settings(console="off", silent=True),
    )


def _fresh(out_dir: Path) -> None:
    """Remove the files a previous demo run wrote here (the JSONL sink appends)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (LOG_NAME, THEORY_NAME, META_NAME):
        (out_dir / name).unlink(missing_ok=True)
    for event in (out_dir / "tensorboard").glob("events.out.tfevents.*"):
        event.unlink()


def _progress(total: int, enabled: bool) -> Any:
    """A tqdm bar (hidden when stderr is not a terminal), or a no-op bar without tqdm."""
    if enabled and importlib.util.find_spec("tqdm") is not None:
        from tqdm import tqdm

        return tqdm(total=total, desc="GRPO demo", unit="step", leave=False, dynamic_ncols=True, disable=None)
    return _NoBar()


class _NoBar:
    def update(self, n: int = 1) -> None: ...
    def set_postfix_str(self, text: str) -> None: ...
    def close(self) -> None: ...


@contextlib.contextmanager
def _demo_environment(out: Path, wandb_on: bool) -> Iterator[None]:
    """One intra-op thread (tensors of a few hundred numbers) and W&B's folders inside ``out``; restored after."""
    threads = torch.get_num_threads()
    saved = {k: os.environ.get(k) for k in _WANDB_ENV}
    torch.set_num_threads(1)
    if wandb_on:
        for key, sub in _WANDB_ENV.items():
            os.environ.setdefault(key, str(out / sub) if sub else "true")
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: W&B environment set for the demo's offline run (unless already set): folders under ``out``.
_WANDB_ENV = {"WANDB_DIR": ".", "WANDB_CACHE_DIR": "wandb/cache", "WANDB_CONFIG_DIR": "wandb/config",
              "WANDB_DATA_DIR": "wandb/data", "WANDB_SILENT": ""}


def run_demo(
    config: DemoConfig | None = None,
    out_dir: str | os.PathLike = "runs/demo",
    *,
    bug: str | None = None,
    wandb: bool | None = None,
    tensorboard: bool = True,
    progress: bool = True,
    report: bool = True,
) -> DemoResult:
    """Train the teaching model with the monitor attached; a breach ends the run (see ``failure``).

    ``wandb=None`` logs a W&B offline run when wandb is installed. The report needs matplotlib.
    """
    config = config or DemoConfig()
    pipeline = pipeline_for(bug)
    out = Path(out_dir)
    _fresh(out)
    meta = {"source": "grpo-monitor demo", **dataclasses.asdict(config), "bug": bug}
    (out / META_NAME).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    start = time.perf_counter()
    with _demo_environment(out, wandb is not False and importlib.util.find_spec("wandb") is not None):
        sinks, outputs = make_sinks(out, config, tensorboard=tensorboard, wandb=wandb, bug=bug)
        monitor = GRPOMonitor(monitor_config(config, out), sinks=sinks)
        reports, theory, failure = _train(DemoTrainer(config, monitor, pipeline), config, progress)
    _write_theory(out / THEORY_NAME, theory)
    outputs["theory"], outputs["settings"] = str(out / THEORY_NAME), str(out / META_NAME)
    seconds = time.perf_counter() - start
    if report and importlib.util.find_spec("matplotlib") is not None:
        from ..reporting import build_report

        outputs["report"] = str(build_report(out))
    return DemoResult(config, out, reports, theory, failure, bug, seconds, outputs)


def _train(trainer: DemoTrainer, config: DemoConfig, progress: bool):
    """Run the steps with a progress bar; stop at a breach. Returns (reports, theory rows, breach)."""
    reports, theory, failure = [], [], None
    bar = _progress(config.steps, progress)
    try:
        for _ in range(config.steps):
            report, row = trainer.step()
            reports.append(report)
            theory.append(row.to_dict(config.group_size))
            bar.update()
            bar.set_postfix_str(_postfix(report))
    except InvariantViolation as exc:
        failure = exc
    finally:
        bar.close()
        trainer.monitor.close()
    return reports, theory, failure


def _postfix(rep: StepReport) -> str:
    m = rep.metrics
    key = "grpo/sampling/generated_degenerate_rate" if "grpo/sampling/generated_degenerate_rate" in m else \
        "grpo/groups/degenerate_rate"
    parts = [f"degenerate {m.get(key, float('nan')):.0%}"]
    if "grpo/sampling/responses_per_retained_group" in m:
        parts.append(f"responses/group {m['grpo/sampling/responses_per_retained_group']:.1f}")
    if "grpo/kl/k3_mean" in m:
        parts.append(f"KL {m['grpo/kl/k3_mean']:.3g}")
    return ", ".join(parts)


def _write_theory(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, allow_nan=True) + "\n")
