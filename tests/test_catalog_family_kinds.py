"""The family record's parts the ported families need: histogram readouts, a readout of a setting and heat maps of
histogram keys only, each against a hand count (the settings-valued levels are checked on real reports,
tests/test_report_sampler.py's threshold test)."""

from __future__ import annotations

import pytest

from grpo_monitor.catalog.families import FAMILIES, IN_ORDER
from grpo_monitor.catalog.family import Family, FigureSpec, Panel, read_histograms, read_out
from grpo_monitor.catalog.family_mismatch import MISMATCH
from grpo_monitor.catalog.family_moe import MOE
from grpo_monitor.catalog.record import metric


def _routing(pairs: list[float], match: list[float]) -> dict[str, float]:
    v = {"moe_given": sum(pairs), "moe_fallback": 0.0, "moe_pairs": sum(pairs), "moe_match": sum(match),
         "moe_overlap": sum(match), "moe_slots": sum(pairs), "moe_layers": float(len(pairs))}
    for i in range(128):
        v[f"moe_pairs_{i}"] = pairs[i] if i < len(pairs) else 0.0
        v[f"moe_match_{i}"] = match[i] if i < len(match) else 0.0
    return v


@pytest.mark.parametrize("pairs, match, want", [
    ([4.0, 4.0, 2.0], [4.0, 1.0, 2.0], [1.0, 0.25, 1.0]),
    ([4.0, 0.0, 2.0], [3.0, 0.0, 1.0], [0.75, 0.5]),  # a layer without a compared pair is left out
], ids=["every-layer", "a-layer-without-pairs"])
def test_moe_histogram_is_the_per_layer_share(pairs, match, want):
    """grpo/moe/agreement_by_layer lists matched / compared pairs per layer, in layer order; the worst is its min."""
    v = _routing(pairs, match)
    assert read_histograms(IN_ORDER, "routing", v) == {"grpo/moe/agreement_by_layer": want}
    assert read_out([MOE], "routing", v)["grpo/moe/agreement_layer_min"] == min(want)
    assert read_histograms(IN_ORDER, "routing", {**v, "moe_given": 0.0}) == {}


@pytest.mark.parametrize("mask, want", [
    (None, set()),
    ("token", {"grpo/mismatch/masked_frac": 1 / 4, "grpo/mismatch/masked_ess": 3.0 ** 2 / (4 * 3.0)}),
    ("sequence", {"grpo/mismatch/masked_frac": 1 / 2, "grpo/mismatch/masked_ess": 1.0 ** 2 / (2 * 1.0)}),
], ids=["unset", "token", "sequence"])
def test_the_masked_readout_follows_the_setting(mask, want):
    """masked_frac / masked_ess appear only under mismatch_mask and count its level: 4 tokens with 1 masked (3 kept
    at weight 1), 2 rows with 1 masked."""
    v = {"mm_tokens": 4.0, "mm_outside": 1.0, "mm_kept_rho_sum": 3.0, "mm_kept_rho_sq_sum": 3.0, "mm_rows": 2.0,
         "mm_seq_outside": 1.0, "mm_seq_kept_w_sum": 1.0, "mm_seq_kept_w_sq_sum": 1.0}
    masked = [r for r in MISMATCH.readouts if r.setting == "mismatch_mask"]
    got = read_out([Family("m", (), readouts=tuple(masked))], "tokens", v, {"mismatch_mask": mask})
    assert got == (want or {})


def test_a_heat_map_draws_one_histogram_key():
    """A heat map of a scalar key is refused when the family is built."""
    scalar = metric("grpo/x/s", "fraction", "ratio", "mean", "A scalar.", section="Mismatch", source="observe_loss")
    fig = FigureSpec("x", "X", (Panel("heatmap", ("grpo/x/s",), "t", "u"),), "c", (), after="ratio")
    with pytest.raises(ValueError, match="a heat map draws one histogram key"):
        Family("x", (scalar,), figures=(fig,))


@pytest.mark.parametrize("kind,keys", [("scatter", ("grpo/x/h",)), ("scatter", ("grpo/x/h", "grpo/x/s")),
                                       ("histogram", ("grpo/x/s",))],
                         ids=["scatter-one-key", "scatter-scalar", "hist-scalar"])
def test_a_pooled_panel_draws_histogram_keys(kind, keys):
    """A scatter needs two histogram keys and a pooled histogram one: anything else is refused when the family is
    built."""
    kw = dict(section="Mismatch", source="observe_loss")
    records = (metric("grpo/x/s", "fraction", "ratio", "mean", "A scalar.", **kw),
               metric("grpo/x/h", "tokens", "ratio", "per step", "A list.", kind="histogram", **kw))
    fig = FigureSpec("x", "X", (Panel(kind, keys, "t", "u"),), "c", (), after="ratio")
    with pytest.raises(ValueError, match="a scatter two"):
        Family("x", records, figures=(fig,))


def test_in_order_holds_every_family_once():
    """The catalogue order lists the families FAMILIES declares, each once."""
    assert sorted(f.name for f in IN_ORDER) == sorted(f.name for f in FAMILIES)
    assert len({f.name for f in IN_ORDER}) == len(IN_ORDER)

