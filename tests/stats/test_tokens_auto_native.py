"""Under compile="auto" a micro-batch of AUTO_NATIVE_MIN_TOKENS slots or more takes the C kernel, a smaller eager."""

from __future__ import annotations

import pytest
import torch
from test_tokens import assert_metrics_close, reference_metrics, seed_batch

from grpo_monitor.stats.tokens import backends, token_metrics, token_sufficient_stats
from grpo_monitor.stats.tokens import native_build as _native
from grpo_monitor.stats.tokens.arguments import token_inputs


def _have_native() -> bool:
    try:
        _native.compiler()
    except RuntimeError:
        return False
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


needs_native = pytest.mark.skipif(not _have_native(), reason="the C kernel needs an AVX2 CPU and a C compiler")
LIMIT = backends.AUTO_NATIVE_MIN_TOKENS


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    monkeypatch.delenv("GRPO_MONITOR_NATIVE", raising=False)


def _f32(rows: int, cols: int, dtype: torch.dtype = torch.float32):
    return token_inputs(torch.ones(rows, cols), logprobs=torch.zeros(rows, cols, dtype=dtype))


@needs_native
@pytest.mark.parametrize(("shape", "dtype", "env", "want"), [
    pytest.param((LIMIT // 8, 8), torch.float32, None, "native", id="at-the-limit"),
    pytest.param((256, 8), torch.float32, None, "native", id="a-step-of-256x8"),
    pytest.param((LIMIT // 8 - 1, 8), torch.float32, None, "eager", id="below-the-limit"),
    pytest.param((256, 8), torch.float64, None, "eager", id="float64-not-taken"),
    pytest.param((256, 8), torch.float32, ("GRPO_MONITOR_NATIVE", "0"), "eager", id="native-off"),
    pytest.param((256, 8), torch.float32, ("GRPO_MONITOR_COMPILE", "0"), "eager", id="compile-off"),
])
def test_auto_takes_the_kernel_from_the_limit(clean_env, monkeypatch, shape, dtype, env, want):
    """Never torch.compile below AUTO_COMPILE_MIN_TOKENS: the kernel where it takes the inputs, else eager."""
    if env is not None:
        monkeypatch.setenv(*env)
    assert backends.select_backend(_f32(*shape, dtype=dtype), "auto").name == want
    assert backends.select_backend(_f32(*shape, dtype=dtype), False) is backends.EAGER


@needs_native
def test_a_step_sized_batch_under_auto_matches_the_float64_reference(clean_env):
    """The kernel's statistics of a 256 x 8 batch (five inputs) equal the float64 reference within float32 rounding."""
    x = seed_batch(B=256, T=8, seed=3)
    assert backends.select_backend(token_inputs(**x), "auto") is backends.NATIVE
    got = token_metrics(token_sufficient_stats(**x).tolist())
    assert_metrics_close(got, reference_metrics(**x))
