"""What the command line writes: `--overwrite` never deletes an input, nothing is left in --out when the input does
not validate, and no output file is written through a symlink planted in its place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_monitor.tools.cli import main


def write_rows(path: Path, steps: int = 3) -> Path:
    """A generic JSONL recording: 2 groups of 4 per step with reward variation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "group": k, "reward": float((s + k + i) % 2)}
            for s in range(steps) for k in range(2) for i in range(4)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_out_equal_to_the_inputs_folder_is_refused_and_the_input_survives(tmp_path, capsys):
    """`scan DIR/monitor.jsonl --out DIR --overwrite` refuses (exit 2) and DIR/monitor.jsonl is untouched."""
    log = write_rows(tmp_path / "run" / "monitor.jsonl")
    before = log.read_bytes()
    code = main(["scan", str(log), "--out", str(log.parent), "--overwrite", "-q", "--no-report"])
    err = capsys.readouterr().err
    assert code == 2 and "holds the input" in err and "--out" in err, err
    assert log.read_bytes() == before and sorted(p.name for p in log.parent.iterdir()) == ["monitor.jsonl"]


def test_an_input_folder_named_plots_under_out_is_never_removed(tmp_path, capsys):
    """An input folder `OUT/plots/` (a name scan writes) is refused as an input under --out, and stays."""
    src = write_rows(tmp_path / "out" / "plots" / "rollouts.jsonl")
    code = main(["scan", str(src.parent), "--out", str(tmp_path / "out"), "--overwrite", "-q", "--no-report"])
    assert code == 2 and "holds the input" in capsys.readouterr().err
    assert src.is_file()


def test_a_metrics_recording_under_out_is_never_removed(tmp_path, capsys):
    """`--metrics OUT/tensorboard` (the training run's own TensorBoard events, a name scan writes) with `--out OUT
    --overwrite` is refused as an input under --out; the events stay byte for byte (--overwrite used to replace
    them with the scan's own)."""
    from torch.utils.tensorboard import SummaryWriter

    events = tmp_path / "out" / "tensorboard"
    with SummaryWriter(str(events)) as writer:
        writer.add_scalar("train/entropy", 0.5, 0)
    before = {p.name: p.read_bytes() for p in events.iterdir()}
    src = write_rows(tmp_path / "r.jsonl")
    code = main(["scan", str(src), "--out", str(tmp_path / "out"), "--metrics", str(events), "--overwrite", "-q",
                 "--no-report"])
    assert code == 2 and f"holds the input {events}" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in events.iterdir()} == before


def test_out_equal_to_the_input_file_is_refused(tmp_path, capsys):
    """--out naming the input file itself is refused."""
    src = write_rows(tmp_path / "r.jsonl")
    code = main(["scan", str(src), "--out", str(src), "--overwrite", "-q", "--no-report"])
    assert code == 2 and "is the input" in capsys.readouterr().err and src.is_file()


def test_a_bad_record_leaves_out_as_it_was(tmp_path, capsys):
    """A record that does not fit (a negative step at line 9): exit 2, and a fresh --out is not left behind."""
    src = write_rows(tmp_path / "r.jsonl")
    with src.open("a") as f:
        f.write(json.dumps({"step": -3, "group": 0, "reward": 1.0}) + "\n")
    code = main(["scan", str(src), "--out", str(tmp_path / "out"), "-q", "--no-report"])
    assert code == 2 and "line 25" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    assert main(["scan", str(src), "--out", str(kept), "-q", "--no-report"]) == 2
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]


def test_a_failed_overwrite_keeps_the_earlier_scan(tmp_path, capsys):
    """`--overwrite` replaces an earlier scan only once the new input has validated: a bad record keeps the earlier
    monitor.jsonl, run.json and TensorBoard events as they were, and no staging folder is left."""
    out = tmp_path / "out"
    assert main(["scan", str(write_rows(tmp_path / "good.jsonl")), "--out", str(out), "-q", "--no-report"]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = write_rows(tmp_path / "bad.jsonl", steps=5)
    with bad.open("a") as f:
        f.write('{"step": 9, "group": 0, "reward": "high"}\n')
    assert main(["scan", str(bad), "--out", str(out), "-q", "--no-report", "--overwrite"]) == 2
    assert "line 41" in capsys.readouterr().err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in out.iterdir()) == sorted(["monitor.jsonl", "run.json", "tensorboard"])


def _plant(folder: Path, names: list[str], victim: Path) -> None:
    for name in names:
        link = folder / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim)


@pytest.fixture
def scanned(tmp_path) -> Path:
    """A scan's output folder (monitor.jsonl and its report), to plant symlinks in."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "scan"
    assert main(["scan", str(write_rows(tmp_path / "r.jsonl", steps=4)), "--out", str(out), "-q",
                 "--no-report"]) == 0
    return out


def test_report_never_writes_through_a_planted_symlink(scanned, tmp_path, capsys):
    """Symlinks planted at report.html and plots/<figure>.png are replaced by the new files; their targets are
    untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    _plant(scanned, ["report.html", "plots/degenerate.png", "plots/violations.png"], victim)
    assert main(["report", str(scanned)]) == 0
    assert victim.read_text() == "precious"
    assert not (scanned / "report.html").is_symlink() and "<html" in (scanned / "report.html").read_text()
    assert not (scanned / "plots" / "degenerate.png").is_symlink()
    assert not (scanned / "plots" / "violations.png").exists(), "a stale figure's link is removed, not followed"


def test_report_refuses_a_plots_folder_that_is_a_symlink(scanned, tmp_path, capsys):
    """A `plots` symlink to another folder is refused (exit 2, named); nothing is written into its target."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (scanned / "plots").symlink_to(elsewhere, target_is_directory=True)
    assert main(["report", str(scanned)]) == 2
    assert "plots is a symlink" in capsys.readouterr().err and not any(elsewhere.iterdir())


def test_compare_never_writes_through_a_planted_symlink(scanned, tmp_path, capsys):
    """Symlinks planted at compare.html and compare.png are replaced; their targets are untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "cmp"
    _plant(out, ["compare.html", "compare.png"], victim)
    assert main(["compare", str(scanned), str(scanned), "--labels", "a,b", "--out", str(out)]) == 0
    assert victim.read_text() == "precious"
    assert not (out / "compare.html").is_symlink() and not (out / "compare.png").is_symlink()
    assert (out / "compare.png").read_bytes().startswith(b"\x89PNG")


def test_scan_never_writes_through_a_planted_symlink(tmp_path, capsys):
    """With --overwrite, symlinks at the scan's output names are removed, not followed: the targets keep their
    content (the report included)."""
    pytest.importorskip("matplotlib")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "scan"
    _plant(out, ["monitor.jsonl", "report.html", "run.json"], victim)
    src = write_rows(tmp_path / "r.jsonl")
    assert main(["scan", str(src), "--out", str(out), "-q", "--overwrite"]) == 0
    assert victim.read_text() == "precious"
    assert not any((out / n).is_symlink() for n in ("monitor.jsonl", "report.html", "run.json"))
