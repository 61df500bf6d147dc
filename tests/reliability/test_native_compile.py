"""``GRPOMonitor.observe_loss`` inside a user's ``torch.compile``-d training step.

Dynamo used to trace into the ``ctypes`` call of the C token kernel and the process died
(``malloc(): unsorted double linked list corrupted``, exit 134): no fail-open can catch
that, so every case runs in a child process. One child runs all cases, each with its own
``torch._dynamo.reset()`` and environment switches, and prints one JSON line per case as
it finishes; a case that kills the child is recorded with the exit status and the child is
started again on the cases after it.

Each case compiles a step that calls ``observe_loss`` and returns a loss, runs it on three
steps of 2^18+ float32 CPU tokens (``logprobs`` requiring grad, the loss backpropagated)
and compares ``end_step().metrics`` with a float64 reference computed here from the same
seeded batch. The "direct" cases call ``token_sufficient_stats`` itself in the step (with
``fullgraph=True``), which separates the token statistics from the monitor's bookkeeping. The
"-sampler" cases add ``sampler_logprobs`` and ``entropy`` (the C kernel computes the
``grpo/mismatch/*`` and ``grpo/entropy/*`` slots too; only native: without it these inputs
take the eager pass, whose histogram scatter inductor takes minutes to build).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [  # one child compiling 10 step functions: ~12 s in all on 2 cores
    pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                       reason="the C token kernel needs an AVX2 CPU"),
]

B, T, STEPS = 256, 1027, 3  # 262,912 tokens: above AUTO_COMPILE_MIN_TOKENS (2^18), a tail of 3 per row
#: backend name -> environment of the case; "native-unbuildable": the C build fails inside the custom op
#: (the child points the kernel's compiler at nothing), which then computes eagerly
BACKENDS = {
    "native": {},
    "compiled": {"GRPO_MONITOR_NATIVE": "0"},
    "eager": {"GRPO_MONITOR_COMPILE": "0"},
    "native-unbuildable": {},
}
#: (backend, fullgraph, what the step calls)
CASES = [(name, fullgraph, "monitor") for name in BACKENDS for fullgraph in (False, True)
         if not (name == "native-unbuildable" and fullgraph)]
CASES += [(name, True, "direct") for name in ("native", "compiled", "eager")]
CASES += [("native", True, "direct-sampler"), ("native", False, "monitor-sampler")]

CHILD = textwrap.dedent(
    """
    import json, os, shutil, sys, tempfile, warnings
    import torch
    from torch._dynamo.utils import counters
    from grpo_monitor import GRPOMonitor, MonitorConfig
    from grpo_monitor.stats.tokens import backends, token_metrics, token_sufficient_stats
    from grpo_monitor.stats.tokens import native_build as _native

    B, T, STEPS, CASES, BACKENDS = json.loads(sys.argv[1])
    calls = []
    real, real_compiler = _native.token_stats, _native.compiler
    _native.token_stats = lambda *a, **k: calls.append(1) or real(*a, **k)

    def batch(seed, sampler):
        g = torch.Generator().manual_seed(seed)
        lp = (-3 * torch.rand(B, T, generator=g)).requires_grad_()
        ref = lp.detach() + 0.05 + 0.1 * torch.randn(B, T, generator=g)
        mask = (torch.rand(B, T, generator=g) < 0.9).float()
        x = dict(mask=mask, logprobs=lp, ref_logprobs=ref, advantages=torch.randn(B, generator=g))
        if sampler:
            x["sampler_logprobs"] = lp.detach() - 0.02 * torch.randn(B, T, generator=g)
            x["entropy"] = 2 * torch.rand(B, T, generator=g)
        return x

    base, scratch = dict(os.environ), tempfile.mkdtemp(prefix="gm-compile-test-")
    for name, fullgraph, via in CASES:
        print("START " + json.dumps([name, fullgraph, via]), flush=True)
        os.environ.clear()
        os.environ.update({**base, **BACKENDS[name]})
        torch._dynamo.reset()
        _native._STATE.update(lib=None, broken=False)
        backends.COMPILED.kernels.clear()
        backends.COMPILED.broken = False
        _native.compiler = (lambda: "/nonexistent/cc") if name == "native-unbuildable" else real_compiler
        os.environ["GRPO_MONITOR_CACHE_DIR"] = tempfile.mkdtemp(dir=scratch)  # a fresh build per case, inside the op
        calls.clear()
        policies = {"mismatch": "ignore"}  # the statistics are under test here, not the invariant
        mon = GRPOMonitor(MonitorConfig(strict=True, repro_dir=tempfile.mkdtemp(dir=scratch), policies=policies))

        def step(mask, logprobs, ref_logprobs, advantages, **sampler):
            kw = dict(mask=mask, logprobs=logprobs, ref_logprobs=ref_logprobs, advantages=advantages, **sampler)
            vec = mon.observe_loss(**kw) if via.startswith("monitor") else token_sufficient_stats(**kw)
            return -(advantages[:, None] * logprobs * mask).sum() / mask.sum(), vec

        compiled = torch.compile(step, fullgraph=fullgraph)
        out = {"case": [name, fullgraph, via], "metrics": [], "graphs": []}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                for seed in range(STEPS):
                    x = batch(seed, via.endswith("sampler"))
                    loss, vec = compiled(**x)
                    loss.backward()
                    out["metrics"].append(mon.end_step().metrics if via.startswith("monitor") else token_metrics(vec))
                    out["grad"] = bool(x["logprobs"].grad.abs().sum() > 0)
                    out["graphs"].append(counters["stats"]["unique_graphs"])
            except Exception as exc:
                out["error"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
        out["warnings"] = [str(w.message)[:300] for w in caught if str(w.message).startswith("grpo-monitor")]
        out["native_calls"], out["nested_compiles"] = len(calls), len(backends.COMPILED.kernels)
        print("CASE " + json.dumps(out), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    """
)


def reference(seed: int, sampler: bool = False) -> dict[str, float]:
    """k1, k2, k3 means and the valid count of the child's batch ``seed``, in float64 from the definitions;
    with ``sampler``, also the mismatch (Delta = logprobs - sampler_logprobs) and entropy keys."""
    g = torch.Generator().manual_seed(seed)
    lp = -3 * torch.rand(B, T, generator=g)
    ref = lp + 0.05 + 0.1 * torch.randn(B, T, generator=g)
    mask = torch.rand(B, T, generator=g) < 0.9
    u = (ref.double() - lp.double())[mask]
    out = {"grpo/kl/k1_mean": (-u).mean().item(), "grpo/kl/k2_mean": (u * u / 2).mean().item(),
           "grpo/kl/k3_mean": (u.exp() - u - 1).mean().item(), "grpo/tokens/valid": float(mask.sum())}
    if sampler:
        torch.randn(B, generator=g)  # the advantages
        s = lp - 0.02 * torch.randn(B, T, generator=g)
        ent = (2 * torch.rand(B, T, generator=g)).double()[mask]
        d = (lp.double() - s.double())[mask]
        out.update({"grpo/mismatch/k3_mean": (d.exp() - d - 1).mean().item(),
                    "grpo/mismatch/ratio_mean": d.exp().mean().item(),
                    "grpo/mismatch/abs_diff_max": d.abs().max().item(),
                    "grpo/entropy/mean": ent.mean().item(), "grpo/entropy/std": ent.std(correction=0).item(),
                    "grpo/entropy/sampled_nll_mean": -s.double()[mask].mean().item()})
    return out


def run_child(cases: list) -> tuple[dict, tuple | None, int, str]:
    """One child on ``cases``: finished records, the case it died in (if any), exit status, output tail."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    for var in ("GRPO_MONITOR_NATIVE", "GRPO_MONITOR_COMPILE", "GRPO_MONITOR_CACHE_DIR"):
        env.pop(var, None)
    arg = json.dumps([B, T, STEPS, cases, BACKENDS])
    proc = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, timeout=900, env=env)
    done, started = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("START "):
            started = tuple(json.loads(line[6:]))
        elif line.startswith("CASE "):
            rec = json.loads(line[5:])
            done[tuple(rec["case"])] = rec
    died = started if proc.returncode != 0 and started not in done else None
    return done, died, proc.returncode, (proc.stdout + proc.stderr)[-3000:]


@pytest.fixture(scope="module")
def results() -> dict:
    """Every case's record; a case that killed its child maps to ``{"died": exit status, "tail": output}``."""
    cases, remaining, rcs = {}, list(CASES), []
    while remaining:
        done, died, rc, tail = run_child(remaining)
        cases.update(done)
        rcs.append((rc, tail))
        if died is None:
            break
        cases[died] = {"died": rc, "tail": tail}
        remaining = remaining[remaining.index(died) + 1:]
    return {"cases": cases, "runs": rcs}


@pytest.mark.parametrize("name,fullgraph,via", CASES, ids=[f"{v}-{n}-fullgraph={fg}" for n, fg, v in CASES])
def test_token_statistics_under_torch_compile(results, name, fullgraph, via):
    """The compiled step survives, records every step, and its KL metrics equal the float64 reference."""
    rec = results["cases"].get((name, fullgraph, via))
    assert rec is not None, f"the child never ran this case:\n{results['runs'][-1][1]}"
    assert "died" not in rec, f"the process died in this case (exit {rec['died']}):\n{rec['tail']}"
    assert "error" not in rec, rec["error"]
    assert len(rec["metrics"]) == STEPS and rec["grad"]
    for seed, got in enumerate(rec["metrics"]):
        for key, want in reference(seed, via.endswith("sampler")).items():
            assert got[key] == pytest.approx(want, rel=1e-5, abs=1e-9), f"step {seed}: {key}"
    assert rec["nested_compiles"] == 0, "the monitor started its own torch.compile inside the user's"
    assert rec["graphs"][-1] == rec["graphs"][-2], f"same shapes recompiled: graphs after each step {rec['graphs']}"
    expected_native = STEPS if name == "native" else 1 if name == "native-unbuildable" else 0
    assert rec["native_calls"] == expected_native, "the wrong backend computed the statistics"
    unavailable = [w for w in rec["warnings"] if "native token kernel is unavailable" in w]
    assert len(unavailable) == (name == "native-unbuildable"), rec["warnings"]
    assert len(rec["warnings"]) == len(unavailable), rec["warnings"]


def test_the_child_exits_cleanly(results):
    """No case aborts the process (SIGABRT, exit 134 from a shell, was the bug) or leaves it failing."""
    assert [rc for rc, _ in results["runs"]] == [0], results["runs"][-1][1]
