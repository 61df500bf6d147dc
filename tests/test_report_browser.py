"""The HTML report in a real headless Chromium, one page per report variant, with the network unreachable.

For each variant (clean demo with dynamic sampling, TensorBoard and W&B; a failing loop; a
1-step and a 3-step loop; a loop without ledger or token tensors) the browser's DOM after
load must show every inlined PNG decoded (naturalWidth > 0), and every caption statement
must agree with the JSONL log recomputed independently (``test_report_captions.check_page``).
A screenshot shows the status banner in the variant's colour. Set ``REPORT_SCREENSHOTS`` to
a folder to keep the screenshots (``<variant>.png``) for a look.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from grpo_monitor.tools.reporting import build_report  # noqa: E402
from test_report_captions import captions, check_page  # noqa: E402  (tests/ is on sys.path under pytest)
from test_report_runs import VARIANTS  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium not found (Debian: apt-get install -y chromium)"
)

#: The status banner's background per variant (the .ok / .warn / .fail CSS colours).
BANNER = {"clean-demo": (0xDA, 0xFB, 0xE1), "failing": (0xFF, 0xEB, 0xE9), "short-1-step": (0xDA, 0xFB, 0xE1),
          "short-3-steps": (0xDA, 0xFB, 0xE1), "no-ledger-no-tokens": (0xFF, 0xF8, 0xC5),
          "sampler-side": (0xDA, 0xFB, 0xE1)}


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


# ---------------------------------------------------------------- legends: every entry's series is visible
LEGEND_VARIANTS = ("clean-demo", "failing", "short-1-step", "sampler-side")


def _hidden_entries(log: Path) -> dict[str, list[str]]:
    """Figure name -> its legend entries whose series the pixel check finds hidden (report_pixels)."""
    from grpo_monitor.tools.reporting import FIGURES, load_run
    from report_pixels import hidden

    run = load_run(log)
    found = {}
    for spec in FIGURES:
        fig = spec.draw(run)
        if fig is not None:
            found[spec.name] = hidden(fig)
    return found


def test_every_legend_entry_is_visible(rendered):
    """In every figure, each legend entry's series shows at least 35% of its own pixels as it looks on its own."""
    name, log, _, _ = rendered
    if name not in LEGEND_VARIANTS:
        pytest.skip("legend pixels are checked on the demo, the failing loop, the 1-step run and the sampler-side run")
    assert {k: v for k, v in _hidden_entries(log).items() if v} == {}


def test_the_pixel_check_sees_a_hidden_series(tmp_path, monkeypatch):
    """Two equal series: told apart by the figures' mechanism they are visible; without it the one below is hidden."""
    from grpo_monitor.tools.reporting import load_run, plots_core
    from report_pixels import hidden

    run = load_run(VARIANTS["short-3-steps"](tmp_path))

    def two_equal_series():
        fig, (ax,) = plots_core.figure(1)
        values = np.array([0.1, 0.3, 0.2])
        plots_core.line(ax, run, values, plots_core.BLUE, "below", "-")
        plots_core.line(ax, run, values, plots_core.GREEN, "on top", "-")
        plots_core.finish(ax, run, "y", "two equal series")
        return fig

    assert hidden(two_equal_series()) == []
    monkeypatch.setattr(plots_core, "separate_coinciding", lambda ax: None)
    assert [k.split(": ", 1)[1] for k in hidden(two_equal_series())] == ["below"]


# ---------------------------------------------------------------- a real TRL run through the one-line attach
_NOTE = re.compile(r'<p class="meta note">([^<]+?): no data in this run\. (.*?)</p>', re.S)


def test_plain_api_notes_name_the_call_and_its_arguments(rendered):
    """A plain loop's notes name an observe_* call of GRPOMonitor and only arguments that call takes."""
    import inspect

    from grpo_monitor import GRPOMonitor

    _, _, _, dom = rendered
    for title, text in _NOTE.findall(dom):
        text = html.unescape(text)
        call = re.search(r"call (observe_\w+)(?: with ([\w, ]+))?", text)
        assert call, (title, text)
        params = inspect.signature(getattr(GRPOMonitor, call[1])).parameters
        named = [arg.split()[0] for arg in (call[2] or "").split(",") if arg.strip()]  # "rewards all 0/1 so far"
        assert all(arg in params for arg in named), (title, text)


@pytest.fixture(scope="module")
def trl_reports(tmp_path_factory):
    """Two real tiny GRPOTrainer runs through grpo_trl.attach, each with its report (and the DOM of the first):
    beta=0 and num_iterations=1 (no KL, no importance ratio), then beta=0.04 and num_iterations=2."""
    pytest.importorskip("trl")
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "integrations"))
    from grpo_monitor.integrations import trl as grpo_trl
    from grpo_monitor.sinks import JSONLSink
    from tiny_trl import build_tiny_model, make_trainer

    root = tmp_path_factory.mktemp("trl-report")
    model = build_tiny_model(root / "model")
    out = {}
    for name, settings in (("without", {"beta": 0.0, "num_iterations": 1}),
                           ("with", {"beta": 0.04, "num_iterations": 2})):
        trainer = make_trainer(model, root / name / "trainer", max_steps=2, **settings)
        grpo_trl.attach(trainer, sinks=[JSONLSink(root / name / "monitor.jsonl")])
        trainer.train()
        page = build_report(root / name / "monitor.jsonl")
        out[name] = (trainer, root / name / "monitor.jsonl", page)
    done = _chromium(root / "profile", "--dump-dom", out["without"][2].as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return out, done.stdout


@pytest.mark.slow
def test_trl_report_notes_say_what_to_set_in_trl(trl_reports):
    """Each "no data" note of a TRL run's page (in Chromium) names GRPOConfig settings with this run's values and no
    plain-API call; the notes cover exactly the figures the log has no key of; the images decode."""
    import dataclasses

    from trl import GRPOConfig

    from grpo_monitor.sinks import read_jsonl
    from grpo_monitor.tools.reporting import FIGURES

    runs, dom = trl_reports
    trainer, log, _ = runs["without"]
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert loaded and loaded[1] == loaded[2] and int(loaded[2]) >= 6
    logged = {k for r in read_jsonl(log) for k in r["metrics"]}
    absent = {spec.title for spec in FIGURES if spec.name != "violations" and not logged & set(spec.keys)}
    notes = {title: html.unescape(text) for title, text in _NOTE.findall(dom)}
    assert set(notes) == absent and {"KL estimators", "Importance ratio and clipping"} <= absent, (notes, absent)
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    for title, text in notes.items():
        assert "observe_" not in text and ("TRL" in text or "GRPOConfig" in text), (title, text)
        for name in re.findall(r"\b(\w+) > \d", text):
            assert name in fields, (title, name)
        for aside in re.findall(r"\(this run: ([^()]+)\)", text):
            for name, value in re.findall(r"(\w+) = ([\w.]+)", aside):
                assert str(getattr(trainer.args, name)) == value, (title, name, value)
    assert re.search(r"\bbeta > 0\b", notes["KL estimators"]) and "this run: beta = 0.0" in notes["KL estimators"]
    assert "num_iterations > 1" in notes["Importance ratio and clipping"]
    check_page(dom, log)  # every caption sentence of a TRL run against its log, as for the plain loops
    said = [s for sentences in captions(dom).values() for s in sentences]
    assert not [s for s in said if "observe_" in s], "a TRL run's captions name a plain-API call"
    iid = [s for s in said if s.startswith("This log has no iid prediction")]
    assert len(iid) == 1 and "TRL" in iid[0], iid  # the tiny run's rewards are fractions: no iid prediction


@pytest.mark.slow
def test_trl_settings_the_notes_name_give_the_figures(trl_reports):
    """Rerun with what the notes say (beta > 0, num_iterations > 1): the KL and ratio figures are drawn, and every
    legend entry of both runs' figures is visible."""
    runs, _ = trl_reports
    page = runs["with"][2].read_text()
    assert '<figure id="fig-kl">' in page and '<figure id="fig-ratio">' in page
    check_page(page, runs["with"][1])  # every caption sentence, the rollout gaps of num_iterations = 2 included
    gaps = [s for s in captions(page)["degenerate"] if s.startswith("Rollouts were logged at")]
    assert len(gaps) == 1 and "num_iterations = 2" in gaps[0], captions(page)["degenerate"]
    for name in ("without", "with"):
        assert {k: v for k, v in _hidden_entries(runs[name][1]).items() if v} == {}, name


def _verl_config_keys() -> set[str]:
    """Every dotted key of verl's shipped trainer config (the installed ``_generated_ppo_trainer.yaml``)."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo import ray_trainer

    path = Path(ray_trainer.__file__).resolve().parents[1] / "config" / "_generated_ppo_trainer.yaml"
    keys: set[str] = set()

    def walk(node, prefix: str) -> None:
        for key, value in node.items():
            keys.add(prefix + str(key))
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")

    walk(OmegaConf.to_container(OmegaConf.load(path)), "")
    return keys


@pytest.mark.slow
def test_verl_report_notes_name_verl_settings(tmp_path):
    """Three real verl compute_advantage calls through grpo_verl.attach (JSONL sink), reported and read in Chromium:
    the notes cover exactly the figures the log has no key of, name verl's own settings (each dotted key exists in
    the installed verl config) and only observe_ calls the monitor has, for what runs in verl's workers; every
    caption sentence holds against the log."""
    pytest.importorskip("verl")
    import inspect
    import sys
    import warnings

    sys.path.insert(0, str(Path(__file__).parent / "integrations"))
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.integrations import verl as grpo_verl
    from grpo_monitor.sinks import JSONLSink, read_jsonl
    from grpo_monitor.tools.reporting import FIGURES
    from test_verl import AlgoConfig, G, data_proto, ray_trainer

    log = tmp_path / "monitor.jsonl"
    grpo_verl.attach(config=MonitorConfig(strict=True, group_size=G), sinks=[JSONLSink(log)])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for step in range(3):
                data, _ = data_proto(seed=step, constant={0: 1.0})
                ray_trainer.compute_advantage(data, adv_estimator="grpo", config=AlgoConfig())
    finally:
        grpo_verl.detach()
    done = _chromium(tmp_path / "profile", "--dump-dom", build_report(log).as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    logged = {k for r in read_jsonl(log) for k in r["metrics"]}
    absent = {spec.title for spec in FIGURES if spec.name != "violations" and not logged & set(spec.keys)}
    notes = {title: html.unescape(text) for title, text in _NOTE.findall(dom)}
    assert set(notes) == absent and "KL estimators" in absent, (notes, absent)
    keys = _verl_config_keys()
    for title, text in notes.items():
        assert "verl" in text or re.search(r"\b(?:algorithm|actor_rollout_ref)\.", text), (title, text)
        for key in re.findall(r"\b((?:algorithm|actor_rollout_ref|trainer|data)(?:\.\w+)+)", text):
            assert key in keys, (title, key)
        for call, args in re.findall(r"observe_(\w+)\(([^)]*)\)", text):
            params = inspect.signature(getattr(GRPOMonitor, f"observe_{call}")).parameters
            named = [a.split("=")[0].strip() for a in args.split(",") if "=" in a]
            assert all(n in params for n in named), (title, call, named)
    assert "use_kl_in_reward" in notes["KL estimators"]
    check_page(dom, log)
