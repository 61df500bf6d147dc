"""The sampler's families (mismatch, entropy, truncation, the degenerate split) where users look: W&B and TensorBoard.

A real monitor observes three steps of sampler and trainer log-probs (a bfloat16 path of the
same logits, tokens sampled from it), entropies, truncation flags and rewards with solved,
unsolved and live groups, and writes to an offline W&B run and TensorBoard event files; both
are read back from their files and every new key is compared with its float64 recomputation
(``tests/sampler_references.py``). The dashboards' layouts (TensorBoard custom scalars, the
W&B workspace) chart the families in their sections.
"""

from __future__ import annotations

import glob

import pytest
import torch

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.plugins.custom_scalar import layout_pb2  # noqa: E402

from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from grpo_monitor.sinks import TensorBoardSink, WandbSink  # noqa: E402
from grpo_monitor.sinks import wandb_reader as R  # noqa: E402
from sampler_references import mismatch_reference, split_reference  # noqa: E402

G, GROUPS, T, VOCAB, STEPS = 4, 6, 12, 32, 3
SPLIT_PANEL = "degenerate groups: unsolved / solved / other"
PANELS = {  # section -> (chart title, its keys): the combined charts of the new families
    "Mismatch": ("mismatch KL: k1 and k3", ["grpo/mismatch/k1_mean", "grpo/mismatch/k3_mean"]),
    "Entropy": ("entropy: mean and std", ["grpo/entropy/mean", "grpo/entropy/std"]),
    "Groups": (SPLIT_PANEL, ["grpo/groups/degenerate_low_rate", "grpo/groups/degenerate_high_rate",
                             "grpo/groups/degenerate_other_rate"]),
}


def step_inputs(step: int) -> dict[str, torch.Tensor]:
    """One step's rollout and token tensors: groups all-failed, all-solved and live; some rows at the length limit."""
    gen = torch.Generator().manual_seed(step)
    counts = [0, G, 0] + [1 + (k + step) % (G - 1) for k in range(GROUPS - 3)]
    rewards = torch.stack([(torch.randperm(G, generator=gen) < c).float() for c in counts])
    lengths = torch.randint(2, T + 1, (GROUPS * G,), generator=gen)
    lengths[: G] = T  # the first all-failed group is cut at the limit
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    logits = 4.0 * torch.randn(GROUPS * G, T, VOCAB, generator=gen)
    sampler_logits = logits.to(torch.bfloat16).float()
    tokens = torch.multinomial(torch.softmax(sampler_logits, -1).reshape(-1, VOCAB), 1, generator=gen)
    tokens = tokens.reshape(GROUPS * G, T, 1)
    logp = torch.log_softmax(logits, -1)
    entropy = -(logp.exp() * logp).sum(-1)
    entropy[:, :2] = 0.001  # near-deterministic first tokens: grpo/entropy/low_frac
    sampler = torch.log_softmax(sampler_logits, -1).gather(-1, tokens).squeeze(-1)
    # float64 from here: this test is about what reaches the files, not the kernel's float32 rounding
    return {"rewards": rewards, "truncated": lengths == T, "mask": mask, "entropy": entropy.double(),
            "logprobs": logp.gather(-1, tokens).squeeze(-1).double(), "sampler": sampler.double()}


def expected(x: dict[str, torch.Tensor]) -> dict[str, float]:
    """Every sampler-side key of one step, in float64 from its definition."""
    out = mismatch_reference(x["mask"].numpy(), x["sampler"].numpy(), logprobs=x["logprobs"].numpy(),
                             entropy=x["entropy"].numpy())
    out.update(split_reference(x["rewards"].numpy(), x["truncated"].numpy().reshape(GROUPS, G)))
    return out


@pytest.fixture
def written(tmp_path, wandb_offline):
    """Three monitored steps written to an offline W&B run and TensorBoard; (expected per step, W&B rows, TB,
    the monitor's reports)."""
    sinks = [WandbSink(project="sampler"), TensorBoardSink(tmp_path / "tb")]
    mon = GRPOMonitor(MonitorConfig(group_size=G), sinks=sinks)
    steps, reports = [], []
    with mon:
        for step in range(STEPS):
            x = step_inputs(step)
            mon.observe_rollout(x["rewards"], truncated=x["truncated"])
            mon.observe_loss(mask=x["mask"], logprobs=x["logprobs"], sampler_logprobs=x["sampler"],
                             entropy=x["entropy"])
            report = mon.end_step()
            assert report.violations == [], report.violations
            steps.append(expected(x))
            reports.append(report)
    files = glob.glob(str(wandb_offline / "wandb" / "offline-run-*" / "*.wandb"))
    assert len(files) == 1, files
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return steps, R.history_rows(R.wait_for_exit(files[0])), acc, reports


def test_every_new_key_reaches_wandb_with_its_float64_value(written):
    """Each step's W&B history row holds every mismatch, entropy, truncation and split key: exactly what the
    monitor reported, and equal to float64."""
    steps, rows, _, reports = written
    assert [row["grpo/step"] for row in rows] == list(range(STEPS))
    for row, want, report in zip(rows, steps, reports, strict=True):
        assert len(want) == 22  # 13 mismatch, 4 entropy, truncation and 4 split keys
        for key, value in want.items():
            assert row[key] == report.metrics[key], key
            assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_every_new_key_reaches_tensorboard_with_its_float64_value(written):
    """Each new key is a TensorBoard scalar series, one point per step, equal to float64 (to float32 precision)."""
    steps, _, acc, _ = written
    for key in steps[0]:
        events = acc.Scalars(key)
        assert [e.step for e in events] == list(range(STEPS)), key
        assert [e.value for e in events] == pytest.approx([s[key] for s in steps], rel=1e-6, abs=1e-7), key


def test_the_values_are_the_interesting_ones(written):
    """The batch exercises the families: both kinds of degenerate group, truncated groups, low-entropy tokens."""
    first = written[0][0]
    assert first["grpo/groups/degenerate_low_rate"] == pytest.approx(2 / GROUPS)
    assert first["grpo/groups/degenerate_high_rate"] == pytest.approx(1 / GROUPS)
    assert first["grpo/groups/degenerate_truncated_rate"] == pytest.approx(1 / GROUPS)
    assert 0 < first["grpo/entropy/low_frac"] < 1 and 0 < first["grpo/mismatch/k3_mean"] < 1e-3


def test_tensorboard_layout_charts_the_new_families(written):
    """The custom-scalars layout written with the run has the families' combined charts and truncation charts."""
    acc = written[2]
    layout = layout_pb2.Layout()
    layout.ParseFromString(acc.Tensors("custom_scalars__config__")[-1].tensor_proto.string_val[0])
    charts = {c.title: {ch.title: [t.strip("^$") for t in ch.multiline.tag] for ch in c.chart}
              for c in layout.category}  # tags are anchored regexes
    for section, (title, keys) in PANELS.items():
        assert charts[section][title] == keys, (section, charts[section])
    assert "grpo/rows/truncated_rate" in charts["Groups"]
    assert "grpo/groups/degenerate_truncated_rate" in charts["Groups"]
    assert {"grpo/mismatch/ratio_mean", "grpo/mismatch/ratio_min", "grpo/mismatch/ratio_max"} <= {
        k for keys in charts["Mismatch"].values() for k in keys}


def test_wandb_workspace_has_the_new_families_panels():
    """The saved W&B workspace's Mismatch, Entropy and Groups sections plot the families, on grpo/step."""
    pytest.importorskip("wandb_workspaces")
    from grpo_monitor.sinks.wandb_workspace import build_workspace

    sections = {s.name: [list(p.y) for p in s.panels if type(p).__name__ == "LinePlot"]
                for s in build_workspace("e", "p").sections}
    for section, (_, keys) in PANELS.items():
        assert keys in sections[section], (section, sections[section])
    assert ["grpo/rows/truncated_rate"] in sections["Groups"]
    assert ["grpo/entropy/sampled_nll_mean"] in sections["Entropy"]
    assert ["grpo/mismatch/ratio_mean_z"] in sections["Mismatch"]
