"""The TRL integration declares TRL's masking vLLM importance correction (mode and band) from a real GRPOConfig."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("trl")

from trl import GRPOConfig  # noqa: E402

from grpo_monitor import MonitorConfig  # noqa: E402
from grpo_monitor.integrations.trl import importance_mask  # noqa: E402

CASES = [
    ("sequence_mask", None, 3.0, True, {"mismatch_mask": "sequence", "mismatch_ratio_low": sys.float_info.min,
                                        "mismatch_ratio_high": 3.0}),
    ("token_mask", 0.25, 4.0, True, {"mismatch_mask": "token", "mismatch_ratio_low": 0.25,
                                     "mismatch_ratio_high": 4.0}),
    ("token_truncate", 0.25, 4.0, True, {}),
    ("sequence_mask", None, 3.0, False, {}),
]


@pytest.mark.parametrize("mode, low, high, vllm, want", CASES, ids=lambda v: str(v) if not isinstance(v, dict) else "")
def test_mask_mode_and_band_come_from_the_config(mode, low, high, vllm, want, tmp_path):
    """token_mask / sequence_mask under use_vllm give mismatch_mask and TRL's clip band (clip_min None: the
    smallest positive float); truncate modes and runs without vLLM declare nothing; the result is a valid config."""
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", use_vllm=vllm,
                      vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=low,
                      vllm_importance_sampling_clip_max=high)
    got = importance_mask(args)
    assert got == want
    MonitorConfig(**got)
