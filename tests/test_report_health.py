"""The report opens with a Run health panel: status, each finding with its evidence plot and remedies, the
question-export command; from the live run's `health` records, or recomputed for a log written without them.
Checked in headless Chromium (the DOM after load, and a screenshot whose evidence plot shows the shaded steps)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from grpo_monitor import GRPOMonitor, MonitorConfig  # noqa: E402
from grpo_monitor.sinks import JSONLSink  # noqa: E402
from grpo_monitor.tools.reporting import build_report  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
G, B, STEPS = 4, 6, 8


def saturated_loop(log: Path, saturated_from: int = 2) -> Path:
    """A plain loop whose groups all reach the top reward from ``saturated_from`` on (a verifier that always passes)."""
    gen = torch.Generator().manual_seed(0)
    monitor = GRPOMonitor(MonitorConfig(group_size=G, std_convention="population"), sinks=[JSONLSink(log)])
    for step in range(STEPS):
        rewards = torch.ones(B, G, dtype=torch.float64) if step >= saturated_from else \
            (torch.rand(B, G, generator=gen, dtype=torch.float64) < 0.5).double()
        std = rewards.std(1, keepdim=True, correction=0)
        adv = (rewards - rewards.mean(1, keepdim=True)) / (std + 1e-6)
        monitor.observe_rollout(rewards, advantages=adv, question_ids=list(range(B)))
        monitor.end_step(step=step)
    monitor.close()
    return log


def _strip_health(log: Path, out: Path) -> Path:
    """The same log as a writer before run health would have written it: no `health` field, no grpo/health/ key."""
    lines = []
    for line in log.read_text().splitlines():
        record = json.loads(line)
        record.pop("health", None)
        record["metrics"] = {k: v for k, v in record["metrics"].items() if not k.startswith("grpo/health/")}
        lines.append(json.dumps(record))
    out.write_text("\n".join(lines) + "\n")
    return out


def _panel(page: str) -> str:
    return re.search(r'<section id="run-health">(.*?)</section>', page, flags=re.S)[1]


def _degenerate_steps(log: Path) -> list[int]:
    """Steps whose every group is degenerate, read from the log's metrics (the evidence the finding names)."""
    return [r["step"] for r in map(json.loads, log.read_text().splitlines())
            if r["metrics"].get("grpo/groups/degenerate_rate") == 1.0]


@pytest.mark.parametrize("recorded", [True, False], ids=["live-records", "old-log-recomputed"])
def test_the_panel_opens_the_report_with_the_finding(tmp_path, recorded):
    """The panel comes before everything else, names degenerate_dominated with its remedies, evidence and plot,
    and the question export; an old log gets the same finding from the tracker, said to be recomputed."""
    log = saturated_loop(tmp_path / "monitor.jsonl")
    if not recorded:
        log = _strip_health(log, tmp_path / "old.jsonl")
    page = build_report(log, tmp_path / "out").read_text()
    assert page.index('id="run-health"') < page.index('id="status"') < page.index("<h2>Summary</h2>")
    panel = _panel(page)
    assert 'class="status fail" id="health-status"' in panel and "Run health: stalled" in panel
    assert ("as the run saw them" in panel) is recorded and ("recomputed from the log" in panel) is not recorded
    finding = re.search(r'<div class="finding" id="finding-degenerate_dominated">(.*?)</div>', panel, re.S)[1]
    opened = int(re.search(r"open since step (\d+)", finding)[1])
    assert opened == _degenerate_steps(log)[0] + 2  # patience 3: the third all-degenerate step
    assert "100% saturated" in finding and "<b>Remedies</b>" in finding
    assert '<svg class="evidence" role="img"' in finding and 'href="data:image/png;base64,' in finding
    for flag in ("saturated", "unsolved", "learnable"):
        assert f"grpo-monitor questions {log.parent if log.name == 'monitor.jsonl' else log} --{flag}" in panel
    assert not (tmp_path / "out" / "plots" / "health_degenerate_dominated.png").exists()  # inline only


def test_a_healthy_run_says_so(tmp_path):
    """No finding: a green panel saying healthy, no finding block, still the export command."""
    log = saturated_loop(tmp_path / "monitor.jsonl", saturated_from=STEPS)  # never saturated
    panel = _panel(build_report(log, tmp_path / "out").read_text())
    assert 'class="status ok" id="health-status"' in panel and "Run health: healthy" in panel
    assert 'class="finding"' not in panel and "grpo-monitor questions" in panel


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
           "--hide-scrollbars", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not found (Debian: apt-get install -y chromium)")
def test_in_chromium_the_panel_is_first_and_its_evidence_plot_renders(tmp_path):
    """Chromium's DOM keeps the panel first with its red banner; with the evidence opened, the screenshot shows the
    plot's shaded (open) steps, the banner red: the inlined image decoded offline."""
    import matplotlib.image as mpimg

    page = build_report(saturated_loop(tmp_path / "monitor.jsonl"), tmp_path / "out")
    dom = _chromium(tmp_path / "p1", "--dump-dom", page.as_uri()).stdout
    assert dom.index('id="run-health"') < dom.index('id="status"')
    assert not re.search(r'(src|href)="(?!data:)', dom), "no external asset"
    opened = page.with_name("opened.html")
    opened.write_text(page.read_text().replace("<details><summary>Evidence plot", "<details open><summary>Evidence "
                                               "plot", 1))
    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path / "p2", f"--screenshot={shot}", "--window-size=1000,1400", opened.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = mpimg.imread(shot)[..., :3]
    near = lambda rgb: (np.abs(pixels - np.array(rgb) / 255).max(axis=-1) < 0.03).sum()  # noqa: E731
    assert near((0xFF, 0xEB, 0xE9)) > 5000, "no red (stalled) banner"
    assert near((0xFF, 0xDF, 0xE0)) > 2000, "no shaded steps: the evidence plot did not render"
