"""The off-policy family's declared figure (ages, staleness drop) as the generic renderer draws it from a real log.

The run is an asynchronous loop (``offpolicy_loop.async_loop``: the real GRPOMonitor fed
policy_version and dropped=); the ages are recounted here from the versions the loop drew,
every other number is read back from the JSONL with plain json.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from grpo_monitor.tools.reporting import FIGURES, PAGE, build_report, load_run  # noqa: E402
from offpolicy_loop import async_loop  # noqa: E402
from report_pixels import hidden  # noqa: E402
from test_report_captions import captions, close, first_last  # noqa: E402
from test_report_runs import user_loop  # noqa: E402

STEPS, BIASED_FROM = 20, 12


@pytest.fixture(scope="module")
def async_run(tmp_path_factory) -> tuple[Path, str, list[torch.Tensor]]:
    """(JSONL log, report page, each step's ages as drawn) of 20 asynchronous steps, the drop biased from step 12."""
    ages: list[torch.Tensor] = []
    log = async_loop(tmp_path_factory.mktemp("async") / "monitor.jsonl", STEPS, biased_from=BIASED_FROM, ages=ages)
    return log, build_report(log).read_text(), ages


def _series(log: Path, key: str) -> np.ndarray:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return np.array([np.nan if r["metrics"].get(key) is None else float(r["metrics"][key]) for r in records])


def _figure(log: Path):
    return next(f for f in PAGE if f.name == "offpolicy").draw(load_run(log))


def test_the_figure_is_on_the_page_after_the_ratio_figure(async_run):
    """The off-policy figure has its PNG and sits where the family declares it: after the importance ratio."""
    log, page, _ = async_run
    assert '<figure id="fig-offpolicy">' in page
    png = log.parent / "plots" / "offpolicy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    names = [f.name for f in PAGE]
    assert names.index("offpolicy") == names.index("ratio") + 1


def test_the_stack_is_the_share_of_rows_at_each_age(async_run):
    """Each layer of the stacked age panel is the share of kept rows at that age, recounted from the versions drawn."""
    log, _, ages = async_run
    ax = _figure(log).axes[0]
    want = np.array([[(a.clamp(max=3) == k).double().mean().item() for k in range(4)] for a in ages])
    layers = [c for c in ax.collections if c.get_label() and not c.get_label().startswith("_")]
    shown = [k for k in range(4) if want[:, k].sum() > 0]
    assert len(layers) == len(shown)
    bottom = np.zeros(STEPS)
    for layer, k in zip(layers, shown, strict=True):
        xy = np.asarray(layer.get_paths()[0].vertices)
        top = np.array([xy[xy[:, 0] == x, 1].max() for x in range(STEPS)])  # the layer's upper edge at each step
        assert np.allclose(top - bottom, want[:, k]), k
        assert np.allclose(_series(log, f"grpo/offpolicy/age_frac_{'3plus' if k == 3 else k}"), want[:, k])
        bottom = top
    assert np.allclose(bottom, 1.0)


def test_the_drop_panel_draws_the_logged_z_and_the_flag(async_run):
    """The largest |z| is the log's drop_bias_z; the flag's lines sit at +-3.5, which the biased steps exceed."""
    log, _, _ = async_run
    ax = _figure(log).axes[2]
    (worst,) = [ln for ln in ax.get_lines() if "drop_bias_z" in ln.get_label()]
    z = _series(log, "grpo/offpolicy/drop_bias_z")
    assert np.allclose(worst.get_ydata(), z)
    flags = sorted(float(ln.get_ydata()[0]) for ln in ax.get_lines() if ln.get_transform() == ax.get_yaxis_transform())
    assert flags == [-3.5, 3.5]
    assert np.mean(z[BIASED_FROM:] > 3.5) >= 0.5 > np.mean(z[:BIASED_FROM] > 3.5)


def test_every_legend_entry_is_visible(async_run):
    """No series of the figure hides another (the pixel check of report_pixels)."""
    log, _, _ = async_run
    assert hidden(_figure(log)) == []


def test_caption_states_the_log(async_run):
    """Each 'went from A to B' of the caption equals the log's tenths' means."""
    log, page, _ = async_run
    text = " ".join(captions(page)["offpolicy"])
    for label, key in (("the mean age", "grpo/offpolicy/age_mean"),
                       ("the share of on-policy rows \\(age 0\\)", "grpo/offpolicy/age_frac_0"),
                       ("the drop's largest \\|z\\|", "grpo/offpolicy/drop_bias_z")):
        a, b = re.search(rf"{label} went from (\S+) in the first tenth of the run to (\S+) in the last tenth",
                         text, flags=re.I).groups()
        first, last = first_last(_series(log, key))
        assert close(a, first) and close(b, last), (label, a, b, first, last)


def test_a_synchronous_run_gets_neither_the_figure_nor_a_note(tmp_path):
    """Only trainers that declare versions log the family: a plain loop's page has no figure and no note about it."""
    page = build_report(user_loop(tmp_path / "monitor.jsonl", 2)).read_text()
    assert '<figure id="fig-offpolicy">' not in page and "Off-policy rows" not in page
    assert "offpolicy" not in {f.name for f in FIGURES}
