"""Per-step cost of measuring the loss's token weights on TRL's tiny model (not a test: run it by hand).

    .venv/bin/python benchmarks/bench_weights.py [--steps 8] [--loss-type dapo] [--accumulation 2]
        [--completion 64]

A real ``GRPOTrainer`` (the tests' 2-layer Llama, CPU, 8 completions of up to ``--completion``
tokens per step, ``beta=0``) runs ``--steps`` optimizer steps with the monitor attached. The
three pieces of the weights part are timed where they run, with ``time.perf_counter``:

* ``grad``: ``torch.autograd.grad(loss, logprobs, retain_graph=True)`` inside ``compute_loss``
  (the graph from the loss back to the log-probs only; the model's backward is not run);
* ``rows``: the rest of ``LossWeights.observe`` per micro-batch: linking rows to groups, the
  ratio-1 test and the per-response reduction (one float64 row per response);
* ``flat``: the step's rows concatenated for the step's one sync;
* ``summary``: after the sync, ``LossWeights.check``: the fit, the check and the
  ``grpo/weights/`` metrics and histograms (numpy on the step's rows).

It prints their sum per optimizer step next to the step's wall time (``train_runtime /
steps``, which includes generation). The first step (warm-up) is dropped.
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integrations"))

TIMES: collections.Counter[str] = collections.Counter()


def _timed(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name] += time.perf_counter() - start
    return wrapper


def _instrument() -> None:
    from grpo_monitor.step import weights as loss_weights

    loss_weights.measure_weights = _timed("grad", loss_weights.measure_weights)
    cls = loss_weights.LossWeights
    cls.observe = _timed("observe", cls.observe)  # grad included: "rows" is observe minus grad
    cls.flat = _timed("flat", cls.flat)
    cls.check = _timed("summary", cls.check)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--loss-type", default="dapo")
    ap.add_argument("--accumulation", type=int, default=2)
    ap.add_argument("--completion", type=int, default=64)
    args = ap.parse_args()

    import torch

    from grpo_monitor.integrations import trl as gtrl
    from tiny_trl import build_tiny_model, make_trainer

    torch.manual_seed(0)
    _instrument()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "model")
        trainer = make_trainer(model, Path(tmp) / "out", reward_funcs=[lambda completions, **_: [
            float("a" in c) for c in completions]], beta=0.0, loss_type=args.loss_type,
            max_completion_length=args.completion, max_steps=args.steps + 1,
            per_device_train_batch_size=8 // args.accumulation, gradient_accumulation_steps=args.accumulation)
        gtrl.attach(trainer, sinks=[])
        step_times: list[float] = []
        per_step: list[dict[str, float]] = []

        class Clock:
            last = time.perf_counter()

        from transformers import TrainerCallback

        class StepClock(TrainerCallback):
            def on_step_end(self, *a, **k):
                now = time.perf_counter()
                step_times.append(now - Clock.last)
                Clock.last = now
                per_step.append(dict(TIMES))
                TIMES.clear()

        trainer.add_callback(StepClock())
        Clock.last = time.perf_counter()
        trainer.train()
    steps = list(zip(step_times, per_step, strict=True))[1:]  # drop the warm-up step
    n = len(steps)
    step_ms = 1e3 * sum(t for t, _ in steps) / n
    parts = {k: 1e3 * sum(p.get(k, 0.0) for _, p in steps) / n for k in ("grad", "observe", "flat", "summary")}
    parts["rows"] = parts.pop("observe") - parts["grad"]
    parts = {k: parts[k] for k in ("grad", "rows", "flat", "summary")}
    total = sum(parts.values())
    print(f"TRL tiny model, loss_type={args.loss_type}, accumulation {args.accumulation}, 8 completions of <= "
          f"{args.completion} tokens, {n} timed steps (torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"  optimizer step (generation included): {step_ms:8.2f} ms")
    for k, v in parts.items():
        print(f"  weights: {k:<8} {v:8.3f} ms per step")
    print(f"  weights total:   {total:8.3f} ms per step = {100 * total / step_ms:.2f}% of the step")


if __name__ == "__main__":
    main()
