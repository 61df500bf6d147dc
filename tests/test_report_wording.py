"""How the report, the demo, ``scan`` and ``compare`` word what a run did: true wording, one formatting rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from grpo_monitor.tools.reporting import build_report  # noqa: E402
from test_report_captions import captions, check_page  # noqa: E402  (tests/ is on sys.path under pytest)


def _there_and_back(log: Path) -> Path:
    """3 steps of 2 groups of G=4 whose degenerate rate goes 0%, 50%, 0% (a constant group at step 1 only)."""
    import torch

    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks import JSONLSink

    monitor = GRPOMonitor(MonitorConfig(group_size=4, std_convention="population"), sinks=[JSONLSink(log)])
    for step in range(3):
        rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0] if step == 1 else [0.0, 1.0, 1.0, 1.0]],
                               dtype=torch.float64)
        std = rewards.std(1, keepdim=True, correction=0)
        monitor.observe_rollout(rewards, advantages=(rewards - rewards.mean(1, keepdim=True)) / (std + 1e-6))
        monitor.end_step()
    monitor.close()
    return log


def test_equal_ends_around_a_move_do_not_read_stayed(tmp_path):
    """A rate at 0% at the first and the last step and 50% between is not "stayed at 0.0%": the caption names the
    range, and the checker refuses the "stayed" wording for it."""
    log = _there_and_back(tmp_path / "monitor.jsonl")
    page = build_report(log).read_text()
    check_page(page, log)
    said = ("The degenerate rate of the training batch was 0.0% at the first step and at the last step, ranging "
            "from 0.0% to 50.0% over the run.")
    assert said in captions(page)["degenerate"], captions(page)["degenerate"]
    bad = page.replace(said[:-1].split(" was ")[0] + " was 0.0% at the first step and at the last step, ranging "
                       "from 0.0% to 50.0% over the run",
                       "The degenerate rate of the training batch stayed at 0.0% from the first step to the last step")
    assert bad != page
    with pytest.raises(AssertionError):
        check_page(bad, log)


def _weighted_loop(log: Path, steps: int = 3) -> Path:
    """A plain loop of 4 groups of G=4 whose loss weights are derived from a declared token_mean aggregation."""
    import torch

    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.sinks import JSONLSink

    gen = torch.Generator().manual_seed(0)
    monitor = GRPOMonitor(MonitorConfig(group_size=4, std_convention="population", loss_aggregation="token_mean"),
                          sinks=[JSONLSink(log)])
    for _ in range(steps):
        rewards = (torch.rand(4, 4, generator=gen, dtype=torch.float64) < 0.5).double()
        std = rewards.std(1, keepdim=True, correction=0)
        adv = (rewards - rewards.mean(1, keepdim=True)) / (std + 1e-6)
        monitor.observe_rollout(rewards, advantages=adv, question_ids=[0, 1, 2, 3])
        lengths = torch.randint(3, 9, (16,), generator=gen)
        mask = (torch.arange(8)[None, :] < lengths[:, None]).double()
        monitor.observe_loss(mask=mask, advantages=adv.reshape(-1, 1) * mask,
                             logprobs=-torch.rand(16, 8, generator=gen, dtype=torch.float64))
        monitor.end_step()
    monitor.close()
    return log


def test_weights_figure_ticks_read_as_plain_numbers(tmp_path):
    """The loss-weights figure: log axes labelled 3, 0.5 (no 4x10^0 or 6e-01), whole questions on the count axis,
    and the legend above every bar."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from grpo_monitor.tools.reporting import FIGURES, load_run

    run = load_run(_weighted_loop(tmp_path / "monitor.jsonl"))
    fig = next(f for f in FIGURES if f.name == "weights").draw(run)
    assert fig is not None, "no weights figure"
    FigureCanvasAgg(fig).draw()
    left, right = fig.axes[:2]
    labels = [t.get_text() for axis in (left.xaxis, left.yaxis) for t in axis.get_ticklabels(which="both")]
    shown = [t for t in labels if t]
    assert len(shown) >= 4 and all(re.fullmatch(r"\d+(\.\d+)?", t) for t in shown), shown
    counts = [t.get_text().replace("\u2212", "-") for t in right.yaxis.get_ticklabels() if t.get_text()]
    assert counts and all(re.fullmatch(r"\d+", t) for t in counts), counts
    legend = right.get_legend().get_window_extent()
    bars = [p.get_window_extent() for p in right.patches if p.get_height() > 0]
    assert bars and not [b for b in bars if b.overlaps(legend)], "the legend covers a bar"


@pytest.mark.parametrize("steps", [1, 3, 12], ids=["1-step", "3-steps", "12-steps"])
def test_demo_summary_heads_its_columns_as_the_report(tmp_path, steps):
    """The demo's printed table is headed with the report's start/end wording for the same steps (one column for
    1 step), every value right-aligned under its header, and "1 step", not "1 steps"."""
    import html

    from grpo_monitor.tools.demo import DemoConfig, run_demo
    from grpo_monitor.tools.demo.summary import summary_text

    result = run_demo(DemoConfig(steps=steps), tmp_path, wandb=False, tensorboard=False, progress=False,
                      report=False)
    lines = summary_text(result).splitlines()
    assert lines[0].startswith(f"grpo-monitor demo: {steps} step{'s' if steps > 1 else ''} in "), lines[0]
    page = build_report(tmp_path / "monitor.jsonl").read_text()
    table = re.search(r'<table id="summary">\s*<tr><th></th>(.*?)</tr>', page, flags=re.S)[1]
    headers = [html.unescape(h).replace("\u2013", "-") for h in re.findall(r"<th>([^<]+)</th>", table)]
    assert len(headers) == (1 if steps == 1 else 2)
    ends = [lines[1].index(h) + len(h) for h in headers]  # each header's right edge
    rows = lines[2:next(i for i, line in enumerate(lines) if line.startswith("Degenerate groups over"))]
    assert len(rows) >= 5 and lines[1].split() == " ".join(headers).split(), (lines[1], headers)
    for row in rows:
        cells = [m.end() for m in re.finditer(r"(?<= )(n/a|[-+]?\d[\d.]*%?)(?=  |$)", row)][:len(headers)]
        assert cells == ends, (row, ends)


def test_kl_panel_titles_name_what_they_draw(tmp_path):
    """The KL figure's lower panel is titled by the series it draws: k2 alone for a loop without kl=, k2 and the
    loss's KL for the demo (which passes kl=)."""
    from grpo_monitor.tools.demo import DemoConfig, run_demo
    from grpo_monitor.tools.reporting import FIGURES, load_run
    from test_report_runs import user_loop

    draw = next(f for f in FIGURES if f.name == "kl").draw
    loop = load_run(user_loop(tmp_path / "loop" / "monitor.jsonl", 3))
    assert not loop.has("grpo/kl/user_mean")
    assert draw(loop).axes[1].get_title(loc="left") == "k2 = u^2/2, as its difference to k3"
    run_demo(DemoConfig(steps=3), tmp_path / "demo", wandb=False, tensorboard=False, progress=False, report=False)
    demo = load_run(tmp_path / "demo" / "monitor.jsonl")
    assert draw(demo).axes[1].get_title(loc="left") == "k2 = u^2/2 and the KL your loss uses, as their difference to k3"


def test_report_help_names_every_figure():
    """`grpo-monitor report --help` lists every figure the report can draw, by its title."""
    import argparse

    from grpo_monitor.tools.cli import build_parser
    from grpo_monitor.tools.reporting import FIGURES

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    described = " ".join(sub.choices["report"].description.split()).lower()
    missing = [f.title for f in FIGURES if f.title.split(":")[0].lower() not in described]
    assert missing == [], missing
