"""The monitor's whole per-step cost, part by part, on a real TRL step and on a plain loop (run it by hand).

    .venv/bin/python benchmarks/bench_step.py [--groups 4 8 16] [--prompts 8 32 64] [--steps 8] [--repeats 2]

``trl``: a real ``GRPOTrainer`` (the tests' tiny 2-layer Llama, built offline; 8 completion tokens, ``beta``
0.04) with ``grpo_monitor.integrations.trl.attach``; its step time is TRL's own (generation, rewards, loss,
optimizer). ``loop``: the same monitor calls a hand-written loop makes (``observe_rollout`` with question ids and
lengths, one ``observe_loss`` with the loss, ``end_step``) on synthetic tensors of the same shapes.

How it times: for the run only, the functions named in ``PARTS`` are wrapped (``install``) in a timer that keeps
a stack, so each part's time is its own, the parts it calls excluded (``time.perf_counter``). Nothing in the
package knows about it: with the benchmark not running, the cost is zero. ``integration`` is the TRL hooks' own
work (gathering rewards, TRL's truncation test, the trainer-metric pairing); ``monitor`` is the sum of every
part. Each configuration runs ``--repeats`` times (one warm-up step per run left out); the parts printed are those of
the least-disturbed step over all runs (the smallest monitor total: on a shared machine the others are slowed by
whoever else runs), beside the median monitor total and the median step time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parts() -> dict[str, list[tuple[Any, str]]]:
    """Each part of a step and the (owner, attribute) callables whose own time counts as it."""
    from grpo_monitor import monitor as mon
    from grpo_monitor.health.live import LiveHealth
    from grpo_monitor.run.questions import QuestionTracker
    from grpo_monitor.run.state import RunState
    from grpo_monitor.sinks.dispatch import SinkSet
    from grpo_monitor.stats import tokens
    from grpo_monitor.step import evaluate, observe
    from grpo_monitor.step.weights import LossWeights

    cls = mon.GRPOMonitor
    table = {
        "input boundary": [(cls, "observe_rollout"), (cls, "observe_loss"), (cls, "observe_generation"),
                           (cls, "add_metrics")],
        "rollout statistics": [(observe, "rollout_stats")],
        "estimator judgement": [(evaluate, "check_rollout")],
        "token pass": [(tokens, "token_sufficient_stats"), (evaluate, "token_violations")],
        "weights": [(LossWeights, "observe"), (LossWeights, "check"), (LossWeights, "end_step")],
        "sync": [(mon, "sync_step")],
        "run state": [(RunState, "update")],
        "history": [(QuestionTracker, "update")],
        "report": [(mon, "assemble_report"), (cls, "end_step")],
        "health": [(LiveHealth, "evaluate")],
        "sinks": [(SinkSet, "emit")],
    }
    try:
        from grpo_monitor.integrations._trl_hooks import TRLHooks
        from grpo_monitor.integrations.hf import MonitorCallback
    except ImportError:
        return table
    table["integration"] = [(TRLHooks, "_observe_rollout"), (TRLHooks, "_observe_loss"), (TRLHooks, "_pair_loss"),
                            (TRLHooks, "_tag_rows"), (TRLHooks, "audit_window"), (TRLHooks, "step_metrics"),
                            (MonitorCallback, "on_step_end")]
    return table


class Timer:
    """Own (exclusive) seconds per part: a stack of running parts, each paused while a nested part runs."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.own: dict[str, float] = defaultdict(float)
        self._stack: list[list[Any]] = []  # [part, start of its current own stretch]

    def wrap(self, part: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            now = self.clock()
            if self._stack:
                outer = self._stack[-1]
                self.own[outer[0]] += now - outer[1]
            self._stack.append([part, now])
            try:
                return fn(*args, **kwargs)
            finally:
                end = self.clock()
                name, start = self._stack.pop()
                self.own[name] += end - start
                if self._stack:
                    self._stack[-1][1] = end

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed

    def take(self) -> dict[str, float]:
        own, self.own = dict(self.own), defaultdict(float)
        return own


@contextmanager
def install(timer: Timer) -> Iterator[None]:
    """Wrap every callable of ``parts()`` for the block; put the originals back after it."""
    saved = []
    for part, points in parts().items():
        for owner, name in points:
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            saved.append((owner, name, original))
            setattr(owner, name, timer.wrap(part, original))
    try:
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


# ------------------------------------------------------------------ TRL
def trl_run(model: str, folder: Path, G: int, prompts: int, steps: int, timer: Timer) -> list[tuple[dict, float]]:
    """Per step (the first left out): own seconds per part and TRL's step seconds."""
    import transformers

    from grpo_monitor import MonitorConfig
    from grpo_monitor.integrations import trl as gtrl

    sys.path.insert(0, str(REPO / "tests" / "integrations"))
    from tiny_trl import make_trainer

    transformers.logging.set_verbosity_error()
    texts = tuple(f"q{i} spell a" for i in range(prompts))
    trainer = make_trainer(model, folder, prompts=texts, dataset_size=prompts * (steps + 1), num_generations=G,
                           per_device_train_batch_size=prompts * G, max_steps=steps + 1, logging_steps=1)
    gtrl.attach(trainer, config=MonitorConfig(table_every=10**9), sinks=None)
    marks: list[tuple[float, dict]] = []

    class Marks(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # after the monitor's own on_step_end
            marks.append((timer.clock(), timer.take()))

    trainer.add_callback(Marks())
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.train()  # TRL prints its logs and a warning per unscorable row
    return _per_step(marks[1:], [b[0] - a[0] for a, b in zip(marks, marks[1:], strict=False)])


def _per_step(marks: list[tuple[float, dict]], step_seconds: list[float]) -> list[tuple[dict, float]]:
    """Each timed step's own seconds per part, and its step seconds."""
    return [(own, sec) for (_, own), sec in zip(marks, step_seconds, strict=True)]


# ----------------------------------------------------------------- loop
def loop_run(G: int, prompts: int, steps: int, timer: Timer, estimator: str | None = None,
             tokens: int = 8) -> list[tuple[dict, float]]:
    """The plain loop's per-step own seconds per part (its step time: the monitor's, nothing else runs).

    ``estimator``: a registry entry that makes the advantages, left for the monitor to identify
    (``std_convention="auto"``); None: TRL's Bessel z-score, declared."""
    from grpo_monitor import GRPOMonitor, MonitorConfig

    mon = GRPOMonitor(MonitorConfig(group_size=G, table_every=10**9,
                                    std_convention="auto" if estimator else "trl.group"))
    gen = torch.Generator().manual_seed(0)
    marks = []
    for step in range(steps + 1):
        batch = _loop_batch(G, prompts, tokens, gen, step, estimator)
        timer.take()
        t0 = timer.clock()
        mon.observe_rollout(batch["rewards"], advantages=batch["adv"], question_ids=batch["questions"],
                            lengths=batch["lengths"])
        mon.observe_loss(mask=batch["mask"], advantages=batch["adv"], logprobs=batch["logprobs"],
                         old_logprobs=batch["old"], ref_logprobs=batch["ref"], loss=batch["loss"])
        report = mon.end_step()
        marks.append((timer.clock() - t0, timer.take()))
        assert not report.violations, report.violations
    return _per_step(marks[1:], [m[0] for m in marks[1:]])


def _loop_batch(G: int, prompts: int, T: int, gen: torch.Generator, step: int, estimator: str | None) -> dict:
    """Binary rewards, advantages (TRL's Bessel z-score, or ``estimator``'s), token tensors, a token-mean loss."""
    from grpo_monitor.estimators.registry import ESTIMATORS

    r = (torch.rand(prompts, G, generator=gen) < torch.rand(prompts, 1, generator=gen)).float()
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).reshape(-1)
    if estimator is not None:
        gid = torch.arange(prompts).repeat_interleave(G)
        adv = torch.as_tensor(ESTIMATORS[estimator](r.reshape(-1).double().numpy(), gid.numpy()), dtype=torch.float32)
    n = prompts * G
    lengths = torch.randint(1, T + 1, (n,), generator=gen)
    mask = (torch.arange(T) < lengths[:, None]).float()
    old = -torch.rand(n, T, generator=gen) * 3
    logprobs = (old + 0.01 * torch.randn(n, T, generator=gen)).requires_grad_()
    ref = old + 0.02 * torch.randn(n, T, generator=gen)
    ratio = torch.exp(logprobs - old)
    loss = -((ratio * adv[:, None]) * mask).sum() / mask.sum()
    questions = [f"q{(step * prompts + i) % (4 * prompts)}" for i in range(prompts)]
    return dict(rewards=r.reshape(-1), adv=adv, questions=[q for q in questions for _ in range(G)],
                lengths=lengths, mask=mask, logprobs=logprobs, old=old, ref=ref, loss=loss)


# ---------------------------------------------------------------- table
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
ORDER = ("input boundary", "rollout statistics", "estimator judgement", "token pass", "weights", "sync", "run state",
         "history", "report", "health", "sinks", "integration")


def measure(kind: str, G: int, prompts: int, steps: int, repeats: int, model: str | None,
            estimator: str | None = None, clock: Callable[[], float] = time.perf_counter) -> tuple[dict, float, float]:
    """Over ``repeats`` runs: the least-disturbed step (smallest monitor total; its ms per part), the median
    monitor ms per step, and the median step ms."""
    timed: list[tuple[dict, float]] = []
    for _ in range(repeats):
        timer = Timer(clock)
        with install(timer), tempfile.TemporaryDirectory(prefix="bench-step-") as scratch:
            if kind == "trl":
                assert model is not None
                timed += trl_run(model, Path(scratch), G, prompts, steps, timer)
            else:
                timed += loop_run(G, prompts, steps, timer, estimator if kind == "loop-auto" else None)
    totals = [sum(own.values()) for own, _ in timed]
    best = min(range(len(timed)), key=totals.__getitem__)
    parts = {p: s * 1e3 for p, s in timed[best][0].items()}
    parts["monitor"] = totals[best] * 1e3
    return parts, statistics.median(totals) * 1e3, statistics.median(s for _, s in timed) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[4, 8, 16], help="G, completions per prompt")
    parser.add_argument("--prompts", type=int, nargs="+", default=[8, 32, 64], help="prompts per step")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run (after one warm-up step)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per configuration")
    kinds = ["trl", "loop", "loop-auto"]
    parser.add_argument("--kinds", nargs="+", default=kinds, choices=kinds)
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall: time.perf_counter; cpu: this thread's CPU time (time.thread_time), which a "
                        "shared machine's other processes do not inflate")
    parser.add_argument("--estimator", default="nemo_rl.grpo",
                        help="loop-auto: the registry entry making the advantages, identified by the monitor")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = None
    with tempfile.TemporaryDirectory(prefix="bench-step-model-") as scratch:
        if "trl" in args.kinds:
            sys.path.insert(0, str(REPO / "tests" / "integrations"))
            from tiny_trl import build_tiny_model

            model = build_tiny_model(Path(scratch) / "model")
        cols = ("kind", "G", "prompts", "step ms", "monitor ms", "median", "share") + ORDER
        print(" | ".join(cols))
        for kind in args.kinds:
            for G in args.groups:
                for prompts in args.prompts:
                    own, median, step_ms = measure(kind, G, prompts, args.steps, args.repeats, model, args.estimator,
                                                   CLOCKS[args.clock])
                    share = f"{median / step_ms:.1%}" if kind == "trl" else "-"
                    row = [kind, str(G), str(prompts), f"{step_ms:.1f}", f"{own['monitor']:.2f}", f"{median:.2f}",
                           share]
                    row += [f"{own.get(p, 0.0):.2f}" for p in ORDER]
                    print(" | ".join(row), flush=True)
    print(f"{args.clock} clock; ms per step over {args.repeats} runs of {args.steps} timed steps: 'monitor ms' and the "
          "parts are those of the least-disturbed step (smallest monitor total: the machine is shared), 'median' the "
          "median monitor total; 'step ms' (median) for trl is TRL's whole step, monitor included, for loop the "
          "monitor's calls; 'share' = median / step ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
