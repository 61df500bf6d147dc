"""What the monitor gathers during one step, before it syncs: the :class:`Accumulator`.

Device tensors only: reducible vectors (rollout, tokens, ledger) merged call by call,
and the per-group tensors of each rollout kept for histograms, the per-question history
and breach descriptions. Nothing here moves data to the host; ``grpo_monitor.step.sync`` does,
once, into a frozen :class:`~grpo_monitor.step.sync.SyncedStep`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

from ..stats.drop_bias import DROP_FIELDS
from ..stats.fields import FieldLayout
from ..stats.groups import GroupRewardStats
from ..stats.rollout import ROLLOUT_LAYOUT, RolloutDetail

#: ``generation_batches`` holds the running count of ``observe_generation`` calls in the step,
#: reduced by max: the generation rounds, which ranks sharing one batch run together.
LEDGER_FIELDS = (
    ("generation_batches", "max"), ("generated_groups", "sum"), ("generated_responses", "sum"),
    ("generated_tokens", "sum"), ("token_batches", "sum"), ("generated_degenerate", "sum"),
    ("generated_nonbinary", "sum"), *DROP_FIELDS,
)
ROLLOUT = ROLLOUT_LAYOUT
ADV_SAMPLE = 1024  # advantages sent to the sinks' histogram each step
LEDGER = FieldLayout(LEDGER_FIELDS)


#: The per-group arrays a record sends to the host at the end of a step, in this order.
GROUP_ARRAYS = ("std", "reward_sum", "n", "degenerate", "truncated", "rows")


class GroupArrays:
    """Host copies of one record's per-group arrays (``GROUP_ARRAYS``: std, reward sum, valid count, degenerate,
    truncated rows — NaN where the call gave no truncation —, rows, scorable or not)."""

    def __init__(self, flat: np.ndarray, questions: Sequence[Hashable] | None):
        std, rsum, n, degen, cut, rows = flat.reshape(len(GROUP_ARRAYS), -1)
        self.std, self.reward_sum, self.n, self.degenerate = std, rsum, n, degen.astype(bool)
        self.truncated, self.rows = cut, rows
        self.questions = list(questions) if questions is not None else None


def split_arrays(flat: np.ndarray, sizes: Sequence[int], questions: Sequence[Any]) -> list[GroupArrays]:
    """Cut the step's concatenated per-group arrays back into records."""
    out, offset = [], 0
    for size, q in zip(sizes, questions, strict=True):
        width = len(GROUP_ARRAYS) * size
        out.append(GroupArrays(flat[offset:offset + width], q))
        offset += width
    return out


@dataclasses.dataclass
class RolloutRecord:
    """One ``observe_rollout`` call: its per-group detail and the inputs, for a repro file."""

    detail: RolloutDetail
    labels: Sequence[Hashable]
    questions: list[Hashable] | None
    rewards: torch.Tensor
    gid: torch.Tensor
    advantages: torch.Tensor | None
    lengths: torch.Tensor | None = None  # token counts per row: replays estimators that whiten over tokens
    components: torch.Tensor | None = None  # (N, K) reward components: replays multi-reward estimators
    weights: tuple[float, ...] | None = None  # the components' weights (None: all 1)


@dataclasses.dataclass
class GenerationRecord:
    """One ``observe_generation`` call: per-group stats for the question history."""

    stats: GroupRewardStats
    reward_sum: torch.Tensor
    questions: list[Hashable] | None


def _per_group_only(stats: GroupRewardStats) -> GroupRewardStats:
    """Drop the per-row tensors (a step may hold many batches; only per-group ones are read later)."""
    return dataclasses.replace(stats, centered=None, valid=None)


def _merge(layout: FieldLayout, acc: torch.Tensor | None, new: torch.Tensor) -> torch.Tensor:
    return new if acc is None else layout.combine(acc, new)


@dataclasses.dataclass
class HostGroups:
    """The step's per-group arrays on the host: retained (rollout) groups, generated groups,
    and a sample of the advantages for a histogram."""

    kept: list[GroupArrays]
    generated: list[GroupArrays]
    adv: np.ndarray

    @staticmethod
    def union(parts: Sequence[HostGroups]) -> HostGroups:
        """Every rank's groups in rank order; the advantage sample thinned back to ``ADV_SAMPLE``."""
        adv = np.concatenate([p.adv for p in parts])
        return HostGroups([k for p in parts for k in p.kept], [g for p in parts for g in p.generated],
                          adv[:: max(1, -(-len(adv) // ADV_SAMPLE))])


@dataclasses.dataclass
class Accumulator:
    """One step's accumulators (see module docstring): its inputs only (what the checks find is
    :class:`~grpo_monitor.step.evaluate.StepFindings`).

    ``rollout_checked`` is the host copy of the rollout statistics already synced (and so
    checked) this step (an eager check per ``observe_rollout``); ``rollouts[:checked]`` are
    their records.
    """

    rollout_pending: torch.Tensor | None = None  # device: not yet synced
    rollout_checked: torch.Tensor | None = None  # host: synced and checked
    tokens: torch.Tensor | None = None
    ledger: torch.Tensor | None = None
    rollouts: list[RolloutRecord] = dataclasses.field(default_factory=list)
    generations: list[GenerationRecord] = dataclasses.field(default_factory=list)
    device: torch.device | None = None
    checked: int = 0  # rollouts[:checked] are synced and checked
    #: (mask, trainer log-probs, sampler log-probs) of the step's micro-batches with sampler log-probs:
    #: references, read only on a mismatch breach to name the first offending rows
    mismatch_batches: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = dataclasses.field(default_factory=list)
    #: the arguments (not None) each observe call of the step passed, by call: what a declared check needs
    calls: dict[str, list[frozenset[str]]] = dataclasses.field(default_factory=dict)

    def add_call(self, call: str, **arguments: Any) -> None:
        """Note which arguments ``call`` passed (:mod:`grpo_monitor.step.declared` reads them at the step's end)."""
        self.calls.setdefault(call, []).append(frozenset(k for k, v in arguments.items() if v is not None))

    def add_rollout(self, vec: torch.Tensor, record: RolloutRecord) -> None:
        """Merge a rollout's statistics vector; keep its per-group record (and note which inputs it had)."""
        self.add_call("observe_rollout", advantages=record.advantages, lengths=record.lengths,
                      reward_components=record.components)
        self.device = self.device or vec.device
        self.rollout_pending = _merge(ROLLOUT, self.rollout_pending, vec)
        record.detail.stats = _per_group_only(record.detail.stats)
        self.rollouts.append(record)

    def add_tokens(self, vec: torch.Tensor, layout: FieldLayout) -> None:
        """Merge a micro-batch's token statistics vector."""
        self.device = self.device or vec.device
        self.tokens = _merge(layout, self.tokens, vec)

    def add_generation(self, vec: torch.Tensor, record: GenerationRecord) -> None:
        """Merge a generated batch's ledger vector; keep its per-group record."""
        self.device = self.device or vec.device
        self.ledger = _merge(LEDGER, self.ledger, vec)
        record.stats = _per_group_only(record.stats)
        self.generations.append(record)

    def mark_checked(self, host_vec: torch.Tensor | None, upto: int) -> None:
        """Fold a synced (host) rollout vector in; ``rollouts[:upto]`` count as checked."""
        if host_vec is not None:
            self.rollout_checked = _merge(ROLLOUT, self.rollout_checked, host_vec)
        self.rollout_pending = None
        self.checked = upto

    def observed_lag(self) -> float:
        """The largest row age (``observe_rollout(policy_version=)``) of the step's checked rollouts; 0 without."""
        if self.rollout_checked is None:
            return 0.0
        age = float(self.rollout_checked[ROLLOUT.names.index("age_max")])
        return age if age > 0 else 0.0

    def drop(self, part: str) -> None:
        """Forget what a failed part (``"rollout"``, ``"generation"``, ``"loss"``) gathered this step."""
        if part == "rollout":
            self.rollout_pending = self.rollout_checked = None
            self.rollouts, self.checked = [], 0
        elif part == "generation":
            self.ledger, self.generations = None, []
        elif part == "loss":
            self.tokens = None

    def observed(self) -> bool:
        """Whether anything was observed this step (a rollout, a generated batch, a micro-batch)."""
        return bool(self.rollouts or self.generations or self.tokens is not None)

    def pending_rollouts(self) -> list[RolloutRecord]:
        """The rollouts whose statistics are pending (not yet checked)."""
        return self.rollouts[self.checked:]

    def group_arrays(self) -> list[torch.Tensor]:
        """Local per-group tensors needed on the host at the end of the step."""
        out = []
        for stats, reward_sum, cut in [(r.detail.stats, r.detail.reward_sum, r.detail.truncated)
                                       for r in self.rollouts] + [(g.stats, g.reward_sum, None)
                                                                  for g in self.generations]:
            cut = torch.full_like(stats.std, torch.nan) if cut is None else cut.to(stats.std.dtype)
            out.append(torch.stack([stats.std, reward_sum, stats.n, stats.degenerate.to(stats.std.dtype), cut,
                                    stats.rows.to(stats.std.dtype)]))  # GROUP_ARRAYS, in order (flattened by row)
        return out + [self.advantage_sample()]

    def host_groups(self, flat: np.ndarray) -> HostGroups:
        """Cut the host copy of :meth:`group_arrays` back into records (labels from the calls)."""
        sizes = [len(r.detail.stats.n) for r in self.rollouts] + [len(g.stats.n) for g in self.generations]
        labels = [r.questions for r in self.rollouts] + [g.questions for g in self.generations]
        records = split_arrays(flat, sizes, labels)
        cut = len(self.rollouts)
        return HostGroups(records[:cut], records[cut:], flat[len(GROUP_ARRAYS) * sum(sizes):])

    def advantage_sample(self, limit: int = ADV_SAMPLE) -> torch.Tensor:
        """At most ``limit`` advantages of the step's rollouts, evenly strided, for a histogram."""
        advs = [r.advantages for r in self.rollouts if r.advantages is not None]
        if not advs:
            return torch.empty(0, dtype=torch.float64, device=self.device)
        flat = torch.cat(advs) if len(advs) > 1 else advs[0]
        return flat[:: max(1, -(-len(flat) // limit))]
