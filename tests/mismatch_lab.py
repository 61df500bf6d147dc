"""A tiny causal LM that samples with ``generate`` and trains, for calibrating the ``mismatch`` invariant.

Nothing is downloaded: a 2-layer Llama from a config, random init, its output layer scaled
so that its next-token distributions are as peaked as a trained model's (mean entropy about
half a nat at temperature 0.7). Each step samples ``rows`` responses of ``new_tokens`` tokens
with ``generate`` (the sampler; its log-probs come from ``generate``'s own scores, a different
numerical path from the trainer's: the KV cache, and bf16 weights when ``sampler_dtype`` is
bfloat16), scores them with a float32 full forward pass (the trainer), and takes one Adam step
on a REINFORCE loss, so that the weights move as in training. Defects are switches on the
same loop (``DEFECTS``). Used by ``tests/test_mismatch_calibration.py`` and
``benchmarks/mismatch_calibration.py`` (which writes the figures in ``docs/mismatch.md``).
"""

from __future__ import annotations

import copy
import dataclasses
import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB, PROMPT = 48, 4
#: Each defect the invariant must catch, by name (see ``Lab.step``).
DEFECTS = ("stale_weights", "unsynced", "temperature", "shifted_tokens", "other_model", "shifted_mask", "top_p")


@dataclasses.dataclass
class Batch:
    """One step's token tensors, ``(rows, new_tokens)``, as a trainer hands them to ``observe_loss``."""

    mask: torch.Tensor
    sampler_logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    entropy: torch.Tensor
    rewards: torch.Tensor
    sequences: torch.Tensor | None = None  # prompt + response token ids, ``(rows, PROMPT + new_tokens)``


def tiny_model(seed: int, logit_scale: float = 20.0):
    """A random 2-layer Llama whose output layer is scaled by ``logit_scale`` (peaked distributions)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64, bos_token_id=0,
                      eos_token_id=None, pad_token_id=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    model.generation_config.eos_token_id = None  # no EOS: generate applies no logits processor but the sampling ones
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return model.eval()


def token_logprobs(model, seqs: torch.Tensor, new: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 full-forward log-probs of the last ``new`` tokens of ``seqs`` at ``temperature``, and entropies."""
    logits = model(seqs).logits[:, -new - 1:-1].float() / temperature
    logp = torch.log_softmax(logits, -1)
    chosen = logp.gather(-1, seqs[:, -new:, None]).squeeze(-1)
    return chosen, -(logp.exp() * logp).sum(-1)


class Lab:
    """The loop: ``step(defect=None)`` returns one ``Batch`` and trains once."""

    def __init__(self, seed: int = 0, rows: int = 16, new_tokens: int = 12, temperature: float = 0.7,
                 lr: float = 1e-3, sampler_dtype: torch.dtype = torch.bfloat16):
        self.model = tiny_model(seed)
        self.other = tiny_model(seed + 1000)
        self.sampler = copy.deepcopy(self.model).to(sampler_dtype)  # the inference engine's copy of the weights
        self.rows, self.new, self.temperature = rows, new_tokens, temperature
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.gen = torch.Generator().manual_seed(seed)
        self.history = [self._weights()]  # the trainer's weights after each optimizer step, oldest first
        self.initial = self.history[0]  # what a sampler never synced holds
        self.scored_with: tuple[dict, dict] | None = None  # (sampler, trainer) weights of the last step
        self._float = copy.deepcopy(self.model)  # a float32 scratch copy for ``policy_kl``

    def _weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def sync(self, lag: int = 0) -> None:
        """Load the trainer's weights of ``lag`` optimizer steps ago into the sampler (0: the current ones)."""
        self.sampler.load_state_dict(self.history[max(0, len(self.history) - 1 - lag)])

    def sample(self, top_p: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``generate`` on the sampler's weights: sequences and the log-probs of its (processed) scores."""
        sampler = self.sampler
        prompts = torch.randint(3, VOCAB, (self.rows, PROMPT), generator=self.gen)
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=self.gen)))
        extra = {"top_p": top_p} if top_p is not None else {"top_p": 1.0}
        with torch.no_grad():
            out = sampler.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                                   temperature=self.temperature, top_k=0, max_new_tokens=self.new,
                                   output_scores=True, return_dict_in_generate=True,
                                   pad_token_id=2, **extra)
        scores = torch.stack(out.scores, 1).float()  # after temperature (and top-p): what the sampler sampled from
        seqs = out.sequences
        return seqs, torch.log_softmax(scores, -1).gather(-1, seqs[:, -self.new:, None]).squeeze(-1)

    def step(self, defect: str | None = None, lag: int = 1) -> Batch:
        """Sync the sampler, sample, score with the trainer, train once; ``defect`` breaks one thing the way real
        pipelines do (``stale_weights``: the sampler holds the weights of ``lag`` optimizer steps ago;
        ``unsynced``: the initial weights, never synced)."""
        if defect == "unsynced":
            self.sampler.load_state_dict(self.initial)
            sampler_weights = self.initial
        else:
            self.sync(lag if defect == "stale_weights" else 0)
            sampler_weights = self.history[max(0, len(self.history) - 1 - (lag if defect == "stale_weights" else 0))]
        self.scored_with = (sampler_weights, self.history[-1])
        seqs, sampler_lp = self.sample(top_p=0.9 if defect == "top_p" else None)
        lengths = torch.randint(self.new // 2, self.new + 1, (self.rows,), generator=self.gen)
        mask = (torch.arange(self.new)[None] < lengths[:, None]).float()
        sampler_lp = torch.where(mask > 0, sampler_lp, 0.0)  # padding carries 0, as engines report it
        seqs = seqs.clone()
        seqs[:, -self.new:] = torch.where(mask > 0, seqs[:, -self.new:], 2)  # the pad token after each response
        scorer = self.other if defect == "other_model" else self.model
        temperature = 1.0 if defect == "temperature" else self.temperature
        with torch.no_grad():
            old, entropy = token_logprobs(scorer, seqs, self.new, temperature)
        if defect == "shifted_tokens":
            old = torch.roll(old, 1, dims=1)
        if defect == "shifted_mask":
            mask = torch.roll(mask, 1, dims=1)
            mask[:, 0] = 0.0
        toks = seqs[:, -self.new:]
        rewards = ((toks % 3 == 0) & (toks > 2) & (mask > 0)).float().sum(1) / mask.sum(1)  # learnable; not the pad
        self._train(seqs, rewards)
        return Batch(mask, sampler_lp, old, entropy, rewards, seqs)

    def policy_kl(self, batch: Batch) -> float:
        """The exact KL(sampler weights ‖ trainer weights) of the last step, both in float32 and over the whole
        vocabulary at every valid position of ``batch`` (float64 mean): the policy movement a stale sampler's k3
        estimates from one sampled token per position, without the sampling error or the bf16 noise."""
        assert self.scored_with is not None and batch.sequences is not None, "call step() first"
        logps = []
        for weights in self.scored_with:
            self._float.load_state_dict(weights)
            with torch.no_grad():
                logits = self._float(batch.sequences).logits[:, -self.new - 1:-1].double() / self.temperature
            logps.append(torch.log_softmax(logits, -1))
        per_position = (logps[0].exp() * (logps[0] - logps[1])).sum(-1)
        return float((per_position * batch.mask).sum() / batch.mask.sum())

    def _train(self, seqs: torch.Tensor, rewards: torch.Tensor) -> None:
        """One Adam step on REINFORCE with a batch-mean baseline; the new weights join the history."""
        self.model.train()
        logp, _ = token_logprobs(self.model, seqs, self.new, self.temperature)
        loss = -((rewards - rewards.mean())[:, None] * logp).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.model.eval()
        self.history = self.history[-16:] + [self._weights()]
