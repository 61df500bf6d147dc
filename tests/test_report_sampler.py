"""The sampler-side figures (mismatch, truncation and the degenerate split, entropy) of a real monitor's log.

The run is the ``sampler-side`` variant of ``test_report_runs`` (the real GRPOMonitor fed
sampler_logprobs, entropy and truncated=); every number is recomputed here from the JSONL
with plain json and numpy. ``test_report_captions`` checks each caption statement and
``test_report_browser`` each legend entry's pixels on the same variant.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from grpo_monitor.tools.reporting import FIGURES, build_report, load_run  # noqa: E402
from test_report_captions import captions, close, first_last  # noqa: E402
from test_report_runs import VARIANTS, user_loop  # noqa: E402


@pytest.fixture(scope="module")
def sampler_run(tmp_path_factory) -> tuple[Path, str]:
    """(JSONL log, report page) of 15 steps with sampler log-probs, entropies and truncated rows."""
    log = VARIANTS["sampler-side"](tmp_path_factory.mktemp("sampler"))
    return log, build_report(log).read_text()


def _series(log: Path, key: str) -> np.ndarray:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return np.array([np.nan if r["metrics"].get(key) is None else float(r["metrics"][key]) for r in records])


def test_each_sampler_figure_has_its_png(sampler_run):
    """The mismatch, split and entropy figures are on the page with a non-empty PNG each."""
    log, page = sampler_run
    for name in ("mismatch", "split", "entropy"):
        assert f'<figure id="fig-{name}">' in page
        png = log.parent / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_mismatch_caption_states_the_log_and_the_declared_threshold(sampler_run):
    """The caption's k3 and mean weight equal the log's tenths' means; the threshold is the run's declared 0.05."""
    log, page = sampler_run
    text = " ".join(captions(page)["mismatch"])
    assert "mismatch_k3 = 0.05 nats (this run's config)" in text and "+-0.02" in text
    for label, key in (("the mismatch KL k3 per token", "grpo/mismatch/k3_mean"),
                       ("the mean token importance weight", "grpo/mismatch/ratio_mean")):
        a, b = re.search(rf"{label} went from (\S+) in the first tenth of the run to (\S+) in the last tenth",
                         text, flags=re.I).groups()
        first, last = first_last(_series(log, key))
        assert close(a, first) and close(b, last), (label, a, b, first, last)


def test_threshold_drawn_is_the_config_or_the_default(sampler_run, tmp_path):
    """The red line sits at the run record's mismatch_k3 (0.05 here), and at the default 0.02 without a record."""
    log, _ = sampler_run
    spec = next(f for f in FIGURES if f.name == "mismatch")
    run = load_run(log)
    assert run.config["tolerances"]["mismatch_k3"] == 0.05

    def red_line(run) -> float:
        fig = spec.draw(run)
        (ref,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("error threshold")]
        return float(ref.get_ydata()[0])

    assert red_line(run) == 0.05
    bare = tmp_path / "monitor.jsonl"  # the same steps with the run record (config) left out
    bare.write_text("".join(line + "\n" for line in log.read_text().splitlines()
                            if line.strip() and "run" not in json.loads(line)))
    bare_run = load_run(bare)
    assert bare_run.config == {} and red_line(bare_run) == 0.02


def test_the_stacked_split_adds_up_to_the_degenerate_rate(sampler_run):
    """The stack's top is grpo/groups/degenerate_rate at every step, and the truncated line is the log's rate."""
    log, _ = sampler_run
    fig = next(f for f in FIGURES if f.name == "split").draw(load_run(log))
    ax = fig.axes[0]
    top = np.max([np.asarray(c.get_paths()[0].vertices)[:, 1].max() for c in ax.collections])
    assert close(f"{top:.6f}", float(np.nanmax(_series(log, "grpo/groups/degenerate_rate"))))
    (trunc,) = [ln for ln in ax.get_lines() if "truncated_rate" in ln.get_label()]
    assert np.allclose(trunc.get_ydata(), _series(log, "grpo/rows/truncated_rate"))
    parts = sum(np.nan_to_num(_series(log, f"grpo/groups/degenerate_{k}_rate")) for k in ("low", "high", "other"))
    assert np.allclose(parts, _series(log, "grpo/groups/degenerate_rate"))


def test_entropy_band_is_mean_plus_minus_std(sampler_run):
    """The entropy band spans mean -+ std of the log at every step."""
    log, _ = sampler_run
    fig = next(f for f in FIGURES if f.name == "entropy").draw(load_run(log))
    band = fig.axes[0].collections[0].get_paths()[0].vertices[:, 1]
    mean, std = _series(log, "grpo/entropy/mean"), _series(log, "grpo/entropy/std")
    assert np.isclose(band.min(), np.min(mean - std)) and np.isclose(band.max(), np.max(mean + std))


def test_runs_without_sampler_inputs_get_notes_not_figures(tmp_path):
    """Without sampler_logprobs or entropy the page has notes naming observe_loss and its argument."""
    page = build_report(user_loop(tmp_path / "monitor.jsonl", 2)).read_text()
    assert '<figure id="fig-mismatch">' not in page and '<figure id="fig-entropy">' not in page
    assert re.search(r"Training-inference mismatch: no data in this run\. Logged when you call observe_loss with "
                     r"sampler_logprobs", page)
    assert re.search(r"Entropy: no data in this run\. Logged when you call observe_loss with entropy", page)
    assert "This log has no truncation rate" in page
