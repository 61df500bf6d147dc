"""`grpo-monitor audit` on SkyRL's and AReaL's real shipped advantage code, in their venvs: no false verdicts."""

from __future__ import annotations

import json

import pytest

from framework_venv import CASES, MARKER, run_in_venv


@pytest.mark.parametrize(("venv", "case"), [("skyrl", "skyrl-maxrl"), ("areal", "areal-grpo")])
def test_real_shipped_functions(venv, case):
    """SkyRL's real MaxRL: no permutation failure; AReaL's real clip: saturation warnings, never 'misaligned'."""
    proc = run_in_venv(venv, CASES / "audit_cases.py", case, timeout=600)
    found = [line[len(MARKER):] for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and found, proc.stderr[-3000:]
    result = json.loads(found[-1])[case]
    assert "raised" not in result, result
    assert not [v for v in result["violations"] if v["invariant"] == "permutation_equivariance"]
    assert not [v for v in result["violations"] if "misaligned" in v["hint"]]
    if case == "areal-grpo":
        assert [v for v in result["violations"] if v["probe"] == "scale_up" and v["hint"].startswith("saturation")]
