"""verl's own rollout dump (``RayPPOTrainer._dump_generations``, verl 0.9.1) scanned end to end.

The dump is written by verl's real method, called unbound on a minimal object that holds
what it reads (``global_steps``, its dump executor and futures, ``_write_generations``);
the numbers are checked against a plain-Python count over the files it wrote.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import random
import sys
import types
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grpo_monitor.sinks import read_jsonl
from grpo_monitor.tools.scan import scan_rollouts

G = 4
STEPS = 12
TEMPLATE = "system\nYou are a helpful assistant.\nuser\n{q}\nPut the final answer after ####.\nassistant\n"
QUESTIONS = [f"What is {i} plus {i + 7}?" for i in range(10)]
STUCK = {QUESTIONS[0], QUESTIONS[1]}  # never solved
SOLVED = {QUESTIONS[2]}  # always solved


class _Stub(types.ModuleType):
    """Stands in for the HTTP-server packages verl's rollout server imports (uvicorn, fastapi) when absent."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None})


def _ray_trainer():
    """``verl.trainer.ppo.ray_trainer.RayPPOTrainer``; server-only packages missing here are stubbed during the
    import."""
    pytest.importorskip("verl")
    added = []
    for name in ("uvicorn", "fastapi"):
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = _Stub(name)
            sys.modules[name].__path__ = []
            added.append(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    finally:
        logging.disable(logging.NOTSET)
        for name in added:
            sys.modules.pop(name, None)
    return RayPPOTrainer


def _dump_with_verl(folder: Path, seed: int = 0) -> None:
    """STEPS dumps written by verl's ``_dump_generations``: 4 prompts x G per step, rows shuffled, some None scores."""
    trainer_cls = _ray_trainer()
    rng = random.Random(seed)
    host = types.SimpleNamespace(_dump_executor=ThreadPoolExecutor(max_workers=1), _dump_futures=[],
                                 _write_generations=trainer_cls._write_generations)
    try:
        for step in range(1, STEPS + 1):
            rows = []
            for q in rng.sample(QUESTIONS, 4):
                p = 0.0 if q in STUCK else 1.0 if q in SOLVED else rng.random()
                for _ in range(G):
                    score = float(rng.random() < p)
                    rows.append((TEMPLATE.format(q=q), f"answer {rng.randint(0, 99)}", str(len(q)),
                                 None if rng.random() < 0.05 and q not in STUCK | SOLVED else score))
            rng.shuffle(rows)  # verl balances sequence lengths across ranks: rows of a group are not adjacent
            host.global_steps = step
            inputs, outputs, gts, scores = map(list, zip(*rows, strict=True))
            trainer_cls._dump_generations(host, inputs, outputs, gts, scores,
                                          {"acc": [s == 1.0 for s in scores]}, str(folder))
    finally:
        for future in host._dump_futures:
            future.result()
        host._dump_executor.shutdown(wait=True)


def _reference(folder: Path) -> dict[int, dict]:
    """Per step, in plain Python: groups of identical input, degenerate if their non-null scores are all equal."""
    out = {}
    for path in sorted(folder.glob("*.jsonl"), key=lambda p: int(p.stem)):
        groups: dict[str, list] = {}
        for line in path.read_text().splitlines():
            row = json.loads(line)
            groups.setdefault(row["input"], []).append(row["score"])
        scored = [s for g in groups.values() for s in g if s is not None]
        degenerate = sum(len({s for s in g if s is not None}) <= 1 for g in groups.values())
        out[int(path.stem)] = {"degenerate_rate": degenerate / len(groups), "effective": len(groups) - degenerate,
                               "groups": len(groups), "reward_mean": sum(scored) / len(scored),
                               "unscorable": sum(s is None for g in groups.values() for s in g)}
    return out


@pytest.fixture(scope="module")
def verl_dump(tmp_path_factory) -> Path:
    """A rollout_data_dir written by verl's own writer."""
    folder = tmp_path_factory.mktemp("verl-rollouts")
    _dump_with_verl(folder)
    return folder


def test_verl_dump_has_verls_fields(verl_dump):
    """The files are verl's: <step>.jsonl with input, output, gts, score, step and the extra field."""
    assert sorted(int(p.stem) for p in verl_dump.glob("*.jsonl")) == list(range(1, STEPS + 1))
    row = json.loads((verl_dump / "3.jsonl").read_text().splitlines()[0])
    assert set(row) == {"input", "output", "gts", "score", "step", "acc"} and row["step"] == 3


@pytest.mark.parametrize("prefetch", [False, True], ids=["in-process", "prefetch"])
def test_scan_matches_a_plain_count(verl_dump, tmp_path, prefetch):
    """Degenerate rate, effective prompts, reward mean and unscorable rows equal a plain-Python count, per step."""
    result = scan_rollouts(verl_dump, tmp_path / "scan", quiet=True, group_size=G, prefetch=prefetch, report=False)
    assert result.format == "verl" and result.steps == STEPS and result.rows == STEPS * 4 * G
    ref = _reference(verl_dump)
    records = read_jsonl(result.log)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for record in records:
        m, want = record["metrics"], ref[record["step"]]
        assert m["grpo/groups/total"] == want["groups"] == 4
        assert m["grpo/groups/degenerate_rate"] == want["degenerate_rate"]
        assert m["grpo/groups/effective_prompts"] == want["effective"]
        assert m["grpo/reward/mean"] == pytest.approx(want["reward_mean"], rel=1e-12)
        assert m["grpo/rows/unscorable"] == want["unscorable"]
        assert record["violations"] == []
    assert sum(r["unscorable"] for r in ref.values()) > 0, "the seed should give a None score"


def test_stuck_and_saturated_questions_are_named(verl_dump, tmp_path):
    """The never-solved and always-solved questions are flagged, with their text and without the template."""
    result = scan_rollouts(verl_dump, tmp_path / "scan", quiet=True, group_size=G, report=False)
    flagged = {f.text: f.kind for f in result.questions.flagged()}
    seen = {}
    for path in verl_dump.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            seen.setdefault(row["input"], set()).add(row["step"])
    expected = {q: "stuck" if q in STUCK else "saturated" for q in STUCK | SOLVED
                if len(seen.get(TEMPLATE.format(q=q), ())) >= 2}
    got = {text: kind for text, kind in flagged.items() if kind in ("stuck", "saturated")}
    others = {q for q in QUESTIONS if q not in STUCK | SOLVED}
    assert {k: v for k, v in got.items() if k not in others} == expected
    assert expected, "the seed should draw a stuck question in two steps"


def test_iid_prediction_and_report_are_written(verl_dump, tmp_path):
    """Binary rewards with question ids give the iid prediction; report.html and TensorBoard events are written."""
    result = scan_rollouts(verl_dump, tmp_path / "scan", quiet=True, group_size=G)
    last = read_jsonl(result.log)[-1]["metrics"]
    assert 0.0 <= last["grpo/groups/degenerate_rate_iid"] <= 1.0
    assert not math.isnan(last["grpo/groups/degenerate_rate_iid"])
    assert result.report is not None and "<img" in result.report.read_text()
    assert any(result.tensorboard.glob("events.out.tfevents.*"))
