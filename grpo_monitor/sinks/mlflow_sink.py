"""MLflow: metrics on the monitor's step, run parameters, tables, a breach as a tag and a text artifact.

MLflow's active run is thread-local and this sink runs in a thread of its own, so the run
the trainer opened (TRL's ``MLflowCallback``, verl's and SkyRL's ``Tracking``) is read in
the training thread by :meth:`MLflowSink.capture`, then written through an
``MlflowClient`` by run id. mlflow is imported only when a run is opened or written;
``capture`` looks only at an mlflow the process has already imported.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any

from ..report import StepReport
from .base import Sink
from .layout import STEP_KEY
from .registry import require_backend
from .rows import ScheduledTables, cell

#: MLflow's limits: metrics/params per ``log_batch`` call, characters of a param value.
_BATCH, _PARAM_CHARS = 1000, 6000
#: Run ids of trainers' runs a breach ended: at interpreter exit their fluent run ends FAILED, not FINISHED.
_FAILED_RUNS: set[str] = set()
_HOOKED = False


class MLflowSink(ScheduledTables, Sink):
    """Logs each report into an MLflow run: the trainer's active run when there is one, else its own.

    Scalars go through ``log_batch`` with the monitor's step as MLflow's step (and as
    ``grpo/step``); the per-question table (``MlflowClient.log_table``) every ``table_every``
    steps and on the failing step, as ``grpo_monitor/tables/<key>/step_<n>.json``; the run
    configuration as ``grpo_monitor/*`` params. Each step with violations sets the tag
    ``grpo_monitor/violations`` (the invariants) and writes their messages to the text
    artifact ``grpo_monitor/violations/step_<n>.txt``; alerts (e.g. a part switched off) set
    ``grpo_monitor/alert`` and go to ``grpo_monitor/alerts/``. MLflow has no histograms: they
    are not logged. ``finish(failed=True)`` marks the run ``FAILED`` (the trainer's too: the
    breach ended it) and tags ``grpo_monitor/failed``; ``finish()`` ends only a run it opened.

    ``run_id`` writes into that run; ``tracking_uri`` defaults to mlflow's (``MLFLOW_TRACKING_URI``);
    an own run goes to ``experiment_name`` (default: ``MLFLOW_EXPERIMENT_NAME``, else
    ``MLFLOW_EXPERIMENT_ID``, else mlflow's Default experiment) named ``run_name``.
    """

    name = "mlflow"

    def __init__(self, run_id: str | None = None, *, tracking_uri: str | None = None,
                 experiment_name: str | None = None, run_name: str | None = None,
                 attach_to_active_run: bool = True, table_every: int = 10, step_key: str = STEP_KEY):
        self.given_run_id = run_id
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.attach_to_active_run = attach_to_active_run
        self.table_every = table_every
        self.step_key = step_key
        self._client: Any = None
        self._run_id: str | None = run_id
        self._owns_run = False
        self._alerts = 0
        self._rejected: set[str] = set()  # metric names MLflow refused (left out, named once)

    # ------------------------------------------------------------- the run
    def capture(self) -> None:
        """In the training thread: the trainer's active MLflow run, when mlflow is loaded and one is active."""
        mlflow = sys.modules.get("mlflow")
        if self._run_id is not None or not self.attach_to_active_run or mlflow is None:
            return
        active = mlflow.active_run()
        if active is not None:
            self._run_id = active.info.run_id
            self.tracking_uri = self.tracking_uri or mlflow.get_tracking_uri()
            _hook_exit()

    @property
    def client(self) -> Any:
        """The ``mlflow.MlflowClient`` written through (created on first access)."""
        if self._client is None:
            require_backend("mlflow", "MLflowSink needs the `mlflow` package (mlflow-skinny is enough)")
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.tracking_uri)
        return self._client

    @property
    def run_id(self) -> str:
        """The id of the run written to (the captured or given one, else a run opened here)."""
        if self._run_id is None:
            client = self.client
            name = self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME")
            experiment = os.environ.get("MLFLOW_EXPERIMENT_ID", "0")  # "0": mlflow's Default experiment
            if name:
                found = client.get_experiment_by_name(name)
                experiment = found.experiment_id if found else client.create_experiment(name)
            self._run_id = client.create_run(experiment, run_name=self.run_name).info.run_id
            self._owns_run = True
        return self._run_id

    # ---------------------------------------------------------------- calls
    def log(self, metrics: dict[str, float], step: int) -> None:
        """One ``log_batch`` per 1000 metrics; a name MLflow rejects is left out, with one note naming it."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        rows = [Metric(self.step_key, float(step), stamp, step)]
        rows += [Metric(key, float(value), stamp, step) for key, value in metrics.items() if key not in self._rejected]
        for start in range(0, len(rows), _BATCH):
            self._log_batch(rows[start:start + _BATCH])

    def _log_batch(self, rows: list[Any]) -> None:
        """``log_batch``; when MLflow rejects the batch's input, the halves apart, down to the rejected names.

        MLflow validates a whole batch before it writes any of it, so one bad name would lose every
        metric of the step: the bad ones are found by halving (about 2 log2(n) calls, once per name)
        and dropped from then on; any other failure is raised as it came."""
        try:
            self.client.log_batch(self.run_id, metrics=rows)
        except Exception as exc:
            if getattr(exc, "error_code", None) != "INVALID_PARAMETER_VALUE":
                raise
            if len(rows) == 1:
                self._rejected.add(rows[0].key)
                self.note(f"MLflow rejects the metric name {rows[0].key!r} ({str(exc).splitlines()[0][:300]}); "
                          "it is left out of MLflow from now on, the step's other metrics are logged")
                return
            half = len(rows) // 2
            self._log_batch(rows[:half])
            self._log_batch(rows[half:])

    def log_table(self, key: str, rows: list[dict[str, Any]], step: int) -> None:
        columns = list(dict.fromkeys(k for row in rows for k in row))
        data = {c: [cell(row.get(c)) for row in rows] for c in columns}
        self.client.log_table(self.run_id, data=data, artifact_file=f"grpo_monitor/tables/{key}/step_{step:06d}.json")

    def alert(self, title: str, text: str, level: str = "ERROR") -> None:
        self._alerts += 1
        self.client.set_tag(self.run_id, "grpo_monitor/alert", f"{level}: {title}"[:5000])
        self.client.log_text(self.run_id, f"{level}: {title}\n\n{text}\n",
                             f"grpo_monitor/alerts/{self._alerts:04d}.txt")

    def log_config(self, params: dict[str, Any]) -> None:
        """``grpo_monitor/*`` params; a value changed since an earlier segment (params are immutable) as a tag."""
        from mlflow.entities import Param, RunTag

        known = self.client.get_run(self.run_id).data.params
        values = {key: _param(value) for key, value in params.items()}
        new = [Param(k, v) for k, v in values.items() if k not in known]
        changed = [RunTag(k, v) for k, v in values.items() if k in known and known[k] != v]
        for start in range(0, max(len(new), len(changed)), 100):
            self.client.log_batch(self.run_id, params=new[start:start + 100], tags=changed[start:start + 100])

    def log_report(self, report: StepReport) -> None:
        self.log(report.metrics, report.step)
        if self._tables.take(report):
            for key, rows in report.tables.items():
                self.log_table(key, rows, report.step)
        if report.violations:
            names = sorted({v.invariant for v in report.violations})
            self.client.set_tag(self.run_id, "grpo_monitor/violations", ",".join(names))
            text = "\n\n".join(f"[{v.severity}] {v.invariant}: {v.message()}" for v in report.violations)
            head = f"Run stopped by a breach at step {report.step}.\n\n" if report.failed else ""
            self.client.log_text(self.run_id, head + text + "\n", f"grpo_monitor/violations/step_{report.step:06d}.txt")

    def finish(self, failed: bool = False) -> None:
        run_id, owned = self._run_id, self._owns_run
        self._run_id, self._owns_run = self.given_run_id, False
        self._tables.reset()
        if run_id is None:
            return
        if failed:
            self.client.set_tag(run_id, "grpo_monitor/failed", "true")
            self.client.set_terminated(run_id, "FAILED")
            if not owned:
                _FAILED_RUNS.add(run_id)
        elif owned:
            self.client.set_terminated(run_id, "FINISHED")


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:_PARAM_CHARS]


def _hook_exit() -> None:
    """Once: at exit, end the training thread's fluent run FAILED when a breach ended it (mlflow's own
    exit hook, registered earlier and so run later, would end it FINISHED)."""
    global _HOOKED
    if not _HOOKED:
        _HOOKED = True
        atexit.register(_end_failed_run)


def _end_failed_run() -> None:
    mlflow = sys.modules.get("mlflow")
    active = mlflow.active_run() if mlflow is not None else None
    if active is not None and active.info.run_id in _FAILED_RUNS:
        mlflow.end_run(status="FAILED")  # type: ignore[union-attr]
