"""GRPOMonitor: the one stateful object. It accumulates, syncs once, checks, reports.

A step, top to bottom (``end_step``), each stage named in the code:

1. **sync**: ``synced = self._sync(final=True)``, the one collective and host copy (:mod:`grpo_monitor.step.sync`);
2. **evaluate**: ``verdict = self._evaluate(synced)``, pure: the violations, the estimator judgement, the narrowed
   estimator lock, the notes to say once and the loss-weight metrics, as data (:mod:`.step.evaluate`);
3. **apply**: ``report = self._apply(verdict, synced)``, the one place run state changes: the estimator lock
   narrows, the step's findings are kept and counted, the said-once sets grow, then (at the step's end) the history
   and ledger totals update, the report is assembled (:func:`.step.metrics.assemble_report`), the trainer audit and
   the run-health tracker fold it in;
4. **emit**: the sinks get the report and the next step starts empty; a breach under ``"raise"`` (or a stall
   ``halt_on`` names) closes the monitor and raises after that.

With ``defer_checks=False`` (the default) ``observe_rollout`` syncs and evaluates its own rollout at once, so a broken
batch never reaches the optimizer: a breach to raise finishes the step there (apply and emit, with a local sync of the
rest); otherwise its findings are applied and the step goes on. The accumulator (:mod:`.step.accumulator`) holds the
step's inputs only, :class:`~.step.evaluate.StepFindings` what its checks found. The lifecycle (close, reopen, the
with-block, saved state) is :class:`~.run.lifecycle.Lifecycle`; fail-open, :mod:`.step.guard` (through its ``Gate``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .config import MonitorConfig
from .errors import RunStalled
from .health.live import LiveHealth
from .report import StepReport
from .run.breach import with_repro
from .run.lifecycle import Lifecycle
from .run.record import integration_arg, run_record
from .run.state import RunState
from .sinks.base import Sink, run_params
from .sinks.dispatch import SinkSet
from .stats.fields import FieldLayout
from .step import inputs, observe, policy
from .step.accumulator import ROLLOUT, Accumulator
from .step.calls import checked
from .step.distributed import rank_and_world
from .step.evaluate import StepFindings, Verdict, evaluate, narrowed
from .step.guard import Gate, NotCopyable, fail_open, guarded_part, locked
from .step.metrics import assemble_report, violation_metrics
from .step.sync import SyncedStep, sync_step
from .step.trainer_audit import AuditsTrainerMetrics, TrainerAudit
from .step.weights import LossWeights
from .violations import InvariantViolation, Violation


class GRPOMonitor(Lifecycle, NotCopyable, AuditsTrainerMetrics):
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
        self.step = 0
        self.gate = Gate(GRPOMonitor._fault, GRPOMonitor._skip)  # the lock, closed or not, own faults (guard.py)
        self._run = RunState(cfg)  # what crosses steps (run/state.py)
        self._health = LiveHealth(cfg, gpus=self.world)  # run-health findings (health/)
        self._acc = Accumulator()  # this step's inputs, on the device (accumulator.py)
        self._found = StepFindings()  # what this step's checks found so far (evaluate.py)
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
                     entropy: Any = None, is_weights: Any = None, loss: Any = None, rows: Any = None,
                     routed_experts: Any = None, sampler_routed_experts: Any = None) -> None:
        """Record one micro-batch of token tensors ``(B, T)``; no host sync.

        ``sampler_logprobs``: the log-probs the inference engine reported for the tokens it generated
        (``grpo/mismatch/*`` against ``old_logprobs``, else ``logprobs``); ``entropy``: the trainer's per-token
        entropies (``grpo/entropy/*``); ``is_weights``: the importance-sampling correction weights the trainer
        multiplies each token's loss by (TRL's ``importance_sampling_ratio``, verl's ``rollout_is_weights``:
        ``grpo/mismatch/is_weight_*``). ``loss`` (the scalar the trainer calls ``backward()`` on, or this
        micro-batch's part of it, computed from ``logprobs`` with grad) makes the monitor measure each token's weight
        ``dloss/dlogprobs`` (``autograd.grad`` with ``retain_graph=True``: the trainer's gradients are untouched);
        without it, weights are derived from ``config.loss_aggregation``. ``rows``: each row's index into the latest
        ``observe_rollout``'s rows (flat order), for the per-group weights. ``routed_experts`` (the trainer's) and
        ``sampler_routed_experts`` (the engine's) ``(B, T, L, k)``: top-k experts per token and layer (``grpo/moe/*``).
        """
        got = observe.loss_input(self.config, **{k: v for k, v in locals().items() if k != "self"})  # the table's
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
        ``MonitorConfig.estimator``). A change restarts the estimator lock; the same one is a no-op."""
        if name == self.config.estimator and stabilizer == self.config.stabilizer:
            return
        self.config = MonitorConfig(**{**self.config.model_dump(), "estimator": name, "stabilizer": stabilizer})
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

    @property
    def integration(self) -> str | None:
        """The integration ``declare_integration`` named (None: the monitor's own calls so far)."""
        return self._integration[0] if self._integration is not None else None

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
        synced = self._sync(final=True)  # 1. sync
        verdict = self._evaluate(synced, final=True)  # 2. evaluate: pure, data only
        return self._finish(synced, verdict)  # 3. apply, 4. emit (a breach or a stall raises after the emit)

    def _check_now(self) -> None:
        """The eager check of ``observe_rollout``: a breach to raise finishes (and closes) the step here."""
        verdict = self._evaluate(self._sync(final=False))
        if any(self._raises(v) for v in verdict.found):
            self._finish(self._sync(final=True, collective=False), verdict)
        self._apply(verdict)

    def _sync(self, final: bool, collective: bool = True) -> SyncedStep:
        """Stage 1 (:func:`grpo_monitor.step.sync.sync_step`; on several ranks every one sends the token slots); the
        synced rollouts count as checked from here (their evaluation follows at once)."""
        if final and self._token_layout is None and rank_and_world()[1] > 1:
            self._token_layout = FieldLayout(observe.LOSS_FIELDS)  # the token slots, then the routing counts
        synced = sync_step(self._acc, self._token_layout, global_scope=self.config.rollout_scope == "global",
                           final=final, collective=collective, weights=self._weights.flat() if final else None)
        self._acc.mark_checked(synced.rollout_vec, len(self._acc.rollouts))
        return synced

    def _evaluate(self, synced: SyncedStep, final: bool = False) -> Verdict:
        """Stage 2, pure (:func:`grpo_monitor.step.evaluate.evaluate`); a fault of the loss-weight check only switches
        that part off (``guarded_part``)."""
        def weights(s: SyncedStep) -> Any:
            return guarded_part(self, "weights", self._weights.check, s.weights, s.all_weights, self.config, self.step)

        return evaluate(synced, self._acc, self._run.estimator, self._run.said_declared, self.config, self.step,
                        final=final, weights=weights)

    def _finish(self, synced: SyncedStep, verdict: Verdict) -> StepReport:
        """Stages 3-4 of a step's end: breaches to raise get their repro file, the verdict is applied (the report
        assembled), the sinks get the report; a breach or a halting finding closes the monitor and raises."""
        lock = narrowed(verdict, self._run.estimator)
        verdict = verdict.with_found(with_repro(verdict.found, self.config, self.step, self._acc, lock.state_dict))
        raising = [v for v in verdict.found if self._raises(v)]
        report = self._apply(verdict, synced, failed=bool(raising))
        assert report is not None, "a final sync is applied into a report"
        halting = () if raising else self._health.halting(report)
        if raising or halting:
            why = "invariant breach" if raising else "stall"
            report.failed = True
            self.gate.closed_by = f"the {why} at step {self.step} closed it"
        self._emit(report)
        if raising or halting:
            self.sinks.finish(failed=True)
            raise InvariantViolation(raising) if raising else RunStalled(halting)
        return report

    def _raises(self, v: Violation) -> bool:
        """An error-severity breach under the ``"raise"`` policy (:func:`~grpo_monitor.step.policy.raises`)."""
        return policy.raises(v, self.config)

    # ------------------------------------------------------------------- apply
    def _apply(self, verdict: Verdict, synced: SyncedStep | None = None, failed: bool = False) -> StepReport | None:
        """Stage 3, the one place run state changes: the estimator lock narrows, the notes are said once, the
        findings are kept and counted (warned per the policy). With ``synced`` (a final sync), the step's report:
        the history and ledger totals update, the trainer audit and the run health fold the report in."""
        self._run.estimator = narrowed(verdict, self._run.estimator)  # the lock narrows here, once
        if verdict.judged is not None:
            self._found.estimator = verdict.judged
        for note in verdict.notes:
            policy.say_once(note, self._run.said_declared)
        self._run.said_declared.update(verdict.declared)
        self._record(verdict.found)
        return None if synced is None else self._report(synced, verdict, failed)

    def _record(self, found: list[Violation]) -> None:
        """Keep the step's violations, count them, warn per the policy (:func:`.step.policy.warn_found`)."""
        self._found.violations.extend(found)
        self._run.count(found)
        policy.warn_found(found, self._run.counts, self.config)

    def _report(self, synced: SyncedStep, verdict: Verdict, failed: bool) -> StepReport:
        """The run state's update, the assembled report and its run health. Neither is checking: a fault here is
        logged (traceback once) and counted, and the report keeps the step's violations."""
        acc, found = self._acc, self._found
        rollout = ROLLOUT.to_dict(acc.rollout_checked.tolist()) if acc.rollout_checked is not None else None
        try:
            run = self._run.update(self.step, rollout, synced.ledger, synced.groups)
            report = assemble_report(self.step, rollout, synced.ledger, synced.tokens, synced.groups, found.estimator,
                                     found.violations, run, failed, self.config.mismatch_mask)
        except Exception:
            if self.config.strict:
                raise
            self.gate.faults.report_fault(self.step)
            report = StepReport(self.step, violation_metrics(found.violations), list(found.violations), failed=failed)
        if verdict.weights is not None:
            report.metrics.update(verdict.weights.metrics)
            report.histograms.update(verdict.weights.histograms)
        report.metrics.update({k: v for k, v in self._extra.items() if k not in report.metrics})
        report.metrics.update(self.gate.faults.health(self.sinks.dropped()))
        self._record(guarded_part(self, "trainer_metrics", self._audit.apply, report, found.violations) or [])
        if self._run_record_due:
            report.run, self._run_record_due = self.run_record(), False
        if "health" not in self.gate.faults.disabled or self.gate.faults.retry("health", self.step):
            guarded_part(self, "health", self._health.evaluate, report, self._run.questions.history)
        return report

    # -------------------------------------------------------------------- emit
    def _emit(self, report: StepReport) -> None:
        """Stage 4: hand ``report`` to the sinks (a finding's onset or clearing also as an alert); the next step
        starts empty."""
        self.sinks.emit(report, config=lambda: run_params(self.config))
        LiveHealth.alert(report, self.sinks)
        self._steps_ended += 1
        self.gate.faults.retried.clear()
        self.step = report.step + 1
        self._acc, self._found = Accumulator(), StepFindings()
        self._extra, self._audit = {}, TrainerAudit()
        self._weights.end_step()

    # ----------------------------------------------------------- fail-open
    @property
    def disabled_parts(self) -> frozenset[str]:
        """Parts an internal fault switched off ("rollout", "generation", "loss", "end_step", "<name> integration")."""
        return frozenset(self.gate.faults.disabled)

    def _fault(self, part: str) -> None:
        """``Gate.on_fault``: log an internal fault of ``part`` and drop what it gathered this step (so the step end
        does not trip on it); announce it once when it is off for the run."""
        if self.gate.faults.record(part, self.step):
            self.gate.faults.announce(part, self.step, self.sinks)
        self._acc.drop(part)
        if part == "rollout":
            self._found.estimator = None
        if part in ("loss", "weights"):
            self._weights.end_step()

    def _skip(self, part: str, *args: Any, **kwargs: Any) -> StepReport | None:
        """``Gate.on_skip``: what a disabled part does: nothing, except ``end_step``, which still closes the step."""
        if part != "end_step":
            return None
        report = StepReport(inputs.step_arg(args[0] if args else kwargs.get("step"), self.step), {})
        report.metrics.update(self.gate.faults.health(self.sinks.dropped()))
        self._emit(report)
        return report


def add_recorded(monitor: GRPOMonitor, metrics: dict[str, float]) -> None:
    """The seam of ``grpo-monitor scan`` (:mod:`grpo_monitor.tools.scan.logged`): a trainer's recorded values of the
    monitor's own keys, merged into the current step's report (the monitor's own values first)."""
    monitor._add_recorded(metrics)


def load_estimator_lock(monitor: GRPOMonitor, state: dict[str, Any]) -> None:
    """The seam of :func:`grpo_monitor.repro.replay.replay`: the estimator lock a saved breach's run had reached."""
    monitor._run.estimator.load_state_dict(state)


def _is_rank_zero() -> bool:
    """Checked at each call: a monitor built before ``init_process_group`` still writes on rank 0 only."""
    return rank_and_world()[0] == 0
