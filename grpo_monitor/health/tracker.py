"""HealthTracker: the findings of a run, step by step, from the metrics the monitor already synced.

One fold per step (:meth:`HealthTracker.update`): the step's metrics dict (host floats: no device sync
here), the seconds since the previous step and the per-question supply go into the bounded memory, every
rule of the catalogue is evaluated, and a finding opens once its condition held for its patience and
clears once it failed for as long. The live monitor and ``grpo-monitor doctor`` run the same tracker.

>>> t = HealthTracker(None)
>>> for step in range(4):  # a zero-gradient share is judged from the 4th step on
...     u = t.update(step, {"grpo/groups/degenerate_rate": 0.9, "grpo/groups/total": 2.0,
...                         "grpo/groups/effective_prompts": 0.0})
>>> u.status, [f.name for f in u.active]
(2, ['degenerate_dominated', 'zero_gradient_steps'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..catalog.findings import FINDINGS, SEVERITIES
from . import offpolicy, trends, waste
from .context import Context, Evaluation, Inputs
from .memory import Memory
from .state import STATUS_KEY, STATUS_OF, FindingState, HealthUpdate, QuestionSupply

Rule = Callable[[Inputs, int], "Evaluation | None"]

#: The rule of each finding (the records are :data:`~grpo_monitor.catalog.findings.FINDINGS`).
RULES: Mapping[str, Rule] = {
    "degenerate_dominated": waste.degenerate_dominated, "prompt_supply": waste.prompt_supply,
    "truncation_dominated": waste.truncation_dominated, "zero_gradient_steps": waste.zero_gradient_steps,
    "entropy_collapse": trends.entropy_collapse, "entropy_explosion": trends.entropy_explosion,
    "reward_plateau": trends.reward_plateau, "mismatch_drift": trends.mismatch_drift,
    "length_bias": trends.length_bias, "routing_disagreement": offpolicy.routing_disagreement,
    "staleness_bias": offpolicy.staleness_bias,
}

#: What a recording lacking a finding's first evidence key cannot show (``unsupported``).
_NEEDS = {
    "prompt_supply": ("grpo/groups/effective_prompts", "per-question ids (question_ids=) for the supply; the "
                      "forecast needs grpo/groups/effective_prompts"),
    "zero_gradient_steps": ("grpo/tokens/valid", "the loss mask (observe_loss) or per-group rewards"),
}


def context_of(config: Any, integration: str = "api", gpus: int = 1) -> Context:
    """The rules' :class:`Context` from a ``MonitorConfig`` (None: the defaults)."""
    if config is None:
        return Context(integration=integration)
    cost = getattr(config, "gpu_hour_cost", None)
    return Context(group_size=config.group_size, entropy_floor=getattr(config, "entropy_floor", 0.05),
                   mismatch_k3=config.tolerances.mismatch_k3, integration=integration,
                   hour_cost=None if cost is None else cost * max(1, gpus))


class HealthTracker:
    """Run health across steps (see the module docstring); ``state_dict`` saves all of it."""

    def __init__(self, config: Any, integration: str = "api", *, gpus: int = 1):
        self.context = context_of(config, integration, gpus)
        self.memory = Memory()
        self.streaks: dict[str, int] = {}  # consecutive steps the condition held (> 0) or failed (< 0)
        self.since: dict[str, int] = {}  # open findings: the step each opened
        self.active: dict[str, FindingState] = {}

    def update(self, step: int, metrics: Mapping[str, float], *, seconds: float | None = None,
               supply: QuestionSupply | None = None) -> HealthUpdate:
        """Fold one step in; the findings active after it, those opened and cleared at it, the metrics."""
        x = Inputs(metrics, self.memory, self.context, seconds, supply)
        out = waste.fold(x)
        trends.fold(x)
        offpolicy.fold(x)
        if supply is not None:
            out.update({f"grpo/health/supply_{k}_frac": v for k, v in supply.shares().items()})
        opened: list[str] = []
        cleared: list[str] = []
        for name, rule in RULES.items():
            finding = FINDINGS[name]
            found = rule(x, finding.patience)
            if found is None:
                continue
            if math.isfinite(found.figure):  # a figure not defined yet (no repeats, a flat trend) is left out
                out[finding.key] = found.figure
            change = self._advance(step, name, found)
            (opened if change == "opened" else cleared if change == "cleared" else []).append(name)
        status = max((STATUS_OF[f.severity] for f in self.active.values()), default=0)
        out[STATUS_KEY] = float(status)
        return HealthUpdate(status, tuple(self.active.values()), tuple(self.active[n] for n in opened),
                            tuple(cleared), out)

    def _advance(self, step: int, name: str, found: Evaluation) -> str | None:
        """Move one finding's streak; "opened", "cleared" or None."""
        patience, streak = FINDINGS[name].patience, self.streaks.get(name, 0)
        streak = (max(streak, 0) + 1) if found.severity is not None else (min(streak, 0) - 1)
        self.streaks[name] = streak
        if name in self.active:
            if streak <= -patience:
                del self.active[name], self.since[name]
                return "cleared"
            if found.severity is not None:
                self.active[name] = self._state(step, name, found)
            else:
                self.active[name] = _restep(self.active[name], step, found)
            return None
        if streak >= patience:
            self.since[name] = step
            self.active[name] = self._state(step, name, found)
            return "opened"
        return None

    def _state(self, step: int, name: str, found: Evaluation) -> FindingState:
        finding = FINDINGS[name]
        return FindingState(name, found.severity or finding.severity, step, self.since[name], found.figure,
                            dict(found.evidence), found.message, finding.remedies_for(self.context.integration))

    def matching(self, halt_on: Iterable[str]) -> tuple[FindingState, ...]:
        """The active findings ``halt_on`` names: by name, or by a severity (that severity or worse)."""
        wanted = set(halt_on)
        floor = min((SEVERITIES.index(s) for s in wanted if s in SEVERITIES), default=math.inf)
        return tuple(f for f in self.active.values() if f.name in wanted or SEVERITIES.index(f.severity) >= floor)

    @staticmethod
    def unsupported(available_keys: Iterable[str]) -> dict[str, str]:
        """Findings a recording with only ``available_keys`` cannot show, and why (its evidence is absent)."""
        keys = set(available_keys)
        out = {}
        for name, finding in FINDINGS.items():
            first, why = _NEEDS.get(name, (finding.evidence[0], ""))
            if first not in keys:
                out[name] = f"the recording has no {first}" + (f" ({why})" if why else "")
        return out

    def state_dict(self) -> dict[str, Any]:
        """Plain values: the memory, the streaks and the open findings."""
        return {"memory": self.memory.state_dict(), "streaks": dict(self.streaks), "since": dict(self.since),
                "active": [f.to_dict() for f in self.active.values()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (all or nothing: a bad state raises ``ValueError`` and changes nothing)."""
        try:
            memory = Memory()
            memory.load_state_dict(state["memory"])
            streaks = {str(k): int(v) for k, v in state["streaks"].items() if k in FINDINGS}
            since = {str(k): int(v) for k, v in state["since"].items() if k in FINDINGS}
            active = {f.name: f for f in map(FindingState.from_dict, state["active"]) if f.name in since}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"the health state is not what HealthTracker.state_dict() returns: {exc!r}") from None
        self.memory, self.streaks, self.since, self.active = memory, streaks, since, active


def _restep(state: FindingState, step: int, found: Evaluation) -> FindingState:
    """An open finding whose condition lapsed this step (not yet cleared): its figures at ``step``."""
    return FindingState(state.name, state.severity, step, state.since, found.figure, dict(found.evidence),
                        found.message, state.remedies)
