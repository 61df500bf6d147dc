"""Run a scenario on 2 gloo processes (subprocesses) with a hard timeout.

``run_ranks(scenario, tmp_path)`` starts ``python dist_worker.py <scenario> <outdir>`` (or another
``worker``) once per rank with ``MASTER_ADDR=127.0.0.1``, a free port, ``RANK`` and ``WORLD_SIZE``; each
rank writes ``rank<r>.pt`` (what it saw). A hung collective is killed at the timeout and
fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

WORKER = Path(__file__).with_name("dist_worker.py")
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(scenario: str, outdir: Path, world: int = 2, timeout: float = 90.0, worker: Path = WORKER,
              args: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Each rank's result dict; raises AssertionError naming the rank on failure or timeout."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", GRPO_MONITOR_DIST_TIMEOUT=str(int(timeout)))
    procs = [
        subprocess.Popen([sys.executable, str(worker), scenario, str(outdir), *args],
                         env=dict(env, RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(world)
    ]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            logs.append(out)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise AssertionError(
            f"scenario {scenario!r}: a rank did not finish within {timeout}s (hung collective?)") from None
    for r, (p, log) in enumerate(zip(procs, logs, strict=True)):
        assert p.returncode == 0, f"scenario {scenario!r}: rank {r} exited with {p.returncode}:\n{log[-4000:]}"
    return [torch.load(outdir / f"rank{r}.pt", weights_only=False) for r in range(world)]
