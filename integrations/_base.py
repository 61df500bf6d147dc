"""The base every integration is: its name and its own report advice; the entry-point protocol written once.

An :class:`Integration` declares what the rest of the project reads by name, through the
package's registry (:func:`grpo_monitor.integrations.integration`): the name its runs record
(``monitor.declare_integration``) and its report advice, for each metric family it did not log,
what to set in that trainer (``advice``: family or key prefix -> text, ``{who}`` and the run's
recorded settings filled in by the report), and why some of its steps logged no rollout.

An :class:`EntryPoint` integration (verl, OpenRLHF, SkyRL, AReaL) declares only what differs: how
its framework loads (:meth:`EntryPoint.load`), which entry points it wraps with which capture
(:meth:`EntryPoint.install`) and what it hands the monitor after each call
(:meth:`EntryPoint.observe`); the estimator comes from the framework's config, read by the
capture. ``attach``/``detach``/``attached``/``attach_from_env`` are written here, once. The
callback style (TRL, the HF ``Trainer``) has no entry point to wrap: its integration is a plain
:class:`Integration` beside its ``TrainerCallback``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink

from ._entrypoint import Attachment, Call, Slot
from ._from_env import attach_from_env as _attach_from_env
from ._from_env import attach_from_env_on_import


class Integration:
    """One integration as the report knows it: ``name`` (its run record's), ``advice`` (metric family or key
    prefix -> what to do to log it, with ``{who}`` and ``{setting}`` fields), ``rollout_gaps`` (why steps can
    lack a rollout; None: the report's generic sentence)."""

    def __init__(self, name: str, *, advice: Mapping[str, str] | None = None, rollout_gaps: str | None = None):
        self.name = name
        self.advice: dict[str, str] = dict(advice or {})
        self.rollout_gaps = rollout_gaps

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class EntryPoint(Integration):
    """An integration wrapping its framework's one advantage call per training step (see the module docstring).

    ``on_import``: framework modules whose import must not happen in Ray's setup hook (SkyRL's
    creates Ray actors): ``attach_from_env`` then waits for the trainer's own import of one of them.
    """

    def __init__(self, name: str, *, advice: Mapping[str, str] | None = None, rollout_gaps: str | None = None,
                 on_import: Sequence[str] = ()):
        super().__init__(name, advice=advice, rollout_gaps=rollout_gaps)
        self.on_import = tuple(on_import)
        self.slot = Slot(name)

    # ------------------------------------------------------------ declared by each integration
    def load(self) -> Any:
        """Import the framework; what it returns is handed to :meth:`install` (a worded ``ImportError`` when absent)."""
        raise NotImplementedError

    def install(self, state: Attachment, loaded: Any, **options: Any) -> None:
        """Wrap the entry points of ``loaded``: ``state.patch(owner, name, capture, self.observer(state))``, where
        ``capture`` reads the estimator the framework's config declares (a ``Declared``) before each call;
        ``options`` are the module's ``attach`` options (``classes=``, ``kl=``)."""
        raise NotImplementedError

    def observe(self, state: Attachment, monitor: GRPOMonitor, call: Call, out: Any) -> None:
        """After a call: hand its rewards, groups, advantages and token tensors to ``monitor``."""
        raise NotImplementedError

    # ------------------------------------------------------------ written once
    def observer(self, state: Attachment) -> Any:
        """:meth:`observe` bound to ``state``, as :meth:`Attachment.wrap` calls it: ``observe(monitor, call, out)``."""

        def observe(monitor: GRPOMonitor, call: Call, out: Any) -> None:
            self.observe(state, monitor, call, out)

        return observe

    def attach(self, monitor: GRPOMonitor | None = None, *, config: MonitorConfig | None = None,
               sinks: Sequence[Sink | str] | str | None = "auto", step_per_call: bool = True,
               **options: Any) -> Attachment:
        """Wrap the framework's entry points (the module's ``attach`` documents its options); raises
        ``RuntimeError`` when already attached. A failed install puts back what it had replaced."""
        self.slot.check_free()
        loaded = self.load()
        state = Attachment(self.name, monitor, config, sinks, step_per_call)
        try:
            self.install(state, loaded, **options)
        except BaseException:
            state.unpatch()
            raise
        return self.slot.claim(state)

    def attach_from_env(self) -> Attachment | None:
        """``attach()`` configured by ``GRPO_MONITOR_CONFIG``: usable as Ray's ``worker_process_setup_hook``
        (``"grpo_monitor.integrations.<name>.attach_from_env"``); the current attachment when already attached.
        With ``on_import``, deferred until the trainer imports one of those modules (None while waiting)."""
        if self.on_import:
            return attach_from_env_on_import(self.attach, self.slot, self.on_import, defer_errors=True)
        return _attach_from_env(self.attach, lambda: self.slot.current)

    def detach(self) -> None:
        """Restore what ``attach()`` replaced; close the monitor it built (no-op when not attached)."""
        self.slot.release()

    def attached(self) -> GRPOMonitor | None:
        """The monitor the framework's advantages report to (None before the first call builds it, or detached)."""
        return self.slot.monitor()


# ------------------------------------------------------------------ advice the entry points share
_DECLARE = "declare the estimator with MonitorConfig(estimator=...) when {who}'s option has no registry entry"
_NO_QUESTIONS = ("the {who} integration groups rows by {ids}, not by question, so there is no per-question history "
                 "(the iid prediction and overdispersion need question ids and 0/1 rewards)")
_NO_LEDGER = ("the {who} integration does not observe generation rounds; with dynamic sampling call "
              "monitor.observe_generation(rewards, question_ids=...) on every generated batch, filtered groups "
              "included")
_NO_RATIO = ("the {who} integration does not observe the policy loss's old log-probs; call "
             "monitor.observe_loss(mask=..., logprobs=..., old_logprobs=...) in your loss")
_NO_SAMPLER = ("the {who} integration found no rollout log-probs in this run; have the inference engine return "
               "them, or call monitor.observe_loss(mask=..., logprobs=..., sampler_logprobs=...) in your loss")
_NO_ENTROPY = ("the {who} integration does not see per-token entropies; call monitor.observe_loss(mask=..., "
               "entropy=...) where the policy loss computes them")
_NO_WEIGHTS = ("the {who} integration observes the advantage step, not the policy loss: declare the loss's "
               "aggregation with MonitorConfig(loss_aggregation=...) to derive the weights from the masks and "
               "advantages it passes, or call monitor.observe_loss(mask=..., advantages=..., logprobs=..., loss=...) "
               "where the policy loss is computed")


def entry_point_advice(ids: str, own: Mapping[str, str]) -> dict[str, str]:
    """The report advice of an integration that sees one advantage call per step: rows grouped by ``ids``, no
    policy loss, no generation rounds; ``own`` (family -> text) adds or replaces rows.

    >>> entry_point_advice("uid", {"grpo/kl/": "observe the KL"})["grpo/groups/overdispersion"][:40]
    'the {who} integration groups rows by uid'
    """
    shared = {
        "grpo/ratio/": _NO_RATIO,
        "grpo/sampling/responses_per_retained_group": _NO_LEDGER,
        "grpo/groups/overdispersion": _NO_QUESTIONS.replace("{ids}", ids),
        "grpo/adv/": _DECLARE,
        "grpo/mismatch/": _NO_SAMPLER,
        "grpo/weights/": _NO_WEIGHTS,
        "grpo/entropy/": _NO_ENTROPY,
    }
    return {**shared, **own}
