"""TensorBoardSink: scalars, histograms, violation text and the custom-scalars layout, read back."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.custom_scalar import layout_pb2  # noqa: E402

from grpo_monitor.catalog.metrics import METRICS  # noqa: E402
from grpo_monitor.sinks import TensorBoardSink  # noqa: E402
from grpo_monitor.sinks.layout import KNOWN_KEYS, section_of  # noqa: E402
from grpo_monitor.sinks.tensorboard_sink import custom_scalars_layout  # noqa: E402

SECTIONS = ["Groups", "Advantages", "KL", "Mismatch", "Entropy", "Sampling", "Invariants", "Tokens", "Weights",
            "Monitor", "Integrations", "Health"]
_KEEP_ALL = {k: 0 for k in ("compressedHistograms", "images", "audio", "scalars", "histograms", "tensors")}


def _read(log_dir) -> EventAccumulator:
    acc = EventAccumulator(str(log_dir), size_guidance=_KEEP_ALL)
    acc.Reload()
    return acc


def _layout(acc) -> layout_pb2.Layout:
    events = acc.Tensors("custom_scalars__config__")
    layout = layout_pb2.Layout()
    layout.ParseFromString(events[-1].tensor_proto.string_val[0])
    return layout


def _write(tmp_path, reports) -> EventAccumulator:
    sink = TensorBoardSink(tmp_path / "tb")
    for report in reports:
        sink.log_report(report)
    sink.finish()
    return _read(tmp_path / "tb")


def test_construction_has_no_side_effects(tmp_path):
    """Constructing the sink creates no directory or event file."""
    TensorBoardSink(tmp_path / "tb")
    assert not (tmp_path / "tb").exists()


def test_scalars_are_written_under_their_keys(tmp_path, make_report):
    """Every metric is a scalar series under its grpo/... key, one point per step."""
    reports = [make_report(step) for step in range(3)]
    reports[1].metrics["grpo/ratio/mean"] = float("nan")
    acc = _write(tmp_path, reports)
    assert set(KNOWN_KEYS) <= set(acc.Tags()["scalars"])
    for key in ("grpo/groups/degenerate_rate", "grpo/kl/k3_mean", "grpo/invariants/violations"):
        events = acc.Scalars(key)
        assert [e.step for e in events] == [0, 1, 2]
        assert [e.value for e in events] == pytest.approx([r.metrics[key] for r in reports], rel=1e-6)
    assert math.isnan(acc.Scalars("grpo/ratio/mean")[1].value)


def test_histograms_keep_every_step(tmp_path, make_report):
    """Per-question reward std and advantages are histograms, one per step, NaN dropped."""
    reports = [make_report(step) for step in range(4)]
    reports[2].histograms["grpo/adv/values"] += [float("nan"), float("inf")]
    reports[3].histograms["grpo/reward/question_std"] = []  # nothing to bin: skipped
    acc = _write(tmp_path, reports)
    adv = acc.Histograms("grpo/adv/values")
    assert [h.step for h in adv] == [0, 1, 2, 3]
    assert all(h.histogram_value.num == 16 for h in adv)
    assert [h.step for h in acc.Histograms("grpo/reward/question_std")] == [0, 1, 2]
    assert acc.Histograms("grpo/reward/question_std")[1].histogram_value.max == pytest.approx(0.15)


def test_violations_are_written_as_text(tmp_path, make_report, make_violation):
    """A step with violations gets their messages as markdown text under grpo/violations."""
    acc = _write(tmp_path, [make_report(0), make_report(1, violations=[make_violation(1)], failed=True)])
    events = acc.Tensors("grpo/violations/text_summary")
    assert [e.step for e in events] == [1]
    text = events[0].tensor_proto.string_val[0].decode()
    assert "zero_group_mean" in text and "step 1" in text and "stopped by a breach" in text


def test_custom_scalars_layout_charts_every_catalogued_scalar(tmp_path, make_report):
    """The layout has the catalogue's sections; each chart holds keys of its section, every scalar once."""
    layout = _layout(_write(tmp_path, [make_report(0)]))
    assert [c.title for c in layout.category] == SECTIONS
    charted = []
    for category in layout.category:
        for chart in category.chart:
            keys = [tag.strip("^$").replace("\\", "") for tag in chart.multiline.tag]
            assert {section_of(k) for k in keys} == {METRICS[k].section for k in keys} == {category.title}, chart.title
            charted.extend(keys)
    assert sorted(charted) == sorted(k for k, m in METRICS.items() if m.kind == "scalar") == sorted(KNOWN_KEYS)
    groups = {c.title: list(c.multiline.tag) for c in layout.category[0].chart}
    assert groups["degenerate rate: observed vs iid-predicted"] == [
        "^grpo/groups/degenerate_rate$", "^grpo/groups/degenerate_rate_iid$"]


def test_layout_is_rewritten_when_a_new_key_appears(tmp_path, make_report):
    """A sectioned key outside the layout (a new invariant) is added by a rewrite."""
    later = make_report(1)
    later.metrics["grpo/invariants/brand_new"] = 1.0
    layout = _layout(_write(tmp_path, [make_report(0), later]))
    invariants = next(c for c in layout.category if c.title == "Invariants")
    assert any("^grpo/invariants/brand_new$" in c.multiline.tag for c in invariants.chart)


def test_layout_of_a_subset_keeps_combined_charts_and_the_catalogue_order():
    """A combined chart keeps the keys present; an integration's own key goes to Integrations."""
    layout = custom_scalars_layout(["grpo/trl/frac_reward_zero_std", "grpo/kl/k3_mean", "grpo/kl/k1_mean"])
    assert layout == {
        "KL": {"KL estimators: mean": ["Multiline", ["^grpo/kl/k1_mean$", "^grpo/kl/k3_mean$"]]},
        "Integrations": {"grpo/trl/frac_reward_zero_std": ["Multiline", ["^grpo/trl/frac_reward_zero_std$"]]},
    }


def test_layout_function_anchors_tags():
    """Tags are anchored regexes so a key never matches a longer key."""
    layout = custom_scalars_layout(["grpo/groups/total", "grpo/tokens/valid", "other/key"])
    assert layout == {
        "Groups": {"grpo/groups/total": ["Multiline", ["^grpo/groups/total$"]]},
        "Tokens": {"grpo/tokens/valid": ["Multiline", ["^grpo/tokens/valid$"]]},
    }
