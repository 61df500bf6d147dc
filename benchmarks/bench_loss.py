"""Time the loss-side token statistics against a read-once floor (not a test: run it by hand).

    .venv/bin/python benchmarks/bench_loss.py [--sizes 1M,8M,32M] [--reps 9] [--threads N] [--no-memory]

For each size (``B x T`` float32 token tensors: mask, advantages, logprobs, ref_logprobs,
old_logprobs; T = 4096) it prints, side by side, medians over ``reps`` runs after warm-up:

* ``monitor``: ``token_sufficient_stats`` as ``observe_loss`` runs it (``observe_loss`` adds
  validation only): on an AVX2 CPU with float32 inputs the C kernel of
  ``grpo_monitor/stats/_native.py``, else one ``torch.compile``-d pass;
* ``compiled``: the ``torch.compile`` pass forced (``GRPO_MONITOR_NATIVE=0``): what CUDA,
  other dtypes and CPUs without AVX2 run;
* ``floor``: one ``.sum()`` over each input tensor: what merely reading the inputs costs;
* ``eager``: the pattern trainers use today: every statistic computed separately with
  boolean-mask indexing and its own ``.item()`` host sync;
* ``fallback``: the monitor's own eager path (``compile=False``), used when compilation
  is unavailable;

``mon/floor`` uses the medians, ``(min)`` the fastest runs of each (steadier on a busy
machine). ``--spread`` sets the scale of the log-probability differences (ref and old
minus logprobs; default 0.1, as between a policy and its reference or sampler): the C
kernel skips the exponentials' range reduction for vectors of 8 arguments all below 0.34
in magnitude, so ``--spread 1`` (most vectors need it) shows its slower case. At 1M tokens the five inputs (20 MiB) sit in the last-level cache, so the floor
there is a cache read, not a memory read.

Peak extra memory of the monitor and of the eager baseline (``input``: one input tensor) is
measured in a fresh subprocess per size: the rise of the peak resident set (``VmHWM``, reset
through ``/proc/self/clear_refs``) during one warmed-up call, with glibc's mmap threshold
at 64 KiB so that freed blocks leave the resident set (otherwise reuse of freed heap would
hide allocations). Linux updates the resident-set counters in steps of 64 pages per
thread, so rises under ~0.5 MiB can read as 0; the monitor's own buffers are per-row
partials, printed analytically below the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from grpo_monitor.stats import tokens as tk  # noqa: E402
from grpo_monitor.stats.tokens import token_sufficient_stats  # noqa: E402

T = 4096
SIZES = {"1M": 1 << 20, "8M": 1 << 23, "32M": 1 << 25}


def make_inputs(tokens: int, seed: int = 0, spread: float = 0.1) -> dict[str, torch.Tensor]:
    """Float32 (B, 4096) token tensors: right-padded responses, garbage in the padding."""
    gen = torch.Generator().manual_seed(seed)
    B = max(1, tokens // T)
    lengths = torch.randint(T // 8, T + 1, (B, 1), generator=gen)
    mask = (torch.arange(T) < lengths).float()
    adv = torch.randn(B, 1, generator=gen).expand(B, T).contiguous()
    logprobs = -torch.rand(B, T, generator=gen) * 3
    ref = logprobs + spread * torch.randn(B, T, generator=gen)
    old = logprobs + spread / 2 * torch.randn(B, T, generator=gen)
    logprobs[mask == 0] = float("nan")
    return dict(mask=mask, advantages=adv, logprobs=logprobs, ref_logprobs=ref, old_logprobs=old)


def floor(x: dict[str, torch.Tensor]) -> None:
    for t in x.values():
        t.sum()


def eager_baseline(x: dict[str, torch.Tensor], low: float = 0.2, high: float = 0.2) -> dict[str, float]:
    """Each statistic on its own, boolean-mask indexing, one ``.item()`` per value."""
    mask, adv, lp, ref, old = (x[k] for k in ("mask", "advantages", "logprobs", "ref_logprobs", "old_logprobs"))
    valid = mask > 0
    out = {"valid": valid.sum().item(), "nonbinary": ((mask != 0) & (mask != 1)).sum().item()}
    u = (ref - lp)[valid]
    for name, k in (("k1", -u), ("k2", 0.5 * u * u), ("k3", torch.exp(u) - u - 1)):
        out.update({f"{name}_mean": k.mean().item(), f"{name}_std": k.std(correction=0).item(),
                    f"{name}_neg": (k < 0).float().mean().item(), f"{name}_max": k.max().item()})
    lr = (lp - old)[valid]
    ratio = torch.exp(lr)
    out["ratio_mean"] = ratio.mean().item()
    out["clip_frac"] = ((ratio < 1 - low) | (ratio > 1 + high)).float().mean().item()
    out["log_abs_max"] = lr.abs().max().item()
    out["nonfinite"] = (~torch.isfinite(lp[valid]) | ~torch.isfinite(ref[valid]) | ~torch.isfinite(old[valid])).sum().item()
    hi = adv.masked_fill(~valid, float("-inf")).amax(1)
    lo = adv.masked_fill(~valid, float("inf")).amin(1)
    rows = valid.any(1)
    out["spread"] = (hi - lo)[rows].max().item()
    a = adv[valid]
    out["adv_abs_mean"] = a.abs().mean().item()
    live_rows = ((adv != 0) & valid).any(1)
    out["live_frac"] = valid[live_rows].sum().item() / out["valid"]
    out["length_mean"] = valid.sum(1)[rows].float().mean().item()
    return out


def run_times(fn, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def compiled_only(x: dict[str, torch.Tensor]) -> torch.Tensor:
    """The torch.compile pass with the C kernel switched off."""
    os.environ["GRPO_MONITOR_NATIVE"] = "0"
    try:
        return token_sufficient_stats(**x, compile=True)
    finally:
        del os.environ["GRPO_MONITOR_NATIVE"]


def time_size(tokens: int, reps: int, with_fallback: bool, spread: float) -> dict[str, float]:
    """Median seconds per column; the monitor and the floor alternate so that load drifts hit both."""
    x = make_inputs(tokens, spread=spread)
    mon = lambda: token_sufficient_stats(**x, compile=True)  # noqa: E731
    for _ in range(2):
        mon(), floor(x), eager_baseline(x), compiled_only(x)
    pairs = [(run_times(mon, 1)[0], run_times(lambda: floor(x), 1)[0]) for _ in range(reps)]
    row = {"monitor": statistics.median(p[0] for p in pairs), "floor": statistics.median(p[1] for p in pairs),
           "min_ratio": min(p[0] for p in pairs) / min(p[1] for p in pairs),
           "compiled": statistics.median(run_times(lambda: compiled_only(x), reps)),
           "eager": statistics.median(run_times(lambda: eager_baseline(x), max(3, reps // 3)))}
    if with_fallback:
        row["fallback"] = statistics.median(run_times(lambda: token_sufficient_stats(**x, compile=False), max(3, reps // 3)))
    return row


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return int(re.search(rf"{field}:\s+(\d+)", fh.read()).group(1))


def _peak_rise_mib(fn) -> float:
    """Rise of the peak resident set during ``fn()`` (VmHWM reset through /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) / 1024


def measure_memory(tokens: int) -> dict[str, float]:
    """Peak RSS rise (MiB) during one warmed-up call of the monitor and of the eager baseline."""
    x = make_inputs(tokens)
    for _ in range(2):
        token_sufficient_stats(**x, compile=True)
        eager_baseline(x)
    return {"monitor": _peak_rise_mib(lambda: token_sufficient_stats(**x, compile=True)),
            "eager": _peak_rise_mib(lambda: eager_baseline(x)), "input_mib": x["mask"].numel() * 4 / 2**20}


def memory_in_subprocess(tokens: int, threads: int | None) -> dict[str, float] | None:
    """``measure_memory`` in a fresh process whose freed blocks of >= 64 KiB leave the resident set."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    cmd = [sys.executable, os.path.abspath(__file__), "--_memory", str(tokens)] + (["--threads", str(threads)] if threads else [])
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        print(f"memory measurement failed for {tokens} tokens: {res.stderr[-500:]}", file=sys.stderr)
        return None
    return json.loads(res.stdout.strip().splitlines()[-1])


def parse_sizes(text: str) -> list[tuple[str, int]]:
    out = []
    for item in text.split(","):
        item = item.strip()
        if item in SIZES:
            out.append((item, SIZES[item]))
        elif item.upper().endswith("M") and item[:-1].isdigit():
            out.append((item.upper(), int(item[:-1]) << 20))
        else:
            raise SystemExit(f"--sizes takes names like 1M,8M,32M; got {item!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,8M,32M", help="comma-separated token counts: 1M, 8M, 32M, or nM")
    ap.add_argument("--reps", type=int, default=9, help="timed repetitions per column (eager: a third)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--spread", type=float, default=0.1, help="scale of ref/old minus logprobs (default 0.1)")
    ap.add_argument("--no-memory", action="store_true", help="skip the per-size memory subprocess")
    ap.add_argument("--no-fallback", action="store_true", help="skip timing the monitor's eager fallback")
    ap.add_argument("--_memory", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args._memory:
        print(json.dumps(measure_memory(args._memory)))
        return
    from grpo_monitor.stats import _native

    native = _native.enabled() and _native._library([n for n, _ in tk.TOKEN_FIELDS]) is not None
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}, float32 inputs "
          f"(mask, advantages, logprobs, ref_logprobs, old_logprobs), T = {T}, spread {args.spread}; medians of "
          f"{args.reps} runs after warm-up; monitor = {'C kernel' if native else 'torch.compile'}")
    head = (f"{'tokens':>6} {'B x T':>11} {'monitor':>10}{'floor':>10}{'compiled':>10}{'eager':>10}{'fallback':>10} "
            f"{'mon/floor':>9} {'(min)':>6} {'comp/floor':>10} {'eager/mon':>9} {'peak+ MiB: monitor':>19} {'eager':>10} "
            f"{'input':>11}")
    print(head)
    for name, tokens in parse_sizes(args.sizes):
        row = time_size(tokens, args.reps, not args.no_fallback, args.spread)
        mem = None if args.no_memory else memory_in_subprocess(tokens, args.threads)
        ms = lambda k: f"{row[k] * 1e3:8.2f}ms" if k in row else f"{'-':>10}"  # noqa: E731
        extra = (f"{mem['monitor']:11.2f} {mem['eager']:10.1f} {mem['input_mib']:11.1f}" if mem
                 else f"{'-':>11} {'-':>10} {'-':>11}")
        print(f"{name:>6} {f'{tokens // T} x {T}':>11} {ms('monitor')}{ms('floor')}{ms('compiled')}{ms('eager')}"
              f"{ms('fallback')} {row['monitor'] / row['floor']:9.2f} {row['min_ratio']:6.2f} "
              f"{row['compiled'] / row['floor']:10.2f} {row['eager'] / row['monitor']:9.1f} {extra}", flush=True)
    rows = min(max(tokens for _, tokens in parse_sizes(args.sizes)) // T, tk._COMPILED_CHUNK // T)
    nf = len(tk.TOKEN_FIELDS)
    print(f"monitor buffers (analytic): C kernel {nf} float64 per thread plus {nf} (and 4 KiB of stack per thread); "
          f"torch.compile about {nf} per-row float32 partials x {rows} rows per call = {nf * rows * 4 / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
