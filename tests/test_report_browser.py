"""The HTML report in a real headless Chromium: every image decodes, offline, and the page renders."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from grpo_monitor.demo import DemoConfig, run_demo  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not found (Debian: apt-get install -y chromium)"
)


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with networking unreachable, so only inlined assets can load."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
           "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """The HTML report of a short demo run with dynamic sampling."""
    out = tmp_path_factory.mktemp("browser")
    result = run_demo(DemoConfig(steps=30, dynamic_sampling=True), out, wandb=False, tensorboard=False, progress=False)
    return Path(result.outputs["report"])


def test_every_image_decodes_offline(report, tmp_path):
    """In the browser's DOM after load, all inlined PNGs decoded (naturalWidth > 0) with the network unreachable."""
    done = _chromium(tmp_path / "profile", "--dump-dom", report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', done.stdout)
    assert loaded, "the page's load script did not run"
    ok, total = map(int, loaded.groups())
    assert total == len(list((report.parent / "plots").glob("*.png"))) >= 6 and ok == total
    assert "Clean: no invariant broke in 30 steps" in done.stdout


def test_screenshot_renders_the_page(report, tmp_path):
    """A screenshot shows a rendered page: the requested size, not blank, with the status banner's green."""
    shot = tmp_path / "shot.png"
    done = _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1000,1600", report.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[:2] == (1600, 1000)
    assert pixels.std() > 0.05, "the screenshot is blank"
    banner_green = np.array([0xDA, 0xFB, 0xE1]) / 255  # the .ok status background
    assert (np.abs(pixels - banner_green).max(axis=-1) < 0.02).sum() > 5000
