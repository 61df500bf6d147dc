"""The HTML report in a real headless Chromium, one page per report variant, with the network unreachable.

For each variant (clean demo with dynamic sampling, TensorBoard and W&B; a failing loop; a
1-step and a 3-step loop; a loop without ledger or token tensors) the browser's DOM after
load must show every inlined PNG decoded (naturalWidth > 0), and every caption statement
must agree with the JSONL log recomputed independently (``test_report_captions.check_page``).
A screenshot shows the status banner in the variant's colour. Set ``REPORT_SCREENSHOTS`` to
a folder to keep the screenshots (``<variant>.png``) for a look.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from grpo_monitor.reporting import build_report  # noqa: E402
from test_report_captions import check_page  # noqa: E402  (tests/ is on sys.path under pytest)
from test_report_runs import VARIANTS  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not found (Debian: apt-get install -y chromium)"
)

#: The status banner's background per variant (the .ok / .warn / .fail CSS colours).
BANNER = {"clean-demo": (0xDA, 0xFB, 0xE1), "failing": (0xFF, 0xEB, 0xE9), "short-1-step": (0xDA, 0xFB, 0xE1),
          "short-3-steps": (0xDA, 0xFB, 0xE1), "no-ledger-no-tokens": (0xFF, 0xF8, 0xC5)}


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium with networking unreachable, so only inlined assets can load."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND",
           "--hide-scrollbars", "--virtual-time-budget=5000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


@pytest.fixture(scope="module", params=list(VARIANTS), ids=list(VARIANTS))
def rendered(request, tmp_path_factory) -> tuple[str, Path, Path, str]:
    """(variant, JSONL log, report.html, the DOM Chromium built from it after load)."""
    out = tmp_path_factory.mktemp(request.param)
    log = VARIANTS[request.param](out)
    page = build_report(log)
    done = _chromium(out / "profile", "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return request.param, log, page, done.stdout


def test_every_image_decodes_offline(rendered):
    """In the DOM after load every inlined PNG decoded (naturalWidth > 0), one per file in plots/."""
    name, _, page, dom = rendered
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert loaded, "the page's load script did not run"
    ok, total = map(int, loaded.groups())
    pngs = sorted((page.parent / "plots").glob("*.png"))
    assert total == len(pngs) == len(re.findall(r"<img ", dom)) and ok == total, (name, ok, total)
    assert not re.search(r'(src|href)="(?!data:)', dom), "no external asset"


def test_no_caption_contradicts_the_log(rendered):
    """Every computed caption sentence, the run-level check and the summary in the DOM match the log."""
    name, log, _, dom = rendered
    counts = check_page(dom, log)
    assert sum(counts.values()) >= 12, (name, counts)


def test_where_else_to_look_lists_what_exists(rendered):
    """The block names the JSONL log and, only where they exist, the TensorBoard folder and the W&B run."""
    name, log, _, dom = rendered
    block = re.search(r'<ul class="where" id="where">(.*?)</ul>', dom, flags=re.S)[1]
    paths = [Path(p) for p in re.findall(r"<code>([^<]+)</code>", block)]
    assert paths[0] == log.resolve() and all(p.exists() for p in paths)
    kinds = re.findall(r"<b>([^<]+)</b>", block)
    assert ("TensorBoard" in kinds) == (name == "clean-demo")
    assert any(k.startswith("W&amp;B") for k in kinds) == (name == "clean-demo" and (log.parent / "wandb").is_dir())


def test_screenshot_shows_the_banner_of_the_variant(rendered, tmp_path):
    """A screenshot is a rendered page, not blank, with the status banner in the variant's colour."""
    import matplotlib.image as mpimg

    name, _, page, _ = rendered
    shot = tmp_path / f"{name}.png"
    done = _chromium(tmp_path / "profile", f"--screenshot={shot}", "--window-size=1000,1400", page.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    if os.environ.get("REPORT_SCREENSHOTS"):
        Path(os.environ["REPORT_SCREENSHOTS"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["REPORT_SCREENSHOTS"]) / shot.name)
    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[:2] == (1400, 1000) and pixels.std() > 0.05, "the screenshot is blank"
    banner = np.array(BANNER[name]) / 255
    assert (np.abs(pixels - banner).max(axis=-1) < 0.02).sum() > 5000, f"no {name} banner colour"
