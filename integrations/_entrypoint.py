"""What the verl, OpenRLHF, SkyRL and AReaL integrations share: one wrapped advantage entry point.

Each of these trainers computes a step's advantages in one function or method (the entry
point). An attachment swaps it for a wrapper that reads the framework's view before the
call (:class:`Call`: what its config declares, the tensors the call overwrites), calls the
original, hands rewards, group ids, advantages and token tensors to the monitor and, by
default, ends the monitor's step: one entry-point call is one training step, so a breach
raises ``InvariantViolation`` out of the entry point, before any optimizer step uses the
batch. The monitor is given, or built at the first call from what the framework's config
declares (:class:`Declared`) with ``config`` fields winning. Faults of the integration
fail open (:class:`~grpo_monitor.integrations._common.FailOpen`); rank 0 writes (the
monitor's sinks).
"""

from __future__ import annotations

import atexit
import collections
import contextvars
import dataclasses
import functools
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from grpo_monitor.config import MonitorConfig
from grpo_monitor.monitor import GRPOMonitor
from grpo_monitor.sinks.base import Sink

from ._common import FailOpen
from ._lookup import subclasses_defining
from ._on_import import ImportWatch

#: Step reports an attachment keeps (the most recent ones) in ``Attachment.reports``.
REPORTS_KEPT = 100
_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Declared:
    """What a framework's config says its advantages are.

    ``estimator`` is a name of ``grpo_monitor.ESTIMATORS`` (None: no entry reproduces this
    configuration, so only rewards and groups are observed), ``stabilizer`` the epsilon
    when it differs from the entry's default, ``group_size`` the responses per prompt when
    the framework fixes it, ``note`` why there is no entry (shown once as a warning).
    ``trackers`` are the trainer's tracker names (None: unknown), ``output_dir`` its output
    folder and ``tensorboard_dir`` its TensorBoard folder, for ``sinks="auto"``. ``policy_lag``:
    the optimizer steps the framework's sampler may lag its trainer by design (asynchronous
    rollouts; ``MonitorConfig.max_policy_lag``), None when the config does not say.
    """

    estimator: str | None
    stabilizer: float | None = None
    group_size: int | None = None
    note: str = ""
    trackers: tuple[str, ...] | None = None
    output_dir: str | None = None
    tensorboard_dir: str | None = None
    policy_lag: int | None = None


@dataclasses.dataclass
class Call:
    """One entry-point call as seen before it runs: the declaration and what the call overwrites."""

    declared: Declared
    before: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Patch:
    """``owner.name`` replaced by a wrapper; ``previous`` is ``_MISSING`` when ``owner`` did not define it."""

    owner: Any
    name: str
    previous: Any

    def restore(self) -> None:
        if self.previous is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.previous)


def auto_sinks(framework: str, declared: Declared) -> list[Sink]:
    """The sinks of the trainer's trackers (:func:`grpo_monitor.sinks.auto.sinks_for_trackers`); when the
    framework's trackers are unknown, the W&B run active in this process (not the no-op run of
    ``wandb.init(mode="disabled")``); with neither, a JSONL log."""
    from grpo_monitor.sinks.auto import sinks_for_trackers

    trackers = declared.trackers
    if trackers is None:
        wandb = sys.modules.get("wandb")
        run = getattr(wandb, "run", None) if wandb is not None else None
        trackers = ("wandb",) if run is not None and not getattr(run, "disabled", False) else ()
    return sinks_for_trackers(trackers, framework=framework, output_dir=declared.output_dir,
                              tensorboard_dir=declared.tensorboard_dir)


def check_sinks(sinks: Any) -> None:
    """``sinks`` is "auto", None or a list of Sink objects (the string "auto" may stand among them)."""
    if sinks is None or sinks == "auto":
        return
    if isinstance(sinks, str) or not all(isinstance(s, Sink) or s == "auto" for s in sinks):
        raise ValueError(f"sinks must be 'auto', None or a list of Sink objects, but got {sinks!r}")


class Attachment:
    """One framework's wrapped entry points, the monitor they report to and its recent reports."""

    def __init__(self, framework: str, monitor: GRPOMonitor | None, config: MonitorConfig | None,
                 sinks: Sequence[Sink | str] | str | None, step_per_call: bool):
        if monitor is not None and not isinstance(monitor, GRPOMonitor):
            raise TypeError(f"monitor must be a GRPOMonitor or None, but got {type(monitor).__name__}")
        if config is not None and not isinstance(config, MonitorConfig):
            raise TypeError(f"config must be a MonitorConfig or None, but got {type(config).__name__}")
        if monitor is not None and config is not None:
            raise ValueError("pass monitor or config, not both: config is used only to build a monitor")
        if isinstance(sinks, str) and sinks != "auto":
            raise ValueError(f"sinks must be 'auto', None or a list of Sink objects, but got the string {sinks!r}")
        check_sinks(sinks)
        self.framework = framework
        self.monitor = monitor
        self.owned = monitor is None  # built here, closed by detach()
        self.config = config
        self.sinks = sinks
        self.step_per_call = step_per_call
        self.declared: Declared | None = None  # of the first call; later calls must agree
        self.reports: collections.deque = collections.deque(maxlen=REPORTS_KEPT)
        self.patches: list[Patch] = []
        self.warned: set[str] = set()
        self.broken = False  # a fault before any monitor existed: pass calls through
        self.calls = 0  # entry-point calls seen (0 at exit in a Ray driver: attached in the wrong process)
        #: A worded error of the environment's configuration (a Ray setup hook must not raise: a task's worker
        #: would die unexplained): every entry-point call raises it, so the driver sees it.
        self.config_error: ValueError | None = None
        self._inside: contextvars.ContextVar[bool] = contextvars.ContextVar(f"grpo_monitor_{framework}", default=False)
        self._guard = FailOpen(monitor, framework) if monitor is not None else None

    # ------------------------------------------------------------- patches
    def patch(self, owner: Any, name: str, capture: Callable[..., Call],
              observe: Callable[[GRPOMonitor, Call, Any], None]) -> None:
        """Replace ``owner.name`` by a wrapper observing each outermost call (see :meth:`wrap`)."""
        self.patch_with(owner, name, self.wrap(getattr(owner, name), capture, observe))

    def patch_with(self, owner: Any, name: str, value: Any) -> None:
        """Replace ``owner.name`` by ``value``; :meth:`unpatch` puts the previous one back."""
        previous = vars(owner).get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name)
        self.patches.append(Patch(owner, name, previous))
        setattr(owner, name, value)

    @property
    def guard(self) -> FailOpen | None:
        """The fail-open guard of the monitor (None until the monitor exists)."""
        return self._guard

    def patch_overrides(self, base: type, name: str, classes: Sequence[type], capture: Callable[..., Call],
                        observe: Callable[[GRPOMonitor, Call, Any], None]) -> None:
        """:meth:`patch` ``name`` on ``base``, every loaded subclass overriding it, and ``classes``."""
        targets = subclasses_defining(base, name)
        for cls in targets + [c for c in classes if c not in targets]:
            self.patch(cls, name, capture, observe)

    def unpatch(self) -> None:
        """Put back every replaced attribute, last first."""
        for p in reversed(self.patches):
            p.restore()
        self.patches.clear()

    def wrap(self, original: Callable, capture: Callable[..., Call],
             observe: Callable[[GRPOMonitor, Call, Any], None]) -> Callable:
        """``original`` with ``capture(*args, **kwargs)`` before it and ``observe(monitor, call, out)`` after.

        Only the outermost call is observed (a subclass calling ``super()``, a dispatcher
        calling a wrapped estimator); with ``step_per_call`` the monitor's step ends after it.
        """

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.config_error is not None:
                raise ValueError(str(self.config_error))
            if self._inside.get() or self.broken:
                return original(*args, **kwargs)
            token = self._inside.set(True)
            self.calls += 1
            try:
                call = self._start(capture, args, kwargs)
                out = original(*args, **kwargs)
            finally:
                self._inside.reset(token)
            if call is not None and self._guard is not None:
                self._guard(self._finish, observe, call, out)
            return out

        wrapper.__grpo_monitor_original__ = original  # type: ignore[attr-defined]  # read by detach()
        return wrapper

    # ---------------------------------------------------------------- calls
    def _start(self, capture: Callable[..., Call], args: tuple, kwargs: dict) -> Call | None:
        """The call's view and the monitor for it; a fault here (no guard yet) passes calls through."""
        if self._guard is not None and self._guard.disabled:
            return None
        try:
            call = capture(*args, **kwargs)
            self._ensure_monitor(call.declared)
            return call
        except Exception:
            cfg = self.monitor.config if self.monitor is not None else self.config
            if cfg is not None and cfg.strict:
                raise
            if self._guard is not None:
                self._guard.fault()
            else:
                self.broken = True
                warnings.warn(f"grpo-monitor: the {self.framework} integration failed before its monitor was built "
                              "and is switched off", RuntimeWarning, stacklevel=3)
            return None

    def _ensure_monitor(self, declared: Declared) -> None:
        if self.declared is None:
            self.declared = declared
            if self.monitor is None:
                self.monitor = GRPOMonitor(self._config_for(declared), sinks=self._sinks(declared))
                self._guard = FailOpen(self.monitor, self.framework)
            elif self.monitor.config.estimator not in ("auto", declared.estimator) and declared.estimator:
                self.warn_once("mismatch", f"the monitor declares {self.monitor.config.estimator!r} but the "
                                           f"{self.framework} config says {declared.estimator!r}")

    def _config_for(self, declared: Declared) -> MonitorConfig:
        """``declared`` as a MonitorConfig; fields set in ``self.config`` win."""
        derived = {"estimator": declared.estimator or "auto", "stabilizer": declared.stabilizer,
                   "group_size": declared.group_size}
        if declared.policy_lag is not None:
            derived["max_policy_lag"] = declared.policy_lag
        if self.config is None:
            return MonitorConfig(**derived)
        kept = {k: v for k, v in derived.items() if k not in self.config.model_fields_set}
        return self.config.model_copy(update=kept)

    def _sinks(self, declared: Declared) -> list[Sink]:
        if self.sinks is None:
            return []
        items: list[Sink | str] = ["auto"] if self.sinks == "auto" else list(self.sinks)
        out: list[Sink] = []
        for item in items:
            out.extend(auto_sinks(self.framework, declared) if isinstance(item, str) else [item])
        return out

    def _finish(self, observe: Callable[[GRPOMonitor, Call, Any], None], call: Call, out: Any) -> None:
        monitor = self.monitor
        assert monitor is not None, "_start built the monitor before the call was observed"
        observe(monitor, call, out)
        if self.step_per_call:
            report = monitor.end_step()
            if report is not None:  # None: end_step itself failed open
                self.reports.append(report)

    def checks_advantages(self, call: Call) -> bool:
        """Whether advantages are handed to the monitor: an estimator is declared, by the config or the user.

        Without one (the framework's option has no registry entry, or a later call declares
        another estimator than the first) only rewards and groups are observed, with one warning.
        """
        declared = call.declared
        assert self.monitor is not None, "called from _finish, after _start built the monitor"
        if self.monitor.config.estimator != "auto" and self._user_declared():
            return True
        if declared.estimator is None:
            self.warn_once(f"none:{declared.note}", f"{declared.note}; only rewards and groups are observed. Declare "
                                                    "the estimator with MonitorConfig(estimator=...) to check "
                                                    "its advantages")
            return False
        first = self.declared.estimator if self.declared else None
        if declared.estimator != first:
            text = (f"this call uses {declared.estimator!r} but the monitor was declared for {first!r}; its "
                    "advantages are not checked")
            self.warn_once(f"changed:{declared.estimator}", text)
            return False
        return True

    def _user_declared(self) -> bool:
        """The estimator was declared by the user (a given monitor, or ``config.estimator``), not derived."""
        return not self.owned or (self.config is not None and "estimator" in self.config.model_fields_set)

    def warn_once(self, key: str, text: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            warnings.warn(f"grpo-monitor ({self.framework}): {text}", RuntimeWarning, stacklevel=4)

    def never_called(self) -> str | None:
        """Why this process likely attached in the wrong place: a Ray driver that never called the entry point."""
        ray = sys.modules.get("ray")
        if self.calls or ray is None or not ray.is_initialized():
            return None
        try:
            driver = ray.get_runtime_context().worker.mode == ray.SCRIPT_MODE
        except Exception:  # noqa: BLE001 - a Ray without this API: say nothing rather than guess
            return None
        if not driver:
            return None
        return (f"attached in the Ray driver (pid {os.getpid()}), which never called the {self.framework} entry "
                f"point: the trainer runs it in a Ray actor or task, where nothing was checked. Attach there: "
                f"ray.init(runtime_env={{'worker_process_setup_hook': "
                f"'grpo_monitor.integrations.{self.framework}.attach_from_env', 'env_vars': "
                f"{{'GRPO_MONITOR_CONFIG': '{{\"sinks\": [\"auto\"]}}'}}}}) (docs/integrations.md)")

    def close(self) -> None:
        """Undo the patches; close the monitor when it was built here."""
        text = self.never_called()
        if text:
            self.warn_once("never_called", text)
        self.unpatch()
        if self.owned and self.monitor is not None and not self.monitor.closed:
            self.monitor.close()


class Slot:
    """An integration module's one attachment: ``attach`` claims it, ``detach`` restores and closes."""

    def __init__(self, framework: str):
        self.framework = framework
        self.current: Attachment | None = None
        self.pending: ImportWatch | None = None  # an attach waiting for its framework module's import
        self._hooked = False

    def check_free(self) -> None:
        """Raise ``RuntimeError`` when the integration is already attached (or waiting to attach on import)."""
        if self.current is not None:
            raise RuntimeError(f"grpo_monitor.integrations.{self.framework} is already attached; call detach() first")
        if self.pending is not None:
            raise RuntimeError(f"grpo_monitor.integrations.{self.framework} is already attached from the environment "
                               f"(waiting for the import of {sorted(self.pending.names)}); call detach() first")

    def claim(self, state: Attachment) -> Attachment:
        self.check_free()
        self.current = state
        if not self._hooked:
            self._hooked = True
            atexit.register(self._at_exit)
        return state

    def _at_exit(self) -> None:
        """At interpreter exit: say (once) that a Ray driver attached but never called the entry point."""
        state = self.current
        text = state.never_called() if state is not None else None
        if text and state is not None and "never_called" not in state.warned:
            state.warned.add("never_called")
            print(f"grpo-monitor ({self.framework}): {text}", file=sys.stderr, flush=True)

    def release(self) -> None:
        """Restore what the attachment replaced and close a monitor it built (no-op when not attached); cancel
        an attach still waiting for an import."""
        watch, self.pending = self.pending, None
        if watch is not None:
            watch.cancel()
        if self.current is not None:
            state, self.current = self.current, None
            state.close()

    def monitor(self) -> GRPOMonitor | None:
        return self.current.monitor if self.current is not None else None
