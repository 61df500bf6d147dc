"""Every number a report states (captions, run-level check, summary table) against the JSONL log, recomputed here.

The runs are the report variants of ``test_report_runs``. The reference values are computed
from the JSONL (and the demo's theory.jsonl) with plain json and numpy, independently of
``grpo_monitor.tools.reporting``; every caption sentence after the first (which says what is
drawn) must have one of the checkable shapes below. ``tests/test_report_browser.py`` runs
the same checks on the DOM of the page as headless Chromium renders it.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from grpo_monitor.tools.reporting import build_report  # noqa: E402
from grpo_monitor.tools.reporting.html import SUMMARY_METRICS  # noqa: E402
from test_report_runs import VARIANTS, user_loop  # noqa: E402  (tests/ is on sys.path under pytest)


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def variant(request, tmp_path_factory) -> tuple[str, Path, Path]:
    """(name, JSONL log, report.html) of one report variant."""
    log = VARIANTS[request.param](tmp_path_factory.mktemp(request.param))
    return request.param, log, build_report(log)


# ------------------------------------------------------------------ the log, independently


class Log:
    """The JSONL log as plain arrays (one record per step), with the demo's theory and settings when present."""

    def __init__(self, path: Path):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.records = {r["step"]: r for r in records}
        self.steps = sorted(self.records)
        theory = path.parent / "theory.jsonl"
        rows = [json.loads(line) for line in theory.read_text().splitlines()] if theory.is_file() else []
        self.theory = {r["step"]: r for r in rows}
        settings = path.parent / "run.json"  # the demo's; else the group size the monitor's run record declares
        run = next((r["run"] for r in records if isinstance(r.get("run"), dict)), {})
        declared = {k: v for k, v in (run.get("config") or {}).items() if k == "group_size" and v}
        self.settings = json.loads(settings.read_text()) if settings.is_file() else declared

    def series(self, key: str) -> np.ndarray:
        return np.array([_float(self.records[s]["metrics"].get(key)) for s in self.steps])

    def theory_series(self, key: str) -> np.ndarray:
        return np.array([_float(self.theory.get(s, {}).get(key)) for s in self.steps])

    def violations(self) -> list[tuple[int, str]]:
        return [(v.get("step", s), v["invariant"]) for s in self.steps for v in self.records[s].get("violations") or []]


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def first_last(values: np.ndarray) -> tuple[float, float]:
    """What "went from A to B" must say: tenths' means from 10 steps on, else the first and last logged values."""
    n = len(values)
    if n >= 10:
        k = n // 10
        head, tail = values[:k], values[-k:]
        return (float(np.mean(head[np.isfinite(head)])) if np.isfinite(head).any() else math.nan,
                float(np.mean(tail[np.isfinite(tail)])) if np.isfinite(tail).any() else math.nan)
    finite = values[np.isfinite(values)]
    return float(finite[0]), float(finite[-1])


def close(text: str, value: float) -> bool:
    """``text`` (as printed: 12.5%, 0.0452, 5.55e-17, +0.013, 0) rounds ``value``."""
    if text == "0":
        return value == 0
    scale = 100.0 if text.endswith("%") else 1.0
    body = text.rstrip("%")
    mantissa, _, exponent = body.partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    tolerance = 0.5 * 10.0 ** (int(exponent or 0) - decimals) / scale
    return abs(float(body) / scale - value) <= tolerance * 1.001 + 1e-15


# ------------------------------------------------------------- what the captions may say

#: Caption label (first letter lower case) -> metric key, or ("theory", column).
LABELS: dict[str, str | tuple[str, str]] = {
    "the degenerate rate of generated groups": "grpo/sampling/generated_degenerate_rate",
    "the iid prediction for generated groups": "grpo/sampling/degenerate_rate_iid",
    "the degenerate rate of the training batch": "grpo/groups/degenerate_rate",
    "the iid prediction for the training batch": "grpo/groups/degenerate_rate_iid",
    "effective prompts per step": "grpo/groups/effective_prompts",
    "the number of groups in the training batch": "grpo/groups/total",
    "the mean reward": "grpo/reward/mean",
    "the mean per-question reward std": "grpo/reward/question_std_mean",
    "the largest |group mean of advantages|": "grpo/adv/group_mean_abs_max",
    "the largest |advantage| in a degenerate group": "grpo/adv/degenerate_abs_max",
    "the mean live-group std of advantages": "grpo/adv/live_std_mean",
    "the advantage scale k*std": "grpo/adv/convention_scale",
    "the fitted stabilizer": "grpo/adv/stabilizer",
    "the overdispersion": "grpo/groups/overdispersion",
    "the number of stuck questions": "grpo/sampling/stuck_questions",
    "the k3 estimate per token": "grpo/kl/k3_mean",
    "the KL your loss uses (grpo/kl/user_mean)": "grpo/kl/user_mean",
    "the exact KL of the demo policy": ("theory", "kl_per_token"),
    "the mean importance ratio": "grpo/ratio/mean",
    "the clip fraction": "grpo/ratio/clip_frac",
    "the largest |log ratio|": "grpo/ratio/log_abs_max",
    "the mean response length in tokens": "grpo/tokens/response_length_mean",
    "the live-token fraction": "grpo/tokens/live_fraction",
    "responses generated per retained group": "grpo/sampling/responses_per_retained_group",
    "the retention rate": "grpo/sampling/retention_rate",
    "the mismatch KL k3 per token": "grpo/mismatch/k3_mean",
    "the largest mismatch KL k3 per token": "grpo/mismatch/k3_mean",
    "the mean token importance weight": "grpo/mismatch/ratio_mean",
    "the share of all-unsolved groups": "grpo/groups/degenerate_low_rate",
    "the share of all-solved groups": "grpo/groups/degenerate_high_rate",
    "the share of other degenerate groups": "grpo/groups/degenerate_other_rate",
    "the truncated-row rate": "grpo/rows/truncated_rate",
    "the mean entropy per token": "grpo/entropy/mean",
    "the entropy std": "grpo/entropy/std",
    "the share of low-entropy tokens": "grpo/entropy/low_frac",
    "the measured length slope": "grpo/weights/length_slope",
    "the largest question's share": "grpo/weights/top_question_share",
}

NUM = r"[-+]?\d+(?:\.\d+)?(?:e[-+]\d+)?%?"
_START = r"(?:the first tenth of the run|the first step|step (?P<s1>\d+))"
_END = r"(?:the last tenth|the last step|step (?P<s2>\d+) \(the last that logged it\))"
SHAPES = {
    "went": rf"(?P<label>.+?) went from (?P<a>{NUM}) (?:in|at) {_START} to (?P<b>{NUM}) (?:in|at) {_END}",
    "stayed": rf"(?P<label>.+?) stayed at (?P<a>{NUM}) from {_START} to {_END}",
    "back": rf"(?P<label>.+?) was (?P<a>{NUM}) (?:in|at) {_START} and (?:in|at) {_END}, "
            rf"ranging from (?P<lo>{NUM}) to (?P<hi>{NUM}) over the run",
    "partial": rf"(?P<label>.+?) was (?P<a>{NUM}) in the (?P<which>first|last) tenth(?: of the run)? "
               r"\(not logged in .+\)",
    "only": rf"(?P<label>.+?) was (?P<a>{NUM}) at step (?P<s>\d+), the only step that logged it",
    "every": rf"(?P<label>.+?) was (?P<a>{NUM}) at every logged step",
    "peak": rf"(?P<label>.+?) peaked at (?P<a>{NUM}) at step (?P<s>\d+)",
    "single": rf"(?P<label>.+?) was (?P<a>{NUM})",
    "groups": r"There were (?P<a>\d+) groups in the training batch(?P<every> at every logged step)?",
    "over_run": rf"Over the run, (?P<o>\d+) degenerate groups were observed vs (?P<e>{NUM}) expected "
                rf"\(z = (?P<z>{NUM}|n/a)\)",
    "colour": rf"The colour scale runs from 0 to the largest cell, (?P<a>{NUM})",
    "convention": r"The advantages (?P<segments>.+)",
    "k1": r"The k1 estimate was negative at (?P<a>\d+) of (?P<n>\d+) steps?",
    "breached": r"The (?P<inv>\w+) invariant was breached at (?P<n>\d+) steps? \((?P<steps>.+)\)",
    "violations": r"(?P<n>\d+) violations? of (?P<k>\d+) invariants?: (?P<listed>.+)",
    "stopped": r"The breach at step (?P<s>\d+) stopped the run \(X\)",
    "no_iid": r"This log has no iid prediction: .+",
    "no_truncation": r"This log has no truncation rate: .+",
    "no_overdispersion": r"This log has no overdispersion: .+",
    "gaps": r"Rollouts were logged at (?P<k>\d+) of (?P<n>\d+) steps: .+",
}


def captions(page: str) -> dict[str, list[str]]:
    """Figure name -> the sentences of its caption, from the page's HTML (or the browser's DOM)."""
    found = re.findall(r'<figure id="fig-(\w+)">.*?<figcaption><b>.*?</b>(.*?)</figcaption>', page, flags=re.S)
    return {name: re.split(r"(?<=\.) (?=[A-Z0-9])", html.unescape(text).strip()) for name, text in found}


def check_statement(log: Log, sentence: str) -> str:
    """Assert one computed sentence against the log; returns the shape it matched."""
    body = sentence.rstrip(".")
    for shape, pattern in SHAPES.items():
        match = re.fullmatch(pattern, body)
        if match:
            CHECKS[shape](log, match)
            return shape
    raise AssertionError(f"caption sentence with no checkable shape: {sentence!r}")


def _values(log: Log, label: str) -> np.ndarray:
    key = LABELS[label[0].lower() + label[1:]]
    return log.theory_series(key[1]) if isinstance(key, tuple) else log.series(key)


def _went(log: Log, m: re.Match) -> None:
    values = _values(log, m["label"])
    first, last = first_last(values)
    logged = [s for s, v in zip(log.steps, values, strict=True) if np.isfinite(v)]
    assert close(m["a"], first) and close(m["b" if "b" in m.re.groupindex else "a"], last), (m[0], first, last)
    assert m["s1"] is None or (len(log.steps) < 10 and int(m["s1"]) == logged[0]), m[0]
    assert m["s2"] is None or (len(log.steps) < 10 and int(m["s2"]) == logged[-1] != log.steps[-1]), m[0]


def _stayed(log: Log, m: re.Match) -> None:
    """"stayed at A": the ends read A and so does every logged value in between."""
    _went(log, m)
    values = _values(log, m["label"])
    assert all(close(m["a"], v) for v in values[np.isfinite(values)]), (m[0], values)


def _back(log: Log, m: re.Match) -> None:
    """"was A at the start and at the end, ranging from L to H": the ends read A, L and H are the extremes."""
    _went(log, m)
    values = _values(log, m["label"])
    finite = values[np.isfinite(values)]
    assert close(m["lo"], float(finite.min())) and close(m["hi"], float(finite.max())) and m["lo"] != m["hi"], m[0]


def _partial(log: Log, m: re.Match) -> None:
    first, last = first_last(_values(log, m["label"]))
    assert close(m["a"], first if m["which"] == "first" else last)
    assert not np.isfinite(last if m["which"] == "first" else first)


def _only(log: Log, m: re.Match) -> None:
    values = _values(log, m["label"])
    assert np.isfinite(values).sum() == 1 and close(m["a"], float(values[log.steps.index(int(m["s"]))]))


def _every(log: Log, m: re.Match) -> None:
    values = _values(log, m["label"])
    assert all(close(m["a"], v) for v in values[np.isfinite(values)]), m[0]


def _peak(log: Log, m: re.Match) -> None:
    values = _values(log, m["label"])
    assert close(m["a"], float(np.nanmax(values))) and values[log.steps.index(int(m["s"]))] == np.nanmax(values)


def _single(log: Log, m: re.Match) -> None:
    values = _values(log, m["label"])
    assert len(log.steps) == 1 and close(m["a"], float(values[0])), m[0]


def _groups(log: Log, m: re.Match) -> None:
    total = log.series("grpo/groups/total")
    assert np.all(total[np.isfinite(total)] == int(m["a"])) and (m["every"] is not None) == (len(log.steps) > 1)


def _over_run(log: Log, m: re.Match) -> None:
    observed, expected, z = degenerate_totals(log)
    assert int(m["o"]) == observed and close(m["e"], expected) and close(m["z"], z), (m[0], observed, expected, z)


def _colour(log: Log, m: re.Match) -> None:
    """Two-valued rewards (at most G/2 distinct live stds): one row per value, the largest share exactly. More
    values are binned: the largest cell holds at least the largest one-value share and is k/n of a step's n groups."""
    shares, sizes, live = [], [], set()
    for s in log.steps:
        if "grpo/reward/question_std" not in log.records[s].get("histograms", {}):
            continue  # a step that logged no rollout: a blank column
        stds = np.round(np.array(log.records[s]["histograms"]["grpo/reward/question_std"]), 9)
        shares += [count / len(stds) for count in np.unique(stds, return_counts=True)[1]]
        sizes.append(len(stds))
        live |= set(stds[stds > 0].tolist())
    G = log.settings.get("group_size", 4)
    products = {k * (G - k) for k in range(1, G)}  # a two-valued group's std is c * sqrt(k (G - k)), one c per run
    two_valued = any(all(min(abs(v * v / c2 - q) for q in products) < 1e-6 for v in live)
                     for c2 in (min(live, default=1.0) ** 2 / q for q in products))
    if two_valued:
        assert close(m["a"], max(shares)), (m[0], max(shares))
    else:
        said = float(m["a"].rstrip("%")) / 100
        assert said >= max(shares) - 0.005 and any(close(m["a"], k / n) for n in sizes for k in range(1, n + 1)), m[0]


def _convention(log: Log, m: re.Match) -> None:
    broken = {s for s, inv in log.violations() if inv == "convention"}
    logged = [s for s in log.steps if s in broken or log.records[s].get("convention")]  # a step without a rollout
    truth = ["broke the convention check" if s in broken else f"fit {log.records[s]['convention']}" for s in logged]
    said: dict[int, str] = {}
    for part in m["segments"].split(", then "):
        what, where = re.fullmatch(r"(.+?) at (every logged step|step \d+|steps \d+-\d+)", part).groups()
        numbers = [int(x) for x in re.findall(r"\d+", where)] or [logged[0], logged[-1]]
        said.update({s: what for s in logged if numbers[0] <= s <= numbers[-1]})
    assert [said.get(s) for s in logged] == truth, (m[0], truth)


def _k1(log: Log, m: re.Match) -> None:
    k1 = log.series("grpo/kl/k1_mean")
    assert int(m["a"]) == int((k1[np.isfinite(k1)] < 0).sum()) and int(m["n"]) == int(np.isfinite(k1).sum())


def _breached(log: Log, m: re.Match) -> None:
    steps = sorted({s for s, inv in log.violations() if inv == m["inv"]})
    assert int(m["n"]) == len(steps) and [int(x) for x in re.findall(r"\d+", m["steps"])] == steps


def _violations(log: Log, m: re.Match) -> None:
    found = log.violations()
    assert int(m["n"]) == len(found) and int(m["k"]) == len({inv for _, inv in found})
    for item in m["listed"].split("; "):
        name, steps = re.fullmatch(r"(\w+) at steps? (.+)", item).groups()
        assert [int(x) for x in re.findall(r"\d+", steps)] == sorted({s for s, inv in found if inv == name})


def _stopped(log: Log, m: re.Match) -> None:
    assert [s for s in log.steps if log.records[s].get("failed")] == [int(m["s"])]


def _no_iid(log: Log, m: re.Match) -> None:
    for key in ("grpo/groups/degenerate_rate_iid", "grpo/sampling/degenerate_rate_iid"):
        assert not np.isfinite(log.series(key)).any()


def _no_truncation(log: Log, m: re.Match) -> None:
    assert not np.isfinite(log.series("grpo/rows/truncated_rate")).any()


def _gaps(log: Log, m: re.Match) -> None:
    logged = int(np.isfinite(log.series("grpo/groups/degenerate_rate")).sum())
    assert int(m["k"]) == logged < int(m["n"]) == len(log.steps), m[0]


def _no_overdispersion(log: Log, m: re.Match) -> None:
    assert not np.isfinite(log.series("grpo/groups/overdispersion")).any()


CHECKS = {"went": _went, "stayed": _stayed, "back": _back, "partial": _partial, "only": _only, "every": _every,
          "peak": _peak, "single": _single, "groups": _groups, "over_run": _over_run, "colour": _colour,
          "convention": _convention, "k1": _k1, "breached": _breached, "violations": _violations, "stopped": _stopped,
          "no_iid": _no_iid, "no_truncation": _no_truncation, "no_overdispersion": _no_overdispersion,
          "gaps": _gaps}


def degenerate_totals(log: Log) -> tuple[int, float, float]:
    """Observed and expected degenerate groups and z: the demo's p^G + (1-p)^G, else the monitor's iid rate."""
    generated = np.isfinite(log.series("grpo/sampling/generated_degenerate_rate")).any()
    rate, total, iid, column = (
        ("grpo/sampling/generated_degenerate_rate", "grpo/sampling/generated_groups",
         "grpo/sampling/degenerate_rate_iid",
         "generated_p") if generated else
        ("grpo/groups/degenerate_rate", "grpo/groups/total", "grpo/groups/degenerate_rate_iid", "trained_p"))
    counts = [round(r * n) for r, n in zip(log.series(rate), log.series(total), strict=True)]
    if log.theory:
        G = log.settings["group_size"]
        d = [p**G + (1 - p) ** G for s in log.steps for p in log.theory[s][column]]
        var = sum(x * (1 - x) for x in d)
        return sum(counts), sum(d), (sum(counts) - sum(d)) / math.sqrt(var)
    n, dbar = log.series(total), log.series(iid)
    keep = np.isfinite(dbar)
    observed = sum(c for c, k in zip(counts, keep, strict=True) if k)
    expected, var = float((n * dbar)[keep].sum()), float((n * dbar * (1 - dbar))[keep].sum())
    return observed, expected, (observed - expected) / math.sqrt(var)


def check_page(page: str, log_path: Path) -> dict[str, int]:
    """Every checkable statement of the page against the log; returns how many of each shape were checked."""
    log = Log(log_path)
    counts: dict[str, int] = {}
    for name, sentences in captions(page).items():
        for sentence in sentences[0 if name == "violations" else 1:]:  # the first sentence says what is drawn
            shape = check_statement(log, sentence)
            counts[shape] = counts.get(shape, 0) + 1
        _check_bessel_value(log, sentences[0])
    check = re.search(r'id="run-check">Degenerate groups over the run \([^)]*\): (\d+) observed vs (' + NUM
                      + r') expected, z = (' + NUM + ")", page)
    if check:
        observed, expected, z = degenerate_totals(log)
        assert int(check[1]) == observed and close(check[2], expected) and close(check[3], z)
    counts["summary"] = _check_summary(page, log)
    return counts


def _check_bessel_value(log: Log, sentence: str) -> None:
    """The advantages caption's sqrt((G-1)/G) is the run's G (6 groups of 4 in the loops, 8 in the demo)."""
    match = re.search(rf"sqrt\(\(G-1\)/G\) = ({NUM}) at G=(\d+)", sentence)
    if match:
        G = int(match[2])
        assert G == log.settings.get("group_size", 4) and close(match[1], math.sqrt((G - 1) / G))


def _check_summary(page: str, log: Log) -> int:
    """The summary table's start and end columns (one column for a 1-step run)."""
    table = re.search(r'<table id="summary">(.*?)</table>', page, flags=re.S)[1]
    keys = {html.escape(label, quote=True): key for label, key, _ in SUMMARY_METRICS}
    checked = 0
    for label, cells in re.findall(r"<tr><th>([^<]+)</th>((?:<td class=num>[^<]*</td>)+)</tr>", table):
        values = re.findall(r"<td class=num>([^<]*)</td>", cells)
        series = log.series(keys[label])
        first, last = first_last(series) if len(log.steps) >= 10 else (series[0], series[-1])
        expected = [last] if len(log.steps) == 1 else [first, last]
        assert len(values) == len(expected)
        assert all(v == "n/a" and not np.isfinite(e) or close(v, e) for v,
                   e in zip(values, expected, strict=True)), (label, values)
        checked += 1
    return checked


# --------------------------------------------------------------------------------- tests


def test_every_caption_statement_matches_the_log(variant):
    """Each computed caption sentence, the run-level check and the summary agree with the log recomputed here."""
    name, log, page = variant
    counts = check_page(page.read_text(), log)
    assert counts["summary"] >= 5 and sum(counts.values()) >= 12, counts
    if name in ("clean-demo", "failing", "no-ledger-no-tokens"):
        assert counts.get("over_run") == 1, counts


@pytest.mark.parametrize("steps,expected,absent", [
    (1, ["1 step (step 0)", "<th>step 0</th>", "Clean: no invariant broke in 1 step."],
     ["tenth", "1 steps", "first step"]),
    (3, ["3 steps (steps 0&ndash;2)", "<th>first step (0)</th><th>last step (2)</th>", "at the first step"], ["tenth"]),
    (12, ["first tenth (step 0)", "last tenth (step 11)", "in the first tenth of the run"], ["first step ("]),
], ids=["1-step", "3-steps", "12-steps"])
def test_short_runs_are_worded_for_their_length(tmp_path, steps, expected, absent):
    """1 step: no start/end comparison and "1 step"; 2-9 steps: first/last step; from 10: first/last tenth."""
    page = build_report(user_loop(tmp_path / "monitor.jsonl", steps)).read_text()
    for text in expected:
        assert text in page, text
    for text in absent:
        assert text not in page, text


def test_run_level_check_is_the_demo_cli_line(tmp_path):
    """The page's observed-vs-expected line for a demo run has the numbers `grpo-monitor demo` prints."""
    from grpo_monitor.tools.demo import DemoConfig, run_demo
    from grpo_monitor.tools.demo.summary import summary_text

    result = run_demo(DemoConfig(steps=25), tmp_path, wandb=False, tensorboard=False, progress=False)
    printed = re.search(r"(\d+) observed, ([\d.]+) expected from p\^G \+ \(1-p\)\^G \(z = ([-+][\d.]+)\)",
                        summary_text(result))
    page = Path(result.outputs["report"]).read_text()
    assert f"{printed[1]} observed vs {printed[2]} expected, z = {printed[3]}" in page


@pytest.mark.parametrize("mutation", ["number", "demo-prose"])
def test_the_checker_catches_a_contradiction(tmp_path, mutation):
    """A caption number off by one rounding unit, or a sentence of demo prose, fails the check."""
    log = user_loop(tmp_path / "monitor.jsonl", 12)
    page = build_report(log).read_text()
    check_page(page, log)
    if mutation == "number":
        bad = re.sub(r"(The mean reward went from )(\d\.\d+)", lambda m: m[1] + f"{float(m[2]) + 0.002:.3f}", page)
    else:
        bad = page.replace("</figcaption>", " It rises as questions saturate.</figcaption>", 1)
    assert bad != page
    with pytest.raises(AssertionError):
        check_page(bad, log)

