"""grpo-monitor on TRL's GRPOTrainer: one call, ``attach(trainer)``; CPU, a tiny model, seconds.

Builds a 2-layer Llama (hidden 32) and a character-level tokenizer in a temporary folder
(nothing is downloaded), trains 3 GRPO steps with G=8 and logs the ``grpo/...`` metrics to
a JSONL file. One prompt, "const", always scores 0.7: its group is degenerate, but TRL's
own ``frac_reward_zero_std`` misses it (float32 std ~6e-8 > its atol 1e-8), which
``grpo/trl/frac_reward_zero_std_gap`` shows and the ``trainer_metric`` warning names (the monitor audits the
trainer's own dashboard: docs/trainer_metrics.md). Completions holding a '?' get reward None on
purpose (unscorable rows), so TRL's "All reward functions returned None" warning is expected
(the script says so before training). With ``report_to="wandb"`` the monitor logs
into the trainer's W&B run instead. Run: ``python examples/trl_example.py``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from grpo_monitor.integrations import trl as grpo_trl  # noqa: E402
from grpo_monitor.sinks import JSONLSink, read_jsonl  # noqa: E402
from grpo_monitor.tools.reporting import log_digest  # noqa: E402

ALPHABET = "abcdefghijklmnopqrstuvwxyz ?!."


def tiny_model(folder: Path, seed: int = 0) -> str:
    """A 2-layer Llama and a char-level WordLevel tokenizer, saved to ``folder`` (TRL loads by path).

    The tests build their model with this function too (``tests/integrations/tiny_trl.py``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate(("<pad>", "<bos>", "<eos>", "<unk>") + tuple(ALPHABET))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>",
                            unk_token="<unk>").save_pretrained(folder)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(folder)
    return str(folder)


# On purpose, frac_a returns None for some completions (those holding a '?'): TRL then marks the row
# unscorable (reward NaN, advantage 0) and logs "All reward functions returned None for the following
# kwargs: ..." for the batch. That warning is expected here; it shows the monitor checking that
# unscorable rows stay out of their group's statistics (invariant ``unscorable_rows``).
UNSCORABLE_NOTE = ("note: this example's reward function returns None for completions holding a '?' on purpose, "
                   "to show unscorable rows; TRL's warning \"All reward functions returned None ...\" below is "
                   "expected, and the monitor checks those rows get advantage 0 and stay out of the group statistics.")


def frac_a(prompts, completions, **_):
    """Fraction of 'a' in the completion; 0.7 for "const"; None (unscorable) when it holds a '?'."""
    return [0.7 if p == "const" else None if "?" in c else (c.count("a") / len(c) if c else 0.0)
            for p, c in zip(prompts, completions, strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the run's files (default: a temporary folder, removed at the end)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grpo-trl-") as scratch:
        train(args.out or Path(scratch), args.steps)
        if not args.out:
            print("log removed with its temporary folder (pass --out DIR to keep it)")
    return 0


def train(out: Path, steps: int) -> None:
    """Train the tiny model with the monitor attached; print each step's numbers and what the log holds."""
    model_path = tiny_model(out / "model")
    config = GRPOConfig(
        output_dir=str(out / "trainer"), use_cpu=True, num_generations=8, per_device_train_batch_size=16,
        max_completion_length=8, max_steps=steps, beta=0.04, learning_rate=1e-3, logging_steps=1,
        save_strategy="no", report_to="none", disable_tqdm=True, seed=0,
    )
    trainer = GRPOTrainer(model=model_path, reward_funcs=[frac_a], args=config,
                          train_dataset=Dataset.from_dict({"prompt": ["const", "spell a"]}))
    grpo_trl.attach(trainer, sinks=[JSONLSink(out / "grpo.jsonl")])  # raises InvariantViolation on a breach
    print(UNSCORABLE_NOTE, flush=True)
    trainer.train()
    for record in read_jsonl(out / "grpo.jsonl"):
        m = record["metrics"]
        print(f"step {record['step']}: degenerate rate {m['grpo/groups/degenerate_rate']:.2f} "
              f"(TRL frac_reward_zero_std {m['grpo/trl/frac_reward_zero_std']:.2f}, "
              f"gap {m['grpo/trl/frac_reward_zero_std_gap']:.2f}), k3 KL {m['grpo/kl/k3_mean']:.2e}, "
              f"violations {m['grpo/invariants/violations']:.0f}")
    print("\n".join(log_digest(out / "grpo.jsonl")))


if __name__ == "__main__":
    raise SystemExit(main())
