"""A tiny Llama + character-level tokenizer on disk, and a GRPOTrainer around them.

Nothing is downloaded: ``examples/trl_example.py``'s ``tiny_model`` builds the model from a
``LlamaConfig`` (2 layers, hidden 32) and a ``tokenizers`` WordLevel model over single
characters, both saved to a folder and passed by path (with ``beta > 0`` TRL rebuilds the
reference model from it). Used by the TRL tests.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPTS = ("spell a", "say bb", "cab?", "a b c")
TRL_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_example.py"


def build_tiny_model(folder: str | Path, seed: int = 0) -> str:
    """Save a 2-layer Llama and its char-level tokenizer to ``folder`` with the TRL example's builder; the path."""
    spec = importlib.util.spec_from_file_location("trl_example", TRL_EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example.tiny_model(Path(folder), seed)


def char_fraction_reward(target: str = "a") -> Callable[..., list[float | None]]:
    """Reward = fraction of ``target`` among the completion's characters.

    0.7 for every completion of the ``"const"`` prompt (a constant, non-dyadic group);
    otherwise None (unscorable) when the completion holds a ``"?"``.
    """

    def reward(prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float | None]:
        out: list[float | None] = []
        for p, c in zip(prompts, completions, strict=True):
            if p == "const":
                out.append(0.7)
            else:
                out.append(None if "?" in c else (c.count(target) / len(c) if c else 0.0))
        return out

    reward.__name__ = f"frac_{target}"
    return reward


def space_reward(prompts: Sequence[str], completions: Sequence[str], **_: Any) -> list[float | None]:
    """1 if the completion holds a space, else 0; None for ``"const"`` or a ``"?"`` (both functions None: a NaN row)."""
    return [None if p == "const" or "?" in c else float(" " in c) for p, c in zip(prompts, completions, strict=True)]


def tiny_dataset(n: int | None = None, prompts: Sequence[str] = PROMPTS):
    """An in-memory ``datasets.Dataset`` cycling through ``prompts``."""
    from datasets import Dataset

    n = 2 * len(prompts) if n is None else n
    return Dataset.from_dict({"prompt": [prompts[i % len(prompts)] for i in range(n)]})


def grpo_config(output_dir: str | Path, **overrides: Any):
    """A ``GRPOConfig`` for seconds-long CPU runs (G=4, 8 completion tokens, no saving, no reports)."""
    from trl import GRPOConfig

    kwargs = dict(
        output_dir=str(output_dir), use_cpu=True, per_device_train_batch_size=8, num_generations=4,
        max_completion_length=8, max_steps=2, logging_steps=1, save_strategy="no", report_to="none",
        learning_rate=1e-3, beta=0.04, seed=0, disable_tqdm=True, dataloader_num_workers=0,
    )
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


def make_trainer(model_path: str, output_dir: str | Path, trainer_cls: type | None = None,
                 reward_funcs: Sequence[Callable] | None = None, callbacks=None,
                 prompts: Sequence[str] = PROMPTS, dataset_size: int | None = None, **overrides: Any):
    """A real ``GRPOTrainer`` (or ``trainer_cls``) on the tiny model and an in-memory dataset."""
    from trl import GRPOTrainer

    cls = trainer_cls or GRPOTrainer
    funcs = list(reward_funcs) if reward_funcs is not None else [char_fraction_reward(), space_reward]
    return cls(
        model=model_path, reward_funcs=funcs, args=grpo_config(output_dir, **overrides),
        train_dataset=tiny_dataset(dataset_size, prompts), callbacks=callbacks,
    )
