"""Without a C compiler the token pass goes straight to eager (no cold torch.compile first) with one warning in whole
sentences, unless the user asked for compiling; a failed compile's warning is whole too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from test_tokens import seed_batch, stats

from grpo_monitor.stats.tokens import backends
from grpo_monitor.stats.tokens import native_build as _native
from grpo_monitor.stats.tokens.arguments import token_inputs

needs_avx2 = pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                                 reason="the C kernel is only built on an AVX2 CPU")

CHILD = textwrap.dedent(
    """
    import json, time, warnings
    import torch
    from grpo_monitor.stats.tokens import backends, token_sufficient_stats

    g = torch.Generator().manual_seed(0)
    B, T = 256, 1025  # 262,400 token slots: above AUTO_COMPILE_MIN_TOKENS, so compile="auto" wants a compiled pass
    x = dict(mask=(torch.rand(B, T, generator=g) < 0.9).float(), logprobs=-torch.rand(B, T, generator=g),
             ref_logprobs=-torch.rand(B, T, generator=g), advantages=torch.randn(B, generator=g))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        got = token_sufficient_stats(**x)
        seconds = time.perf_counter() - start
    eager = token_sufficient_stats(**x, compile=False)
    print("RESULT " + json.dumps({
        "seconds": seconds, "equal": bool(torch.equal(got, eager)),
        "warnings": [str(w.message) for w in caught if str(w.message).startswith("grpo-monitor")],
        "compiled_kernels": len(backends.COMPILED.kernels), "compiled_broken": backends.COMPILED.broken}))
    """
)


@needs_avx2
def test_no_compiler_on_the_path_goes_straight_to_eager(tmp_path):
    """PATH without any compiler (and CC naming none): the first large token pass is eager at once, equal to
    compile=False, with one warning that names the missing compiler and ends its sentence; torch.compile untried."""
    env = {**os.environ, "PATH": str(tmp_path), "CC": str(tmp_path / "no-such-cc"),
           "GRPO_MONITOR_CACHE_DIR": str(tmp_path / "cache"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    for var in ("GRPO_MONITOR_NATIVE", "GRPO_MONITOR_COMPILE"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(line[len("RESULT "):])
    assert out["compiled_kernels"] == 0 and not out["compiled_broken"], "torch.compile was tried without a compiler"
    assert out["equal"]
    assert len(out["warnings"]) == 1, out["warnings"]
    said = out["warnings"][0]
    assert "no C compiler found (set CC, or install gcc)" in said and "GRPO_MONITOR_COMPILE=1" in said
    assert said.endswith(".") and "[...]" not in said, said
    assert out["seconds"] < 5, f"the first pass took {out['seconds']:.1f} s"


@pytest.fixture
def unbuildable(monkeypatch, tmp_path):
    """A fresh kernel state whose compiler cannot be run (a path that does not exist)."""
    monkeypatch.delenv("GRPO_MONITOR_NATIVE", raising=False)
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    monkeypatch.setitem(_native._STATE, "lib", None)
    monkeypatch.setitem(_native._STATE, "broken", False)
    monkeypatch.setitem(_native._STATE, "no_compiler", False)
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    monkeypatch.setenv("GRPO_MONITOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_native, "compiler", lambda: str(tmp_path / "no-such-cc"))


@needs_avx2
@pytest.mark.parametrize("asked", ["auto", "compile=True", "GRPO_MONITOR_COMPILE=1"])
def test_a_compiler_that_cannot_be_run_skips_torch_compile_unless_asked(asked, unbuildable, monkeypatch):
    """The C compiler named cannot be run: "auto" selects eager after the one warning; compile=True or
    GRPO_MONITOR_COMPILE=1 still select torch.compile (the user asked for it)."""
    big = token_inputs(torch.ones(512, 512), logprobs=torch.zeros(512, 512))  # 2^18 slots: "auto" wants compile
    if asked == "GRPO_MONITOR_COMPILE=1":
        monkeypatch.setenv("GRPO_MONITOR_COMPILE", "1")
    said = r"cannot be run .*torch.compile, which needs a C compiler too, is not tried"
    with pytest.warns(RuntimeWarning, match=said):
        chosen = backends.select_backend(big, True if asked == "compile=True" else "auto")
    assert _native.no_compiler()
    assert chosen is (backends.EAGER if asked == "auto" else backends.COMPILED)


def test_a_failed_build_that_is_not_the_compiler_still_tries_torch_compile(monkeypatch, tmp_path):
    """A build that fails for another reason (the compiler ran and refused) leaves torch.compile in the running."""
    monkeypatch.setitem(_native._STATE, "broken", True)
    monkeypatch.setitem(_native._STATE, "no_compiler", False)
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    monkeypatch.delenv("GRPO_MONITOR_COMPILE", raising=False)
    monkeypatch.delenv("GRPO_MONITOR_NATIVE", raising=False)
    big = token_inputs(torch.ones(512, 512), logprobs=torch.zeros(512, 512))
    assert backends.select_backend(big, "auto") is backends.COMPILED


def test_a_failed_compile_warns_in_whole_sentences(monkeypatch):
    """torch.compile failing with a long, many-line error: one warning on one line, the error cut at a word and
    marked, the sentence closed; the eager statistics returned."""
    monkeypatch.setattr(backends.COMPILED, "broken", False)
    long_error = "InductorError: CppCompileError: C++ compile error\n" + "Command:\n g++ " + "-O3 " * 200

    def failing(x):
        raise RuntimeError(long_error)

    monkeypatch.setattr(backends.COMPILED, "_kernel", failing)
    x = seed_batch(B=4, T=32, seed=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = backends.COMPILED.run(token_inputs(**x))
    said = [str(w.message) for w in caught if str(w.message).startswith("grpo-monitor")]
    assert len(said) == 1 and "\n" not in said[0], said
    assert said[0].endswith("the token statistics use the eager path for the rest of the process."), said[0]
    assert "[...]" in said[0] and len(said[0]) < 450
    assert torch.equal(got, stats(**x))


def test_describe_cuts_at_a_word():
    """describe() keeps short messages whole and cuts long ones at a word, marked."""
    assert _native.describe(ValueError("short"), 100) == "ValueError: short"
    cut = _native.describe(RuntimeError("word " * 100), 50)
    assert cut.endswith(" [...]") and len(cut) <= 56 and cut[:-6].endswith("word")
