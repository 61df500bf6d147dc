"""GRPOMonitor: the one stateful object. It accumulates, syncs once, checks, reports."""

from __future__ import annotations

import dataclasses
import logging
import threading
import warnings
from collections import Counter
from typing import Any, Iterable

import torch

from . import inputs
from .inputs import plain_state
from .config import MonitorConfig
from .conventions import ConventionTracker
from .distributed import all_reduce_fields, gather_objects, rank_and_world
from .guard import Faults, fail_open, locked
from .invariants import HINTS, group_violations, token_violations
from .metrics import DISABLED_PARTS_KEY, user_metrics
from .questions import QuestionTracker
from .repro import save_repro
from .report import StepReport
from .report_builder import build_report, violation_metrics
from .sinks.base import Sink
from .sinks.dispatch import SinkSet
from .stats.fields import FieldLayout
from .stats.groups import group_reward_stats
from .stats.rollout import ROLLOUT_INDEX, rollout_stats
from .step import LEDGER, ROLLOUT, GenerationRecord, HostGroups, RolloutRecord, StepState
from .violations import InvariantViolation, Violation

log = logging.getLogger("grpo_monitor")


class GRPOMonitor:
    """Watches a GRPO run: call ``observe_rollout`` / ``observe_loss`` during a step, then ``end_step``.

    >>> mon = GRPOMonitor(MonitorConfig(group_size=4))
    >>> r = torch.tensor([[1., 0., 1., 0.], [1., 1., 1., 1.]])
    >>> a = (r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-4)
    >>> mon.observe_rollout(r, advantages=a)
    >>> mon.end_step().metrics["grpo/groups/degenerate_rate"]
    0.5
    """

    def __init__(self, config: MonitorConfig | None = None, sinks: Iterable[Sink] = ()):
        self.config = config if config is not None else MonitorConfig()
        if not isinstance(self.config, MonitorConfig):
            raise TypeError(f"config must be a MonitorConfig, but got {type(self.config).__name__}")
        self.rank, self.world = rank_and_world()
        cfg = self.config
        self.sinks = SinkSet(sinks, is_main_process=_is_rank_zero, queue_size=cfg.sink_queue_size,
                             stall_timeout=cfg.sink_stall_timeout, flush_timeout=cfg.sink_flush_timeout)
        self.step = 0
        self.closed = False
        self._closed_by: str | None = None  # why: shown by a call on the closed monitor
        self._lock = threading.RLock()  # one lock for every public call (see guard.py)
        self._conventions = ConventionTracker(self.config)
        self._questions = QuestionTracker(self.config)
        self._counts: Counter[str] = Counter()
        self._totals: Counter[str] = Counter()  # run totals of the retry ledger (resumable)
        self._guard = Faults()  # the monitor's own faults: parts switched off, streaks (guard.py)
        self._state = StepState()
        self._token_layout: FieldLayout | None = None
        self._extra: dict[str, float] = {}  # add_metrics() of the current step

    # ----------------------------------------------------------------- observe
    @fail_open("rollout")
    def observe_rollout(self, rewards: Any, *, group_ids: Any = None, advantages: Any = None, question_ids: Any = None) -> None:
        """Record the retained training rollout: rewards ``(B, G)`` or flat, advantages aligned.

        An empty batch (``(0, G)``, ``(B, 0)``, ``(0,)``) is a no-op once its arguments are
        checked. A breach under the ``"raise"`` policy raises here.
        """
        layout = inputs.group_layout(rewards, group_ids, self.config.group_size)
        adv = inputs.align_rows(advantages, "advantages", layout) if advantages is not None else None
        questions = inputs.per_group_labels(question_ids, layout) if question_ids is not None else None
        if layout.rewards.numel() == 0:
            if rank_and_world()[1] > 1 and not self.config.defer_checks:
                self._check_rollouts(self._sync(final=False))  # the other ranks' eager check waits for this one
            return
        vec, detail = rollout_stats(
            layout.rewards, layout.segments(), layout.num_groups, adv, self.config.tolerances, self.config.group_size
        )
        record = RolloutRecord(detail, layout.labels, questions, layout.rewards, layout.gid, adv)
        self._state.add_rollout(vec, record)
        if not self.config.defer_checks:
            self._check_rollouts(self._sync(final=False))

    @fail_open("generation")
    def observe_generation(self, rewards: Any, *, group_ids: Any = None, question_ids: Any = None, lengths: Any = None) -> None:
        """Record one generated batch (discarded groups included) for the retry ledger; empty: a no-op."""
        layout = inputs.group_layout(rewards, group_ids, self.config.group_size)
        if layout.rewards.numel() == 0:
            return
        s = group_reward_stats(layout.rewards, layout.segments())
        tokens = torch.zeros((), dtype=torch.float64, device=layout.rewards.device)
        if lengths is not None:
            tokens = inputs.align_rows(lengths, "lengths", layout).sum()
        rounds = len(self._state.generations) + 1  # calls so far this step: a max, so ranks' rounds are not added up
        vec = torch.stack([
            torch.full_like(tokens, rounds), torch.full_like(tokens, layout.num_groups), torch.full_like(tokens, len(layout.rewards)),
            tokens, torch.full_like(tokens, float(lengths is not None)), s.degenerate.sum().to(tokens),
            s.nonbinary.to(tokens),
        ])
        questions = inputs.per_group_labels(question_ids, layout) if question_ids is not None else None
        self._state.add_generation(vec, GenerationRecord(s, s.reward_sum, questions))

    @fail_open("loss")
    def observe_loss(self, *, mask: Any, advantages: Any = None, logprobs: Any = None, ref_logprobs: Any = None,
                     old_logprobs: Any = None, kl: Any = None) -> None:
        """Record one micro-batch of token tensors ``(B, T)``; no host sync."""
        from .stats import tokens as tok

        tensors = dict(advantages=advantages, logprobs=logprobs, ref_logprobs=ref_logprobs, old_logprobs=old_logprobs, kl=kl)
        tensors = {k: inputs.as_tensor(v, k) for k, v in tensors.items() if v is not None}
        mask_t = inputs.as_tensor(mask, "mask")
        with inputs.boundary():
            tok.validate_token_inputs(mask_t, **tensors)
        vec = tok.token_sufficient_stats(
            mask_t, clip_range=self.config.clip_range, kl_clamp=self.config.kl_clamp, **tensors
        )
        self._token_layout = self._token_layout or FieldLayout(tok.TOKEN_FIELDS)
        self._state.add_tokens(vec, self._token_layout)

    @locked
    def add_metrics(self, metrics: dict[str, float]) -> None:
        """Host-side scalars for this step's report (e.g. an integration's comparison with its trainer).

        Keys are non-empty strings outside the monitor's own sections (``grpo/groups/``,
        ``grpo/adv/``, ... see ``metrics.MONITOR_SECTIONS``; ``grpo/user/...`` is yours),
        values finite numbers; anything else raises ``InputValueError``/``InputTypeError``.
        """
        self._extra.update(user_metrics(metrics))

    # -------------------------------------------------------------------- step
    @fail_open("end_step")
    def end_step(self, step: int | None = None) -> StepReport:
        """Sync once, check every invariant, hand the report to the sinks and return it."""
        self.step = inputs.step_arg(step, self.step)
        roll = self._sync(final=True)
        if roll is not None and roll[ROLLOUT_INDEX["groups"]] > 0:
            self._check_rollouts(roll)
        if self._state.synced_tokens is not None:
            self._handle(token_violations(self._token_layout.to_dict(self._state.synced_tokens.tolist()), self.config, self.step))
        report = self._build_report()
        self._finish_step(report)
        return report

    def _sync(self, final: bool) -> torch.Tensor:
        """ONE collective (when distributed) and ONE device-to-host copy of what is pending.

        Returns the pending rollout vector on the host; at the end of the step, the ledger,
        token vector and per-group arrays are stored on the step state. Shards on several
        ranks (``rollout_scope="local"``) add, at the end of the step only, a gather of the
        per-group host arrays and question ids.
        """
        st = self._state
        device = st.device or torch.device("cpu")
        glob = self.config.rollout_scope == "global"
        parts = [("rollout", ROLLOUT, st.rollout_pending, glob)]
        if final:
            parts.append(("ledger", LEDGER, st.ledger, glob))
            if self._token_layout is None and rank_and_world()[1] > 1:  # every rank sends one vector length,
                from .stats.tokens import TOKEN_FIELDS  # whichever ranks observed tokens so far

                self._token_layout = FieldLayout(TOKEN_FIELDS)
            if self._token_layout is not None:
                parts.append(("tokens", self._token_layout, st.tokens, False))
        vec = torch.cat([(v if v is not None else lay.empty(device)).to(device) for _, lay, v, _ in parts])
        layout = FieldLayout([f for _, lay, _, _ in parts for f in lay.fields])
        keep = torch.cat([torch.full((len(lay),), g) for _, lay, _, g in parts])
        vec = all_reduce_fields(vec, layout, keep)
        arrays = st.group_arrays() if final else []
        host = torch.cat([vec] + [a.reshape(-1).to(device, torch.float64) for a in arrays]).cpu()
        pieces, offset = {}, 0
        for name, lay, _, _ in parts:
            pieces[name] = host[offset:offset + len(lay)]
            offset += len(lay)
        if final:
            tokens = pieces.get("tokens")
            if tokens is not None and st.tokens is None and torch.equal(tokens, self._token_layout.empty()):
                tokens = None  # no rank observed tokens this step
            st.synced_ledger, st.synced_tokens = pieces["ledger"], tokens
            st.synced_groups = self._union_groups(st.host_groups(host[offset:].numpy()), glob)
        return pieces["rollout"]

    @staticmethod
    def _union_groups(groups: HostGroups, glob: bool) -> HostGroups:
        """Local per-group arrays, or, for shards on several ranks, every rank's (an object gather
        at the end of the step: the per-question history and histograms see the union)."""
        if glob or rank_and_world()[1] == 1:
            return groups
        return HostGroups.union(gather_objects(groups))

    def _check_rollouts(self, host_vec: torch.Tensor) -> None:
        st = self._state
        values = ROLLOUT.to_dict(host_vec.tolist())
        found = group_violations(values, [(r.detail, r.labels) for r in st.pending_rollouts()], self.config, self.step)
        fit = self._conventions.update(values)
        if fit is not None:
            st.convention = fit
            root_caused = any(v.invariant in ("affine_in_rewards", "zero_group_mean", "finite") for v in found)
            if fit.problem and not root_caused:
                found.append(Violation("convention", self.step, fit.problem, self._expected_convention(), (), HINTS["convention"]))
        st.mark_synced(host_vec)
        self._handle(found)

    def _expected_convention(self) -> str:
        c = self.config.std_convention
        return "one convention across groups and steps" if c == "auto" else f"std_convention={c!r}"

    # ---------------------------------------------------------------- policies
    def _handle(self, found: list[Violation]) -> None:
        """Record, warn or raise according to each invariant's policy."""
        if not found:
            return
        raises = [self.config.policy_for(v.invariant) == "raise" for v in found]
        raising = [v for v, r in zip(found, raises) if r]
        if raising:  # save_repro never raises: a failed dump is named in the message instead
            path, why = save_repro(self.config, self.step, self._state, raising)
            found = [dataclasses.replace(v, repro_path=path, repro_error=why) if r else v for v, r in zip(found, raises)]
            raising = [v for v, r in zip(found, raises) if r]
        self._state.violations.extend(found)
        for v in found:
            self._counts[v.invariant] += 1
            if self.config.policy_for(v.invariant) == "warn" and self._counts[v.invariant] == 1:
                warnings.warn(f"grpo-monitor: {v.message()} (warned once per invariant; counts in the report)", RuntimeWarning)
        if raising:
            self._close_on_breach()
            raise InvariantViolation(raising)

    def _close_on_breach(self) -> None:
        """Report the failing step to every sink and close; nothing here can hide the breach."""
        self.closed, self._closed_by = True, f"the invariant breach at step {self.step} closed it"
        try:
            self._finish_step(self._build_report(failed=True))
            self.sinks.finish(failed=True)
        except Exception:  # noqa: BLE001 - sinks are isolated already; this is a last resort
            log.exception("grpo-monitor: could not report the failing step %d to the sinks", self.step)

    # ------------------------------------------------------------------ report
    def _build_report(self, failed: bool = False) -> StepReport:
        """The step's report; a fault in assembling it keeps the violations and the step's checks.

        Report assembly is not checking: when it fails (a metric, the question history), the
        fault is logged (traceback once), counted, and the report holds the violations only.
        """
        try:
            report = build_report(self.step, self._state, self._questions, failed)
            report.metrics.update(self._run_totals())
        except Exception:
            if self.config.strict:
                raise
            self._guard.report_fault(self.step)
            report = StepReport(self.step, violation_metrics(self._state.violations), list(self._state.violations),
                                failed=failed)
        report.metrics.update({k: v for k, v in self._extra.items() if k not in report.metrics})
        report.metrics[DISABLED_PARTS_KEY] = float(len(self._guard.disabled))
        return report

    def _run_totals(self) -> dict[str, float]:
        """Fold this step's ledger into the run totals (once per step); the totals as metrics."""
        st = self._state
        if st.synced_ledger is not None:
            ledger = LEDGER.to_dict(st.synced_ledger.tolist())
            self._totals["generated_groups"] += ledger["generated_groups"]
            self._totals["generated_responses"] += ledger["generated_responses"]
        if st.rollout_synced is not None:
            self._totals["retained_groups"] += float(st.rollout_synced[ROLLOUT_INDEX["groups"]])
        if self._totals["generated_groups"] <= 0:
            return {}
        return {f"grpo/sampling/total_{k}": float(self._totals[k]) for k in _TOTALS}

    # ----------------------------------------------------------- fail-open
    @property
    def disabled_parts(self) -> frozenset[str]:
        """Parts switched off by an internal fault ("rollout", "generation", "loss", "end_step")."""
        return frozenset(self._guard.disabled)

    def _fault(self, part: str) -> None:
        """Log an internal fault of ``part``, drop its data; announce it once when it is switched off."""
        if self._guard.record(part, self.step):
            self._guard.announce(part, self.step, self.sinks)
        self._drop(part)

    def _drop(self, part: str) -> None:
        """Forget what a failed part gathered this step, so the step end does not trip on it."""
        st = self._state
        if part == "rollout":
            st.rollout_pending = st.rollout_synced = st.convention = None
            st.rollouts, st.checked = [], 0
        elif part == "generation":
            st.ledger, st.generations = None, []
        elif part == "loss":
            st.tokens = None

    def _skip(self, part: str, *args: Any, **kwargs: Any) -> StepReport | None:
        """What a disabled part does: nothing, except ``end_step``, which still closes the step."""
        if part != "end_step":
            return None
        report = StepReport(inputs.step_arg(args[0] if args else kwargs.get("step"), self.step), {})
        report.metrics[DISABLED_PARTS_KEY] = float(len(self._guard.disabled))
        self.step = report.step
        self._finish_step(report)
        return report

    def _finish_step(self, report: StepReport) -> None:
        self.sinks.emit(report)
        self.step += 1
        self._state = StepState()
        self._extra = {}

    # --------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Finish every sink (flushing what they still queue). A second ``close()`` does nothing.

        After it, every observe/``end_step``/``add_metrics`` call raises ``MonitorClosedError``
        (a ``RuntimeError``) naming the call; ``state_dict()`` still works.
        """
        with self._lock:
            self._close(failed=False)

    def _close(self, failed: bool) -> None:
        if self.closed:
            return
        self.closed, self._closed_by = True, "close() was called"
        self.sinks.finish(failed=failed)

    def reopen(self) -> None:
        """Start a new segment after ``close()`` with the same sinks (they reopen their backends
        on first use: JSONL appends, W&B opens or attaches a run). The HF integration calls it
        when ``train()`` starts again on the same trainer."""
        with self._lock:
            self.closed, self._closed_by = False, None

    def __enter__(self) -> "GRPOMonitor":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with self._lock:
            self._close(failed=exc_type is not None)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "GRPOMonitor cannot be pickled or copied: it owns open sinks (a JSONL file descriptor, a W&B run) that "
            "a copy would share. Carry its state instead: state = monitor.state_dict(); then "
            "GRPOMonitor(config, sinks).load_state_dict(state) in the other process"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__reduce_ex__(None)

    def __copy__(self) -> Any:
        return self.__reduce_ex__(None)

    @property
    def violation_counts(self) -> dict[str, int]:
        """How many times each invariant broke so far."""
        return dict(self._counts)

    def state_dict(self) -> dict[str, Any]:
        """Step counter, locked convention, per-question history, ledger totals and violation counts.

        Plain Python values only (question ids given as numpy or torch scalars are converted),
        so ``json.dumps`` and ``torch.load(weights_only=True)`` take it.
        """
        with self._lock:
            return plain_state({
                "step": self.step,
                "conventions": self._conventions.state_dict(),
                "questions": self._questions.state_dict(),
                "counts": dict(self._counts),
                "totals": dict(self._totals),
            })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next ``end_step`` continues as the saved run would."""
        with self._lock:
            self.step = int(state["step"])
            self._conventions.load_state_dict(state["conventions"])
            self._questions.load_state_dict(state["questions"])
            self._counts = Counter(state.get("counts", {}))
            self._totals = Counter(state.get("totals", {}))


_TOTALS = ("generated_groups", "generated_responses", "retained_groups")


def _is_rank_zero() -> bool:
    """Checked at each call: a monitor built before ``init_process_group`` still writes on rank 0 only."""
    return rank_and_world()[0] == 0
