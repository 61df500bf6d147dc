"""The ``grpo-monitor theory`` subcommand, in process and as ``python -m grpo_monitor``."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest

from grpo_monitor.tools.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Seed 000, G=8, population std, eps=0: p, true, centered, standardized, alpha, responses per retained group.
SEED000 = [
    (0.01, 0.009900, 0.0086625, 0.0258277, 0.0772553, 103.5528),
    (0.1, 0.090000, 0.0787500, 0.2094920, 0.5695328, 14.0466),
    (0.5, 0.250000, 0.2187500, 0.4639140, 0.9921875, 8.0630),
]


def test_text_tables_print_the_seed_numbers(capsys):
    """The default invocation prints seed 000's two G=8 tables with their printed digits."""
    assert main(["theory", "--group-size", "8", "--p", "0.01,0.1,0.5"]) == 0
    out = capsys.readouterr().out
    for _, true, centered, standardized, alpha, responses in SEED000:
        for value in (f"{true:.7f}", f"{centered:.7f}", f"{standardized:.7f}", f"{alpha:.7f}", f"{responses:.4f}"):
            assert value in out
    assert "0.8750" in out and "2.6089" in out and "1.8557" in out


def test_json_output(capsys):
    """--json gives both tables as numbers, with null where the ledger is infinite."""
    assert main(["theory", "--p", "0,0.01,0.1,0.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["group_size"] == 8 and data["std"] == "population"
    assert data["ledger"][0]["responses_per_retained"] is None
    assert data["gradient"][0]["standardized_ratio"] is None
    for row, ledger, (p, true, centered, standardized, alpha, responses) in zip(
        data["gradient"][1:], data["ledger"][1:], SEED000, strict=False
    ):
        assert row["p"] == p and row["true"] == pytest.approx(true, abs=5e-7)
        assert row["centered"] == pytest.approx(centered, abs=5e-8)
        assert row["standardized"] == pytest.approx(standardized, abs=5e-8)
        assert ledger["retention"] == pytest.approx(alpha, abs=5e-8)
        assert ledger["responses_per_retained"] == pytest.approx(responses, abs=5e-5)


def test_bessel_option(capsys):
    """--std bessel with eps 0 scales the standardized column by sqrt((G-1)/G)."""
    assert main(["theory", "--group-size", "8", "--p", "0.1", "--std", "bessel", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["gradient"][0]
    assert row["standardized"] == pytest.approx(0.2094920 * math.sqrt(7 / 8), abs=1e-7)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--group-size", "1"], "Expected argument `G` to be an int >= 2 but got 1"),
        (["--p", "0.1,1.5"], "to be a probability in [0, 1] but got '1.5'"),
        (["--eps", "-1"], "Expected argument `eps` to be a finite number >= 0"),
    ],
    ids=["G=1", "p=1.5", "eps<0"],
)
def test_invalid_arguments_exit_2(argv, message, capsys):
    """Invalid values give exit code 2 and a worded message on stderr."""
    assert main(["theory", *argv]) == 2
    assert message in capsys.readouterr().err


def test_unknown_std_is_an_argparse_error():
    """--std accepts only the two conventions."""
    with pytest.raises(SystemExit) as info:
        main(["theory", "--std", "sample"])
    assert info.value.code == 2


def test_module_entry_point():
    """``python -m grpo_monitor theory --json`` runs in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-m", "grpo_monitor", "theory", "--group-size", "8", "--p", "0.01", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ledger"][0]["responses_per_retained"] == pytest.approx(103.5528, abs=5e-5)
    assert data["gradient"][0]["standardized"] == pytest.approx(0.0258277, abs=5e-8)
