"""The offline report: PNG figures and one self-contained HTML page built from a JSONL log."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from grpo_monitor import GRPOMonitor, MonitorConfig, Violation  # noqa: E402
from grpo_monitor.catalog.metrics import METRICS  # noqa: E402
from grpo_monitor.sinks.jsonl import JSONLSink, read_jsonl  # noqa: E402
from grpo_monitor.tools.cli import main  # noqa: E402
from grpo_monitor.tools.demo import DemoConfig, run_demo  # noqa: E402
from grpo_monitor.tools.reporting import FIGURES, build_report, load_run  # noqa: E402
from grpo_monitor.tools.reporting.plots import draw_degenerate, question_std_matrix, rolling_mean  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def ds_run(tmp_path_factory) -> Path:
    """A short demo run with dynamic sampling (its report not yet built)."""
    out = tmp_path_factory.mktemp("ds")
    run_demo(DemoConfig(steps=40, dynamic_sampling=True), out, wandb=False, tensorboard=False, progress=False,
             report=False)
    return out


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory) -> Path:
    """A demo run stopped at step 0 by an injected bug."""
    out = tmp_path_factory.mktemp("bug")
    run_demo(DemoConfig(steps=5), out, bug="bessel", wandb=False, tensorboard=False, progress=False, report=False)
    return out


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the IHDR chunk of a PNG."""
    assert data[:8] == PNG_MAGIC
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_report_cli_writes_pngs_and_self_contained_html(ds_run, capsys):
    """`grpo-monitor report RUN` writes one PNG per figure and an HTML page with every image inlined."""
    assert main(["report", str(ds_run)]) == 0
    assert "report.html" in capsys.readouterr().out
    pngs = {p.stem: p.read_bytes() for p in (ds_run / "plots").glob("*.png")}
    # a clean run has no violations figure; the demo passes no loss=, sampler_logprobs= or entropy= to observe_loss
    assert set(pngs) == {f.name for f in FIGURES} - {"violations", "weights", "mismatch", "entropy"}
    for name, data in pngs.items():
        width, height = _png_size(data)
        assert width == 900 and 200 <= height <= 1000, name
    page = (ds_run / "report.html").read_text()
    sources = re.findall(r'<img[^>]*src="([^"]+)"', page)
    assert len(sources) == len(pngs) and all(s.startswith("data:image/png;base64,") for s in sources)
    assert {base64.b64decode(s.split(",", 1)[1]) for s in sources} == set(pngs.values())
    assert not re.search(r'(src|href)="(?!data:)', page), "no external asset"
    assert "Clean: no invariant broke in 40 steps" in page and "<th>estimator</th><td colspan=2>population" in page


def test_report_of_a_failed_run_shows_the_breach(failed_run):
    """A run stopped by a breach gets the red banner, the message with its repro path, and the violations figure."""
    page = build_report(failed_run).read_text()
    assert "Run stopped at step 0 by a breach of convention" in page
    assert "declared std_convention=&#x27;population&#x27;" in page and "repro: <code>" in page
    assert (failed_run / "plots" / "violations.png").is_file()


def test_violations_are_marked_on_the_time_axis(failed_run):
    """Every time-axis figure draws a vertical line at the step of each violation."""
    run = load_run(failed_run)
    fig = draw_degenerate(run)
    vertical = [ln for ax in fig.axes for ln in ax.get_lines() if len(set(np.asarray(ln.get_xdata(), float))) == 1]
    assert vertical and all(float(ln.get_xdata()[0]) == 0.0 for ln in vertical)
    assert any("breach that stopped the run" == ln.get_label() for ln in vertical)


def test_question_std_heatmap_counts_groups(ds_run):
    """The heatmap's columns are the share of groups at each distinct reward std, from the logged histograms."""
    run = load_run(ds_run)
    matrix, labels = question_std_matrix(run, max_columns=1000)
    records = read_jsonl(ds_run / "monitor.jsonl")
    G = 8
    values = [np.sqrt(k * (G - k)) / G for k in range(G // 2 + 1)]  # binary rewards: std of k successes of G
    seen = [v for v in values if v == 0 or any(
        np.isclose(v, s) for r in records for s in r["histograms"]["grpo/reward/question_std"])]
    assert [float(x.split()[0]) for x in labels] == pytest.approx(seen, abs=1e-3)
    for column, record in zip(matrix.T, records, strict=False):
        stds = np.array(record["histograms"]["grpo/reward/question_std"])
        expected = [np.mean(np.isclose(stds, float(label.split()[0]), atol=1e-3)) for label in labels]
        assert column == pytest.approx(expected)
    assert labels[0] == "0 (degenerate)" and np.allclose(matrix[0], 0.0)  # dynamic sampling kept no degenerate group


def test_report_from_a_plain_monitor_log(tmp_path):
    """Any JSONL log works: no theory file, no token statistics, violations under the warn policy."""
    log = tmp_path / "train.jsonl"
    gen = torch.Generator().manual_seed(0)
    config = MonitorConfig(group_size=4, on_violation="ignore")
    with GRPOMonitor(config, sinks=[JSONLSink(log)]) as mon:
        for step in range(12):
            rewards = (torch.rand(6, 4, generator=gen) < 0.5).double()
            adv = rewards - rewards.mean(1, keepdim=True)
            if step == 7:
                adv = adv + 0.5  # not centred: zero_group_mean breaks
            mon.observe_rollout(rewards, advantages=adv)
            mon.end_step()
    page = build_report(log, tmp_path / "out").read_text()
    assert re.search(r"\d violations? in 12 steps; the run went on", page)
    assert "KL estimators: no data in this run. Logged when you call observe_loss" in page
    assert "Dynamic sampling ledger: no data" in page
    assert (tmp_path / "out" / "plots" / "violations.png").is_file()
    run = load_run(log)
    assert [m.step for m in run.violations] == [7] and run.violations[0].invariant == "zero_group_mean"


def test_load_run_merges_records_of_one_step(tmp_path):
    """Two lines for one step (a report, then extra scalars) merge; NaN stays NaN."""
    log = tmp_path / "monitor.jsonl"
    log.write_text('{"step": 0, "metrics": {"a": 1.0}, "violations": []}\n'
                   '{"step": 0, "metrics": {"b": NaN}}\n{"step": 1, "metrics": {"a": 3.0}}\n')
    run = load_run(tmp_path)
    assert run.steps.tolist() == [0, 1] and run.series("a").tolist() == [1.0, 3.0]
    assert np.isnan(run.series("b")).all() and not run.has("b")


@pytest.mark.parametrize("args,message", [
    (["report", "/nonexistent/run"], "neither a folder nor a JSONL file"),
    (["report", "EMPTY"], "holds no step records"),
], ids=["missing", "empty"])
def test_report_errors_are_worded(tmp_path, capsys, args, message):
    """A missing or empty log exits 2 with a message naming the problem."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    args = [str(empty) if a == "EMPTY" else a for a in args]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_rolling_mean_against_a_loop():
    """The NaN-aware centred moving average equals a direct loop over windows."""
    values = np.array([1.0, np.nan, 3.0, 4.0, np.nan, np.nan, 7.0, 8.0])
    w = 3
    expected = []
    for i in range(len(values)):
        window = values[max(0, i - 1):i + 2]
        finite = window[np.isfinite(window)]
        expected.append(finite.mean() if finite.size else np.nan)
    assert np.allclose(rolling_mean(values, w), expected, equal_nan=True)


def test_violation_record_round_trip_feeds_the_report(tmp_path):
    """A violation written by the JSONL sink comes back with its step, invariant, message and repro path."""
    from grpo_monitor.report import StepReport

    v = Violation("finite", 3, "2 groups", "finite", (1,), "hint", repro_path="/tmp/x.pt")
    sink = JSONLSink(tmp_path / "monitor.jsonl")
    sink.log_report(StepReport(3, {"grpo/groups/degenerate_rate": 0.5}, [v], failed=True))
    sink.finish()
    run = load_run(tmp_path)
    mark = run.violations[0]
    assert (mark.step, mark.invariant, mark.repro_path, mark.failed) == (3, "finite", "/tmp/x.pt", True)
    assert mark.message == v.message() and run.failed_step == 3


def _data_lines(ax):
    """(y values, label) of every line in data units on ``ax``: series and horizontal references, not violation
    marks."""
    return [(np.asarray(ln.get_ydata(), float), ln.get_label()) for ln in ax.get_lines()
            if ln.get_transform() is not ax.get_xaxis_transform()]


@pytest.mark.parametrize("run_fixture", ["ds_run", "failed_run"])
def test_nothing_sits_on_a_border(request, run_fixture):
    """Every series and reference line of every time-axis panel lies at least 2% inside the y range (log: in
    decades)."""
    from grpo_monitor.tools.reporting.figures import FIGURES as SPECS

    run = load_run(request.getfixturevalue(run_fixture))
    checked = 0
    for spec in SPECS:
        fig = spec.draw(run)
        if fig is None or spec.name in ("violations", "question_std"):
            continue
        for ax in fig.axes:
            lo, hi = ax.get_ylim()
            log = ax.get_yscale() == "log"
            lo, hi = (np.log10(lo), np.log10(hi)) if log else (lo, hi)
            margin = 0.02 * (hi - lo)
            for y, label in _data_lines(ax):
                y = y[np.isfinite(y)]
                y = np.log10(y) if log else y
                assert np.all((y > lo + margin) & (y < hi - margin)), (spec.name, ax.get_title(), label, (lo, hi))
                checked += 1
    assert checked >= 15


def test_reference_lines_are_drawn_above_the_data(ds_run):
    """Where the live std sits exactly on the population reference 1, the dashed reference is drawn on top and the
    series gets markers, its legend entry saying it lies on that line."""
    from grpo_monitor.tools.reporting.plots import draw_advantages

    ax = draw_advantages(load_run(ds_run)).axes[1]
    lines = {ln.get_label().split(" (")[0]: ln for ln in ax.get_lines()}
    live = lines["grpo/adv/live_std_mean"]
    assert np.allclose(live.get_ydata(), 1.0, atol=1e-5)
    assert lines["population z-scores: 1"].get_zorder() > live.get_zorder()
    assert live.get_marker() == "o" and live.get_label().endswith("(on the line population z-scores: 1)")


def test_question_std_colour_scale_fits_the_data(ds_run):
    """The heatmap's colour bar runs from 0 to the largest share in a cell, not to 1."""
    from grpo_monitor.tools.reporting.plots import draw_question_std

    run = load_run(ds_run)
    image = draw_question_std(run).axes[0].get_images()[0]
    matrix, _ = question_std_matrix(run)
    assert image.get_clim() == pytest.approx((0.0, float(np.nanmax(matrix)))) and np.nanmax(matrix) < 0.9


def test_every_logged_metric_is_in_a_figure_or_the_table(ds_run):
    """A key the run logged is drawn or stated by a figure on the page, or listed in the other-metrics table."""
    from grpo_monitor.tools.reporting import shown_keys

    page = build_report(ds_run).read_text()
    drawn = set(re.findall(r'<figure id="fig-(\w+)">', page))
    table = set(re.findall(r"<tr><th><code>([^<]+)</code></th>", page))
    records = read_jsonl(ds_run / "monitor.jsonl")
    logged = {k for r in records for k, v in r["metrics"].items() if v is not None and np.isfinite(v)}
    constant = {k for k in logged if METRICS[k].constant is not None}  # left out of tables: check the claim
    assert constant == {"grpo/kl/k2_neg_frac", "grpo/kl/k3_neg_frac"}
    assert all(r["metrics"][k] == 0.0 for r in records for k in constant if k in r["metrics"])
    assert logged - constant <= shown_keys(drawn) | table and not table & (shown_keys(drawn) | constant)
    assert {"grpo/ratio/mean", "grpo/tokens/live_fraction", "grpo/adv/stabilizer"} <= shown_keys(drawn)


@pytest.mark.parametrize("layout,expected", [
    ({"tensorboard/events.out.tfevents.1.host": "", "wandb/offline-run-20250101_120000-abc/run-abc.wandb": ""},
     ["JSONL log", "TensorBoard", "W&B offline run"]),
    ({"tb/run1/events.out.tfevents.2.host": "", "wandb/run-20250102_000000-xyz/files/config.yaml": ""},
     ["JSONL log", "TensorBoard", "W&B run"]),
    ({"events.out.tfevents.3.host": "", "repro/step000001.pt": ""}, ["JSONL log", "TensorBoard", "Repro files"]),
    ({"notes.txt": "", "wandb/settings": ""}, ["JSONL log"]),
], ids=["demo-layout", "nested-tb-online-wandb", "events-next-to-log", "nothing-else"])
def test_where_else_to_look_detects_what_exists(tmp_path, layout, expected):
    """TensorBoard events (next to the log or in a subfolder) and W&B run folders are listed; nothing else is
    invented."""
    from grpo_monitor.tools.reporting.locations import where_else

    for name, text in layout.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    log = tmp_path / "monitor.jsonl"
    log.write_text("")
    found = where_else(log)
    assert [loc.kind for loc in found] == expected and all(loc.path.exists() for loc in found)
    tb = [loc for loc in found if loc.kind == "TensorBoard"]
    assert all(loc.how == f"tensorboard --logdir {loc.path}" and any(loc.path.glob("events.out.tfevents*"))
               for loc in tb)


def test_rebuilding_into_a_folder_drops_figures_the_run_lacks(ds_run, tmp_path):
    """plots/ matches the page: a second report without token metrics removes the stale kl.png."""
    build_report(ds_run, tmp_path)
    assert (tmp_path / "plots" / "kl.png").is_file()
    log = tmp_path / "plain.jsonl"
    with GRPOMonitor(MonitorConfig(group_size=4), sinks=[JSONLSink(log)]) as mon:
        mon.observe_rollout(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), advantages=torch.tensor([[1.0, -1.0, 1.0, -1.0]]))
        mon.end_step()
    build_report(log, tmp_path)
    assert not (tmp_path / "plots" / "kl.png").exists() and (tmp_path / "plots" / "degenerate.png").is_file()


def test_a_warning_is_shown_as_a_warning(tmp_path):
    """verl's float32 residue on a constant group (a warning): the banner and the table say warning, not a stop."""
    r = (torch.rand(16, 8, generator=torch.Generator().manual_seed(1)) < 0.5).float()
    r[3] = 0.7
    a = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)
    mon = GRPOMonitor(MonitorConfig(group_size=8, std_convention="verl.grpo"),
                      sinks=[JSONLSink(tmp_path / "monitor.jsonl")])
    with pytest.warns(RuntimeWarning, match="float32 residue"):
        for _ in range(3):
            mon.observe_rollout(r, advantages=a)
            mon.end_step()
    mon.close()
    page = build_report(tmp_path).read_text()
    assert "3 violations (3 warnings: logged, never a stop) in 3 steps; the run went on." in page
    assert "<th>severity</th>" in page and "<td>warning</td>" in page and "<td>error</td>" not in page
