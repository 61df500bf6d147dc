"""`report` on a run folder someone else made stays bounded: a damaged or hostile group size in `run.json` or in the
log's run record never makes it hang or exhaust memory, and reading a file never reserves the file size limit
(16 GiB) up front, so `report` and `scan` work under an address-space limit (`ulimit -v`, a batch scheduler's)."""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from grpo_monitor.tools.reporting import build_report
from grpo_monitor.tools.reporting.data import MAX_GROUP_SIZE, load_run
from grpo_monitor.tools.reporting.plots import _two_valued, group_size
from grpo_monitor.tools.scan import scan_rollouts

ROOT = Path(__file__).resolve().parents[2]


def scanned(tmp_path: Path) -> Path:
    """A real scan's output folder (monitor.jsonl and run.json) of 6 steps, 3 groups of 4 with two-valued rewards."""
    src = tmp_path / "rollouts.jsonl"
    src.write_text("".join(json.dumps({"step": s, "group": g, "reward": float((s + g + i) % 3 == 0)}) + "\n"
                           for s in range(6) for g in range(3) for i in range(4)))
    out = tmp_path / "run"
    scan_rollouts(src, out, group_size=4, quiet=True, report=False, tensorboard=False)
    return out


@pytest.mark.parametrize("where", ["run.json", "run record"])
@pytest.mark.parametrize("G", [10**22, 10**8, MAX_GROUP_SIZE + 1], ids=["1e22", "1e8", "over-the-cap"])
def test_a_huge_declared_group_size_is_ignored_not_iterated(where, G, tmp_path):
    """G = 1e22 in run.json made report iterate forever (1e8: 23 GB of RSS); now a G over MAX_GROUP_SIZE is not
    a group size the report draws with (the 4 the other file declares is), and the report is written in seconds."""
    run = scanned(tmp_path)
    if where == "run.json":
        meta = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**meta, "group_size": G}))
    else:
        lines = (run / "monitor.jsonl").read_text().splitlines()
        first = json.loads(lines[0])
        first["run"]["config"]["group_size"] = G
        (run / "monitor.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert group_size(load_run(run / "monitor.jsonl")) == 4  # the other file's declared G
    start = time.monotonic()
    assert build_report(run / "monitor.jsonl", run).is_file()
    assert time.monotonic() - start < 60


def _two_valued_by_enumeration(live: np.ndarray, G: int) -> bool:
    """The reference: every root sqrt(k (G - k)), k = 1..G/2, tried as the largest value's, each value matched
    against every root."""
    roots = [math.sqrt(k * (G - k)) for k in range(1, G // 2 + 1)]
    if not live.size or len(live) > G // 2:
        return False
    return any(all(min(abs(r * live[-1] / top - v) for r in roots) <= 1e-6 * max(v, 1e-12) + 1e-9 for v in live)
               for top in roots)


def test_the_two_valued_check_agrees_with_enumeration():
    """The one-pass check (a value's k from its inverse) decides as enumerating every root does: stds of two-valued
    rewards, the same off by 1e-4, and random values, for G from 2 to 40."""
    rng = np.random.default_rng(0)
    decided = []
    for trial in range(900):
        G = int(rng.integers(2, 41))
        ks = rng.integers(0, G + 1, size=int(rng.integers(1, 12)))
        stds = {0: [math.sqrt(k * (G - k)) / G * 0.7 for k in ks],
                1: [math.sqrt(k * (G - k)) / G * (1 + 1e-4 * rng.normal()) for k in ks],
                2: list(rng.random(len(ks)))}[trial % 3]
        live = np.unique(np.round(np.asarray(stds), 9))
        live = live[live > 0]
        expected = _two_valued_by_enumeration(live, G)
        assert _two_valued(live, G) == expected, (G, live)
        decided.append(expected)
    assert 200 < sum(decided) < 700  # both answers are exercised


def _limited(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_AS"), reason="needs RLIMIT_AS")
def test_report_and_scan_run_under_an_address_space_limit(tmp_path):
    """Under a 6 GiB address-space limit (torch maps about 3), `report` of a scan's folder and a `scan` with its
    report succeed: run.json used to be read into a buffer of the whole 16 GiB file limit (MemoryError)."""
    run = scanned(tmp_path)
    argv = [sys.executable, "-m", "grpo_monitor"]
    for args in (["report", str(run)], ["scan", str(tmp_path / "rollouts.jsonl"), "--out", str(tmp_path / "again"),
                                       "-G", "4", "-q"]):
        done = subprocess.run(argv + args, capture_output=True, text=True, timeout=300, cwd=ROOT,
                              preexec_fn=_limited(6 << 30))
        assert done.returncode == 0, done.stderr[-2000:]
        assert "MemoryError" not in done.stderr
    assert (run / "report.html").is_file() and (tmp_path / "again" / "report.html").is_file()


def test_numbers_past_float_range_in_theory_jsonl_are_no_value(tmp_path):
    """An int past float range in theory.jsonl (a scalar, and inside a per-group list) reads as NaN, as a string
    scalar there does (before: OverflowError out of `report`)."""
    from grpo_monitor.tools.reporting.data import load_run

    run = scanned(tmp_path)
    huge = "1" + "0" * 400
    (run / "theory.jsonl").write_text(f'{{"step": 0, "x": {huge}, "y": 0.5, "p": [{huge}, 0.5]}}\n'
                                      '{"step": 1, "x": 2.0, "y": 0.25, "p": [0.5, 0.5]}\n')
    data = load_run(run / "monitor.jsonl")
    assert np.isnan(data.theory["x"][0]) and data.theory["x"][1] == 2.0 and list(data.theory["y"][:2]) == [0.5, 0.25]
    first, second = data.theory_groups["p"][:2]
    assert np.isnan(first[0]) and first[1:] == [0.5] and second == [0.5, 0.5]
    assert build_report(run / "monitor.jsonl", run).is_file()
