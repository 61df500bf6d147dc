"""Importing and constructing sinks imports no optional backend and touches no file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_and_construct_without_backends(tmp_path):
    """Importing grpo_monitor and the sinks, and constructing every sink, import no tracker nor rich."""
    code = textwrap.dedent(
        f"""
        import sys
        import grpo_monitor
        from grpo_monitor.sinks import (ConsoleSink, JSONLSink, MLflowSink, SinkSet, TensorBoardSink,
                                        TrackioSink, WandbSink, read_jsonl, read_wandb_records, build_workspace)
        d = {str(tmp_path)!r}
        SinkSet([JSONLSink(d + "/a/s.jsonl"), TensorBoardSink(d + "/tb"), WandbSink(project="p"),
                 ConsoleSink(), TrackioSink(project="p"), MLflowSink(experiment_name="e")])
        heavy = sorted({{m.split(".")[0] for m in sys.modules}}
                       & {{"wandb", "tensorboard", "rich", "wandb_workspaces", "trackio", "mlflow"}})
        print(heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    assert list(tmp_path.iterdir()) == []
