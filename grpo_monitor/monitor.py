"""GRPOMonitor: the one stateful object. It accumulates, syncs once, checks, reports.

A step, top to bottom (``end_step``):

1. ``synced = sync_step(...)``: the one collective and host copy (:mod:`grpo_monitor.step.sync`);
2. ``found = self._check(synced)``: the invariants, pure functions of it and the estimator lock (:mod:`.step.checks`);
3. ``run = self._run.update(...)``: the stateful updates, once (history, ledger totals);
4. ``report = assemble_report(...)``: pure; every metric of the step, breach or not;
5. the sinks get the report; a breach under the ``"raise"`` policy raises after that.

With ``defer_checks=False`` (the default) ``observe_rollout`` runs steps 1-2 on its own rollout at once, so a broken
batch never reaches the optimizer; on a breach it finishes the step there (3-5, with a local sync of the rest).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable
from typing import Any

from .config import MonitorConfig
from .errors import RunStalled
from .health.live import LiveHealth
from .report import StepReport
from .run.record import integration_arg, run_record
from .run.saved import check_config, validate_state
from .run.state import RunState
from .sinks.base import Sink, run_params
from .sinks.dispatch import SinkSet
from .stats.fields import FieldLayout
from .step import declared, inputs, observe, policy
from .step.accumulator import ROLLOUT, Accumulator
from .step.calls import checked
from .step.checks import batch_axis_note, check_rollout, token_violations
from .step.distributed import rank_and_world
from .step.guard import Faults, NotCopyable, fail_open, guarded_part, locked
from .step.metrics import assemble_report, violation_metrics
from .step.sync import SyncedStep, sync_step
from .step.trainer_audit import AuditsTrainerMetrics, TrainerAudit
from .step.weights import LossWeights
from .violations import InvariantViolation, Violation


class GRPOMonitor(NotCopyable, AuditsTrainerMetrics):
    """Watches a GRPO run: call ``observe_rollout`` / ``observe_loss`` during a step, then ``end_step``.

    >>> import torch
    >>> mon = GRPOMonitor(MonitorConfig(group_size=4))
    >>> r = torch.tensor([[1., 0., 1., 0.], [1., 1., 1., 1.]])
    >>> a = (r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-4)
    >>> mon.observe_rollout(r, advantages=a)
    >>> mon.end_step().metrics["grpo/groups/degenerate_rate"]
    0.5
    """

    @checked
    def __init__(self, config: MonitorConfig | None = None, sinks: Iterable[Sink] = ()):
        self.config = config if config is not None else MonitorConfig()
        if not isinstance(self.config, MonitorConfig):
            raise TypeError(f"config must be a MonitorConfig, but got {type(self.config).__name__}")
        self.rank, self.world = rank_and_world()
        cfg = self.config
        self.sinks = SinkSet(sinks, is_main_process=_is_rank_zero, queue_size=cfg.sink_queue_size,
                             stall_timeout=cfg.sink_stall_timeout, flush_timeout=cfg.sink_flush_timeout,
                             when_full=cfg.sink_when_full)
        self.step, self.closed = 0, False
        self._closed_by: str | None = None  # why: shown by a call on the closed monitor
        self._lock = threading.RLock()  # one lock for every public call (see guard.py)
        self._run = RunState(cfg)  # what crosses steps (run_state.py)
        self._health = LiveHealth(cfg, gpus=self.world)  # run-health findings (health/)
        self._guard = Faults()  # the monitor's own faults: parts switched off, streaks (guard.py)
        self._acc = Accumulator()  # this step, on the device (accumulator.py)
        self._token_layout: FieldLayout | None = None
        self._extra: dict[str, float] = {}  # add_metrics() of the current step; _audit: audit_trainer_metrics()
        self._weights, self._audit = LossWeights(), TrainerAudit()  # the loss's token weights; the step's audit
        self._steps_ended = 0  # steps reported by this monitor (close() says when end_step was never called)
        self._integration: tuple[str, dict[str, Any]] | None = None  # declare_integration()
        self._run_record_due = True  # the next report carries the run record (report.run)

    # ----------------------------------------------------------------- observe
    @fail_open("rollout")
    def observe_rollout(self, rewards: Any, *, group_ids: Any = None, advantages: Any = None, question_ids: Any = None,
                        lengths: Any = None, truncated: Any = None, reward_components: Any = None,
                        reward_weights: Any = None, policy_version: Any = None, trained_version: Any = None) -> None:
        """Record the retained training rollout: rewards ``(B, G)`` or flat, advantages aligned.

        ``lengths`` (token counts per row, optional) lets the check replay estimators that
        whiten advantages over tokens (AReaL, REINFORCE++ baseline) exactly, and gives the
        lengths of rows above and below their group's mean reward. ``truncated`` (bool per
        row: cut at the length limit; else ``lengths >= MonitorConfig.max_response_length``
        when that is set) gives ``grpo/rows/truncated_rate``. ``reward_components`` ``(B, G, K)`` (one column per reward
        function) and ``reward_weights`` ``(K,)`` let it replay multi-reward estimators
        (``trl.normalize_then_sum``, ``verl.gdpo``); ``rewards`` stays the one reward per row. ``policy_version``
        (an int per row: the weights that generated it) gives ``grpo/offpolicy/age_*`` against ``trained_version``
        (default: the step). An empty batch is a no-op once checked. A breach under ``"raise"`` raises here."""
        got = observe.rollout_input(
            self.config, rewards, group_ids=group_ids, advantages=advantages, question_ids=question_ids,
            lengths=lengths, truncated=truncated, reward_components=reward_components, reward_weights=reward_weights,
            policy_version=policy_version, trained_version=trained_version, step=self.step)
        if got is None:
            if rank_and_world()[1] > 1 and not self.config.defer_checks:
                self._check_now()  # the other ranks' eager check waits for this one
            return
        vec, record = got
        self._acc.add_rollout(vec, record)
        self._weights.set_reference(record.gid, record.detail.stats.degenerate, record.questions or record.labels)
        if not self.config.defer_checks:
            self._check_now()

    @fail_open("generation")
    def observe_generation(self, rewards: Any, *, group_ids: Any = None, question_ids: Any = None,
                           lengths: Any = None, dropped: Any = None) -> None:
        """Record a generated batch (discarded groups and ``dropped`` stale rows included) for the ledger."""
        got = observe.generation_input(self.config, rewards, batch=len(self._acc.generations) + 1, dropped=dropped,
                                       group_ids=group_ids, question_ids=question_ids, lengths=lengths)
        if got is not None:
            self._acc.add_generation(*got)

    @fail_open("loss")
    def observe_loss(self, *, mask: Any, advantages: Any = None, logprobs: Any = None, ref_logprobs: Any = None,
                     old_logprobs: Any = None, kl: Any = None, sampler_logprobs: Any = None,
                     entropy: Any = None, loss: Any = None, rows: Any = None, routed_experts: Any = None,
                     sampler_routed_experts: Any = None) -> None:
        """Record one micro-batch of token tensors ``(B, T)``; no host sync.

        ``sampler_logprobs``: the log-probs the inference engine reported for the tokens it generated
        (``grpo/mismatch/*`` against ``old_logprobs``, else ``logprobs``); ``entropy``: the trainer's per-token
        entropies (``grpo/entropy/*``). ``loss`` (the scalar the trainer calls ``backward()`` on, or this
        micro-batch's part of it, computed from ``logprobs`` with grad) makes the monitor measure each token's weight
        ``dloss/dlogprobs`` (``autograd.grad`` with ``retain_graph=True``: the trainer's gradients are untouched);
        without it, weights are derived from ``config.loss_aggregation``. ``rows``: each row's index into the latest
        ``observe_rollout``'s rows (flat order), for the per-group weights. ``routed_experts`` (the trainer's) and
        ``sampler_routed_experts`` (the engine's) ``(B, T, L, k)``: top-k experts per token and layer (``grpo/moe/*``).
        """
        got = observe.loss_input(self.config, mask=mask, loss=loss, rows=rows, advantages=advantages,
                                 logprobs=logprobs, ref_logprobs=ref_logprobs, old_logprobs=old_logprobs, kl=kl,
                                 sampler_logprobs=sampler_logprobs, entropy=entropy, routed_experts=routed_experts,
                                 sampler_routed_experts=sampler_routed_experts)
        self._acc.add_call("observe_loss", **got.tensors, mask=got.mask, loss=got.loss)
        self._token_layout = self._token_layout or FieldLayout(got.fields)
        self._acc.add_tokens(got.vec, self._token_layout)
        if got.mismatch is not None:
            self._acc.mismatch_batches.append(got.mismatch)
        guarded_part(self, "weights", self._weights.observe, got.mask, got.tensors, loss=got.loss, rows=got.rows,
                              derive=self.config.loss_aggregation != "auto", logprobs=got.logprobs)

    @locked
    def declare_estimator(self, name: str, stabilizer: float | None = None) -> None:
        """Declare the advantage estimator the trainer uses (an integration's call; users set
        ``MonitorConfig.std_convention``). A change restarts the estimator lock; the same one is a no-op."""
        if name == self.config.std_convention and stabilizer == self.config.stabilizer:
            return
        self.config = MonitorConfig(**{**self.config.model_dump(), "std_convention": name, "stabilizer": stabilizer})
        self._run.redeclare(self.config)
        self._health.declare(self.config, self._health.tracker.context.integration)
        self._run_record_due = True

    @locked
    def declare_integration(self, name: str, settings: dict[str, Any] | None = None) -> None:
        """Name the integration feeding this monitor (``"trl"``, ...) and the trainer settings that decide which
        metric families it logs (TRL's ``beta``, ...); the next report carries them (:mod:`.run.record`)."""
        self._integration = integration_arg(name, settings)
        self._health.declare(self.config, self._integration[0])
        self._run_record_due = True

    def run_record(self) -> dict[str, Any]:
        """The integration and its settings (``"api"``: the monitor's own calls) and the config."""
        return run_record(self._integration, self.config.model_dump(mode="json"))

    @locked
    def add_metrics(self, metrics: dict[str, float]) -> None:
        """Host-side scalars for this step's report (e.g. an integration's comparison with its trainer).

        Keys are non-empty strings outside the monitor's own sections (``grpo/groups/``, ``grpo/adv/``, ... see
        ``catalog.metrics.MONITOR_SECTIONS``; ``grpo/user/...`` is yours), values finite numbers; anything else raises
        ``InputValueError``/``InputTypeError``.
        """
        self._extra.update(inputs.user_metrics(metrics))

    @locked
    def _add_recorded(self, metrics: dict[str, float]) -> None:
        """Values a trainer recorded for the monitor's own keys (``grpo-monitor scan`` reading a run's logged metrics,
        :mod:`grpo_monitor.tools.scan.logged`): merged into this step's report, the monitor's own values first. Finite
        numbers only; not for user code (``add_metrics`` is)."""
        for key, value in metrics.items():
            self._extra[key] = inputs.finite_number(key, value)

    # -------------------------------------------------------------------- step
    @fail_open("end_step")
    def end_step(self, step: int | None = None) -> StepReport:
        """Sync once, check every invariant, hand the report to the sinks and return it."""
        self.step = inputs.step_arg(step, self.step)
        synced = self._sync(final=True)
        unmet = declared.unmet(self.config, self._acc.calls, said=self._run.said_declared, step=self.step)
        return self._finish(synced, self._check(synced) + unmet)

    def _sync(self, final: bool, collective: bool = True) -> SyncedStep:
        """See :func:`grpo_monitor.step.sync.sync_step`; on several ranks every one sends the token slots."""
        if final and self._token_layout is None and rank_and_world()[1] > 1:
            self._token_layout = FieldLayout(observe.LOSS_FIELDS)  # the token slots, then the routing counts
        return sync_step(self._acc, self._token_layout, global_scope=self.config.rollout_scope == "global",
                         final=final, collective=collective, weights=self._weights.flat() if final else None)

    def _check_now(self) -> None:
        """The eager check of ``observe_rollout``: a breach to raise finishes (and closes) the step here."""
        found = self._check(self._sync(final=False))
        if any(self._raises(v) for v in found):
            self._finish(self._sync(final=True, collective=False), found)
        self._record(found)

    def _check(self, synced: SyncedStep) -> list[Violation]:
        """The invariants of what ``synced`` holds (:mod:`~grpo_monitor.step.checks` decides what counts).

        The checks are pure and return data; applied here: the run's estimator lock narrows (``RunState.estimator``),
        the judgement is kept for the report, the checked slice marked.
        """
        found: list[Violation] = []
        if synced.has_rollout:
            rollout = synced.rollout
            assert rollout is not None, "synced.has_rollout"
            checked = check_rollout(rollout, synced.records, self._run.estimator, self.config, self.step)
            found, self._run.estimator = checked.found, checked.lock  # the lock narrows here, once
            if checked.judged is not None:
                self._acc.estimator = checked.judged
            policy.say_once(batch_axis_note(checked.judged, self.config), self._run.said_declared)
        self._acc.mark_checked(synced.rollout_vec, len(self._acc.rollouts))
        if synced.tokens is not None:
            found += token_violations(synced.tokens, self.config, self.step, self._acc.mismatch_batches,
                                      self._acc.observed_lag())
        if synced.weights is not None:
            found += guarded_part(self, "weights", self._weights.check, synced.weights, synced.all_weights,
                                  self.config, self.step) or []
        return found

    def _finish(self, synced: SyncedStep, found: list[Violation]) -> StepReport:
        """Record the findings, update the run state once, assemble and emit the report; raise a breach."""
        found = policy.with_repro(found, self.config, self.step, self._acc, self._run.estimator.state_dict)
        self._record(found)
        raising = [v for v in found if self._raises(v)]
        report = self._report(synced, failed=bool(raising))
        halting = () if raising else self._health.halting(report)
        if raising or halting:
            why = "invariant breach" if raising else "stall"
            report.failed, self.closed, self._closed_by = True, True, f"the {why} at step {self.step} closed it"
        self._emit(report)
        if raising or halting:
            self.sinks.finish(failed=True)
            raise InvariantViolation(raising) if raising else RunStalled(halting)
        return report

    def _raises(self, v: Violation) -> bool:
        """An error-severity breach under the ``"raise"`` policy (:func:`~grpo_monitor.step.policy.raises`)."""
        return policy.raises(v, self.config)

    def _record(self, found: list[Violation]) -> None:
        """Keep the step's violations, count them, warn per the policy (:func:`.step.policy.warn_found`)."""
        self._acc.violations.extend(found)
        self._run.count(found)
        policy.warn_found(found, self._run.counts, self.config)

    # ------------------------------------------------------------------ report
    def _report(self, synced: SyncedStep, failed: bool) -> StepReport:
        """Steps 3-4: the run state's update, the assembled report and its run health. Neither is checking: a
        fault here is logged (traceback once) and counted, and the report keeps the step's violations."""
        acc = self._acc
        rollout = ROLLOUT.to_dict(acc.rollout_checked.tolist()) if acc.rollout_checked is not None else None
        try:
            run = self._run.update(self.step, rollout, synced.ledger, synced.groups)
            report = assemble_report(self.step, rollout, synced.ledger, synced.tokens, synced.groups, acc.estimator,
                                     acc.violations, run, failed, self.config.mismatch_mask)
        except Exception:
            if self.config.strict:
                raise
            self._guard.report_fault(self.step)
            report = StepReport(self.step, violation_metrics(acc.violations), list(acc.violations), failed=failed)
        report.metrics.update(self._weights.metrics)
        report.histograms.update(self._weights.histograms)
        report.metrics.update({k: v for k, v in self._extra.items() if k not in report.metrics})
        report.metrics.update(self._guard.health(self.sinks.dropped()))
        self._record(guarded_part(self, "trainer_metrics", self._audit.apply, report, acc.violations) or [])
        if self._run_record_due:
            report.run, self._run_record_due = self.run_record(), False
        if "health" not in self._guard.disabled or self._guard.retry("health", self.step):
            guarded_part(self, "health", self._health.evaluate, report, self._run.questions.history)
        return report

    def _emit(self, report: StepReport) -> None:
        """Hand ``report`` to the sinks (a finding's onset or clearing also as an alert); the next step starts empty."""
        self.sinks.emit(report, config=lambda: run_params(self.config))
        LiveHealth.alert(report, self.sinks)
        self._steps_ended += 1
        self._guard.retried.clear()
        self.step = report.step + 1
        self._acc = Accumulator()
        self._extra, self._audit = {}, TrainerAudit()
        self._weights.end_step()

    # ----------------------------------------------------------- fail-open
    @property
    def disabled_parts(self) -> frozenset[str]:
        """Parts an internal fault switched off ("rollout", "generation", "loss", "end_step", "<name> integration")."""
        return frozenset(self._guard.disabled)

    def _fault(self, part: str) -> None:
        """Log an internal fault of ``part`` and drop what it gathered this step (so the step end does not trip
        on it); announce it once when it is off for the run."""
        if self._guard.record(part, self.step):
            self._guard.announce(part, self.step, self.sinks)
        self._acc.drop(part)
        if part in ("loss", "weights"):
            self._weights.end_step()

    def _skip(self, part: str, *args: Any, **kwargs: Any) -> StepReport | None:
        """What a disabled part does: nothing, except ``end_step``, which still closes the step."""
        if part != "end_step":
            return None
        report = StepReport(inputs.step_arg(args[0] if args else kwargs.get("step"), self.step), {})
        report.metrics.update(self._guard.health(self.sinks.dropped()))
        self._emit(report)
        return report

    # --------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Finish every sink (flushing what they still queue). A second ``close()`` does nothing. After it, every
        observe/``end_step``/``add_metrics`` call raises ``MonitorClosedError`` naming the call; ``state_dict()``
        still works."""
        with self._lock:
            if not self.closed and self._unfinished():
                self._end_unfinished()
            self._close(failed=False)

    def _unfinished(self) -> bool:
        """Whether the current step holds observed data that no ``end_step`` has reported yet."""
        return self._acc.observed() or bool(self._extra)

    def _end_unfinished(self) -> None:
        """``close()`` with data observed since the last ``end_step``: end that step (a breach still raises)."""
        warnings.warn(policy.unfinished_text(self.step, self._steps_ended), RuntimeWarning, stacklevel=3)
        self.end_step()

    def _close(self, failed: bool) -> None:
        if self.closed:
            return
        self.closed, self._closed_by = True, "close() was called"
        self.sinks.finish(failed=failed)

    def reopen(self) -> None:
        """Start a new segment after ``close()`` with the same sinks (they reopen their backends on first use: JSONL
        appends, W&B opens or attaches a run). The HF integration calls it when ``train()`` starts again."""
        with self._lock:
            self.closed, self._closed_by = False, None
            self._run_record_due = True

    def __enter__(self) -> GRPOMonitor:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with self._lock:
            if exc_type is None:
                self.close()
                return
            if not self.closed and self._unfinished():
                warnings.warn(f"grpo-monitor: step {self.step} was observed but not ended when the with-block "
                              f"raised {exc_type.__name__}; its data is not reported", RuntimeWarning, stacklevel=2)
            self._close(failed=True)

    @property
    def tracked_questions(self) -> int:  # at most config.history_cap
        """Questions the per-question history holds now."""
        return len(self._run.questions.history)

    @property
    def violation_counts(self) -> dict[str, int]:
        """How many times each invariant broke so far."""
        return dict(self._run.counts)

    def state_dict(self) -> dict[str, Any]:
        """Step counter, estimator lock, per-question history, ledger totals, violation counts and run health, as
        plain Python values (numpy/torch question ids converted): ``json.dumps`` and ``torch.load`` take it."""
        with self._lock:
            return {"step": self.step, **self._run.state_dict(), "health": self._health.state_dict()}

    def load_state_dict(self, state: dict[str, Any], *, allow_config_change: bool = False) -> None:
        """Restore :meth:`state_dict`; the next ``end_step`` continues as the saved run would. All or nothing: the
        state is validated first (:func:`~grpo_monitor.run.saved.validate_state`); a state of another declared group
        size or estimator is refused unless ``allow_config_change``."""
        with self._lock:
            saved = validate_state(state)
            check_config(saved, self.config, allow_config_change)
            run, health = RunState(self.config), self._health.restored(saved.health)
            run.load_state_dict(saved.model_dump())
            self._run, self._health, self.step = run, health, saved.step


def _is_rank_zero() -> bool:
    """Checked at each call: a monitor built before ``init_process_group`` still writes on rank 0 only."""
    return rank_and_world()[0] == 0
