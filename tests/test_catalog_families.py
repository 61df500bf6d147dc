"""A metric family is one record: its keys are catalogued once, its readout emits only them, its figure and scan rows
are what the report and the scan use."""

from __future__ import annotations

import math

import pytest

from grpo_monitor.catalog.families import DECLARED_FIGURES, FAMILIES, TREND_ROWS
from grpo_monitor.catalog.family import Family, FigureSpec, Panel, Readout, read_out
from grpo_monitor.catalog.family_offpolicy import age_metrics, drop_metrics
from grpo_monitor.catalog.metrics import METRICS
from grpo_monitor.stats import drop_bias, staleness
from grpo_monitor.stats.tokens import readout


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_record_is_in_the_catalogue_once(family):
    """Every record a family declares is the catalogue's entry for its key."""
    for m in family.metrics:
        assert METRICS[m.key] is m
    assert len({m.key for m in family.metrics}) == len(family.metrics)


def test_no_two_families_share_a_key():
    """A key belongs to one family."""
    keys = [m.key for f in FAMILIES for m in f.metrics]
    assert len(keys) == len(set(keys))


def test_the_ages_read_out_as_counted():
    """age_* from the rollout slots, against a hand count of ages (0, 1, 1, 5): mean 1.75, min 0, max 5."""
    v = {"age_rows": 4.0, "age_sum": 7.0, "age_max": 5.0, "age_min": 0.0, "age_0": 1.0, "age_1": 2.0, "age_2": 0.0,
         "age_3": 1.0}
    got = read_out(FAMILIES, "rollout", v)
    assert got == {"grpo/offpolicy/age_mean": 1.75, "grpo/offpolicy/age_max": 5.0, "grpo/offpolicy/age_frac_0": 0.25,
                   "grpo/offpolicy/age_frac_1": 0.5, "grpo/offpolicy/age_frac_2": 0.0,
                   "grpo/offpolicy/age_frac_3plus": 0.25, "grpo/offpolicy/age_min": 0.0}
    assert read_out(FAMILIES, "rollout", {**v, "age_rows": 0.0}) == {}


def test_the_entropy_reads_out_its_population_moments():
    """grpo/entropy/{mean,std} of entropies (0, 1, 1, 2): mean 1, population std sqrt(0.5)."""
    got = read_out(FAMILIES, "tokens", {"ent_tokens": 4.0, "ent_sum": 4.0, "ent_sq_sum": 6.0, "seq_rows": 0.0})
    assert got == {"grpo/entropy/mean": 1.0, "grpo/entropy/std": math.sqrt(0.5)}


def test_old_import_paths_are_the_family_readouts():
    """The stats modules' old names are the family's functions (one home)."""
    assert staleness.age_metrics is age_metrics and drop_bias.drop_metrics is drop_metrics
    assert readout.seq_ratio_metrics is FAMILIES[0].readouts[2].compute


def test_a_family_refuses_a_figure_of_keys_it_does_not_catalogue():
    """A figure or a trend row naming a key outside the family is an error when the family is built."""
    fig = FigureSpec("x", "X", (Panel("lines", ("grpo/other/key",), "t", "u"),), "c", (), after="ratio")
    with pytest.raises(ValueError, match="draws keys it does not catalogue"):
        Family("x", (), figures=(fig,))
    with pytest.raises(ValueError, match="reads vector 'nowhere'"):
        Family("x", (), readouts=(Readout("nowhere", "", dict),))


def test_the_report_and_the_scan_use_the_declared_figures_and_rows():
    """Every declared figure is on the report's page, drawn by the generic renderer; the scan's trends end with the
    families' rows."""
    pytest.importorskip("matplotlib")
    from grpo_monitor.tools.reporting import PAGE
    from grpo_monitor.tools.scan.summary import TRENDS

    by_name = {f.name: f for f in PAGE}
    for spec in DECLARED_FIGURES:
        drawn = by_name[spec.name]
        assert drawn.keys == spec.keys and drawn.draw.func.__module__ == "grpo_monitor.tools.reporting.declared"
    assert TRENDS[-len(TREND_ROWS):] == TREND_ROWS
