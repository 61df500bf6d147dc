"""Time the token statistics backends against a read-once floor (not a test: run it by hand).

    .venv/bin/python benchmarks/bench_loss.py [--sizes 1M,8M,32M] [--reps 9] [--threads N]
        [--backends native,compiled,eager,triton] [--spread 0.1] [--no-memory] [--no-trainer] [--sampler]
        [--padding right|left|none] [--clock wall|cpu]

For each size (``B x T`` float32 token tensors: mask, advantages, logprobs, ref_logprobs,
old_logprobs; T = 4096) it times, after warm-up, each backend of
``grpo_monitor.stats.tokens.backends`` called directly through the ``Backend`` protocol
(``run(inputs)``), so the figures are the backends' own, whatever the selection would pick:

* ``native``: the C kernel (CPU float32 only; what ``observe_loss`` runs on an AVX2 CPU);
* ``compiled``: the ``torch.compile``-d pass (what CUDA, other dtypes and CPUs without AVX2 run);
* ``eager``: the same pass op by op, in row blocks (``compile=False``, small micro-batches,
  ``GRPO_MONITOR_COMPILE=0``, or after a failed compile);
* ``triton``: the Triton kernel (``triton_kernel.py``) on CUDA copies of the inputs, against
  ``cuda floor`` (the same ``.sum()`` per input on the GPU) and ``cuda eager``, timed with
  ``torch.cuda.synchronize``; without a GPU, under ``TRITON_INTERPRET=1``, the interpreter on
  the first 4 rows, labelled ``triton (interp.)``: numpy running each operation, a figure of
  nothing on any GPU, never divided by the floor; otherwise one line saying why it is absent;
* ``floor``: one ``.sum()`` over each input tensor: what merely reading the inputs costs;
* ``trainer``: the pattern trainers use today: every statistic computed separately with
  boolean-mask indexing and its own ``.item()`` host sync.

Each cell is ``median / min`` in milliseconds over ``reps`` runs (the minimum is steadier
on a busy machine); ``x floor`` divides the minima. ``first`` is the first call in the
process: for native it includes building the C kernel into a fresh cache folder, for
compiled the inductor compile. ``--spread`` sets the scale of the log-probability
differences (default 0.1, as between a policy and its reference or sampler): the C kernel
skips the exponentials' range reduction for vectors of 8 arguments all below 0.34 in
magnitude, so ``--spread 1`` shows its slower case. At 1M tokens the five inputs (20 MiB)
sit in the last-level cache, so the floor there is a cache read, not a memory read.
``--padding`` lays the rows out right-padded (the default: ragged lengths from T/8 to T),
left-padded (the same lengths, padding first) or ``none`` (dense rows: every token valid).
``--routing 64K,48,8`` also times the MoE routing counts of ``observe_loss(routed_experts=,
sampler_routed_experts=)`` (:mod:`grpo_monitor.stats.routing`): integer ids the float pass never reads, so
they have a pass of their own. ``--sampler`` adds ``sampler_logprobs`` and ``entropy`` (seven inputs: the
``grpo/mismatch/*`` and ``grpo/entropy/*`` slots in the same pass). ``--clock cpu`` times with the process's CPU
time (all threads) instead of the wall clock: on a machine shared with other jobs it leaves
out the time the threads wait descheduled (not what they lose to shared caches and memory).

Peak extra memory of the selected backend (``monitor``) and of the trainer pattern is
measured in a fresh subprocess per size: the rise of the peak resident set (``VmHWM``,
reset through ``/proc/self/clear_refs``) during one warmed-up call, with glibc's mmap
threshold at 64 KiB so that freed blocks leave the resident set. Rises under ~0.5 MiB can
read as 0 (the counters move in steps of 64 pages per thread).

Figures on a 2-core AVX-512 machine (torch 2.13 CPU, ``--sizes 1M,8M --reps 15``, a quiet
moment: on a shared machine check ``/proc/pressure/cpu`` first), median ms: 1M tokens native
0.55, compiled 1.82, eager 32, floor 0.40, trainer 29; 8M tokens native 9.1, compiled 15.6,
eager 258, floor 6.1, trainer 510. First call: native 0.4 s (fresh build), compiled 3.3 s
(warm inductor cache; 20 s cold). The decision they support is in
``grpo_monitor/stats/tokens/backends.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from grpo_monitor.stats.tokens import TOKEN_FIELDS, native_build, token_inputs, token_sufficient_stats  # noqa: E402
from grpo_monitor.stats.tokens import backends as bk  # noqa: E402

T = 4096
SAMPLER_INPUTS = ", sampler_logprobs, entropy"
SIZES = {"1M": 1 << 20, "8M": 1 << 23, "32M": 1 << 25}
BACKENDS: dict[str, bk.Backend] = {"native": bk.NATIVE, "compiled": bk.COMPILED, "eager": bk.EAGER,
                                   "triton": bk.TRITON}
INTERPRETER_ROWS = 4


def make_inputs(tokens: int, seed: int = 0, spread: float = 0.1, sampler: bool = False,
                padding: str = "right") -> dict[str, Any]:
    """Float32 (B, 4096) token tensors: right-padded responses, garbage in the padding (``padding``: "left" puts
    it first, "none" makes every token valid); with ``sampler``, also ``sampler_logprobs`` (old minus bf16-sized
    noise) and per-token ``entropy``."""
    gen = torch.Generator().manual_seed(seed)
    B = max(1, tokens // T)
    lengths = torch.randint(T // 8, T + 1, (B, 1), generator=gen) if padding != "none" else torch.full((B, 1), T)
    mask = (torch.arange(T) < lengths).float()
    if padding == "left":
        mask = mask.flip(1).contiguous()
    adv = torch.randn(B, 1, generator=gen).expand(B, T).contiguous()
    logprobs = -torch.rand(B, T, generator=gen) * 3
    ref = logprobs + spread * torch.randn(B, T, generator=gen)
    old = logprobs + spread / 2 * torch.randn(B, T, generator=gen)
    logprobs[mask == 0] = float("nan")
    out = dict(mask=mask, advantages=adv, logprobs=logprobs, ref_logprobs=ref, old_logprobs=old)
    if sampler:
        out["sampler_logprobs"] = old - 0.02 * torch.randn(B, T, generator=gen)
        out["entropy"] = torch.rand(B, T, generator=gen) * 2
    return out


def floor(x: dict[str, torch.Tensor]) -> None:
    for t in x.values():
        t.sum()


def trainer_pattern(x: dict[str, torch.Tensor], low: float = 0.2, high: float = 0.2) -> dict[str, float]:
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
    finite = torch.isfinite(lp[valid]) & torch.isfinite(ref[valid]) & torch.isfinite(old[valid])
    out["nonfinite"] = (~finite).sum().item()
    hi = adv.masked_fill(~valid, float("-inf")).amax(1)
    lo = adv.masked_fill(~valid, float("inf")).amin(1)
    rows = valid.any(1)
    out["spread"] = (hi - lo)[rows].max().item()
    out["adv_abs_mean"] = adv[valid].abs().mean().item()
    live_rows = ((adv != 0) & valid).any(1)
    out["live_frac"] = valid[live_rows].sum().item() / out["valid"]
    out["length_mean"] = valid.sum(1)[rows].float().mean().item()
    return out


CLOCK: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = CLOCK["wall"]


def run_times(fn: Callable[[], object], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    return times


def first_call(name: str, inputs) -> float:
    """Seconds of the backend's first call: a fresh C build (native) or an inductor compile (compiled)."""
    if name == "native":
        with tempfile.TemporaryDirectory() as cache:
            os.environ["GRPO_MONITOR_CACHE_DIR"] = cache
            native_build.unload()
            try:
                t0 = time.perf_counter()
                if not bk.NATIVE.accepts(inputs):
                    return float("nan")
                bk.NATIVE.run(inputs)
                return time.perf_counter() - t0
            finally:
                del os.environ["GRPO_MONITOR_CACHE_DIR"]
    return run_times(lambda: BACKENDS[name].run(inputs), 1)[0]


def time_size(tokens: int, reps: int, names: list[str], trainer: bool, spread: float,
              sampler: bool = False, padding: str = "right") -> dict[str, dict]:
    """``{column: {"median", "min", "first"}}`` in seconds: each backend after one warm-up call, then the floor."""
    x = make_inputs(tokens, spread=spread, sampler=sampler, padding=padding)
    inputs = token_inputs(**x)
    row: dict[str, dict] = {}
    for name in names:
        if name == "triton":
            row.update(time_triton(x, reps))
            continue
        first = first_call(name, inputs)
        if name == "native" and first != first:  # NaN: the kernel does not run here
            continue
        call = functools.partial(BACKENDS[name].run, inputs)
        call()
        times = run_times(call, reps if name != "eager" else max(3, reps // 3))
        row[name] = {"median": statistics.median(times), "min": min(times), "first": first}
    times = run_times(lambda: floor(x), reps)
    row["floor"] = {"median": statistics.median(times), "min": min(times)}
    if trainer and not sampler:
        trainer_pattern(x)
        times = run_times(lambda: trainer_pattern(x), max(3, reps // 3))
        row["trainer"] = {"median": statistics.median(times), "min": min(times)}
    return row


def time_triton(x: dict[str, torch.Tensor], reps: int) -> dict[str, dict]:
    """The Triton columns: on a GPU the kernel, the floor and the eager pass on CUDA copies (synchronised); without
    one, the interpreter on the first rows when TRITON_INTERPRET=1 (labelled so), else a note why there is none."""
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        y = {k: v.cuda() for k, v in x.items()}
        inputs = token_inputs(**y)
        if not bk.TRITON.accepts(inputs):
            return {"triton": {"note": "declined (triton missing or broken)"}}

        def synced(fn: Callable[[], object]) -> Callable[[], None]:
            return lambda: (fn(), torch.cuda.synchronize())  # type: ignore[func-returns-value]

        out: dict[str, dict] = {}
        t0 = time.perf_counter()
        synced(lambda: bk.TRITON.run(inputs))()
        first = time.perf_counter() - t0
        for col, fn, n in (("triton", lambda: bk.TRITON.run(inputs), reps), ("cuda floor", lambda: floor(y), reps),
                           ("cuda eager", lambda: bk.EAGER.run(inputs), max(3, reps // 3))):
            synced(fn)()
            times = run_times(synced(fn), n)
            out[col] = {"median": statistics.median(times), "min": min(times), "base": "cuda floor"}
        out["triton"]["first"] = first
        return out
    if os.environ.get("TRITON_INTERPRET") != "1":
        return {"triton": {"note": "no CUDA device; TRITON_INTERPRET=1 times the interpreter on the first rows"}}
    small = token_inputs(**{k: v[:INTERPRETER_ROWS] for k, v in x.items()})
    if not bk.TRITON.accepts(small):
        return {"triton": {"note": "declined (triton missing, or imported before TRITON_INTERPRET was set)"}}
    t0 = time.perf_counter()
    bk.TRITON.run(small)
    first = time.perf_counter() - t0
    times = run_times(lambda: bk.TRITON.run(small), max(1, reps // 3))
    return {f"triton (interp., {INTERPRETER_ROWS} rows)": {"median": statistics.median(times), "min": min(times),
                                                           "first": first, "base": None}}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        match = re.search(rf"{field}:\s+(\d+)", fh.read())
    assert match is not None
    return int(match.group(1))


def _peak_rise_mib(fn: Callable[[], object]) -> float:
    """Rise of the peak resident set during ``fn()`` (VmHWM reset through /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = _status_kib("VmRSS")
    fn()
    return (_status_kib("VmHWM") - before) / 1024


def measure_memory(tokens: int) -> dict[str, float]:
    """Peak RSS rise (MiB) during one warmed-up call of the selected backend and of the trainer pattern."""
    x = make_inputs(tokens)
    for _ in range(2):
        token_sufficient_stats(**x, compile=True)
        trainer_pattern(x)
    return {"monitor": _peak_rise_mib(lambda: token_sufficient_stats(**x, compile=True)),
            "trainer": _peak_rise_mib(lambda: trainer_pattern(x)), "input_mib": x["mask"].numel() * 4 / 2**20}


def memory_in_subprocess(tokens: int, threads: int | None) -> dict[str, float] | None:
    """``measure_memory`` in a fresh process whose freed blocks of >= 64 KiB leave the resident set."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    cmd = [sys.executable, os.path.abspath(__file__), "--_memory", str(tokens)]
    cmd += ["--threads", str(threads)] if threads else []
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


def print_row(label: str, row: dict[str, dict], mem: dict[str, float] | None) -> None:
    """One line per column of this size: median / min, x floor (minima) and the first call."""
    for col, t in row.items():
        if "note" in t:
            print(f"{label:>6} {col:>9}  {t['note']}", flush=True)
            continue
        base_col = t.get("base", "floor")
        ratio = f"{t['min'] / row[base_col]['min']:8.2f}" if base_col else f"{'-':>8}"  # interpreter: no ratio
        first = f"{t['first']:8.2f}s" if "first" in t else f"{'':9}"
        print(f"{label:>6} {col:>9} {t['median'] * 1e3:9.2f} / {t['min'] * 1e3:8.2f} ms {ratio}  "
              f"{first}", flush=True)
    if mem:
        print(f"{label:>6} peak resident rise: monitor {mem['monitor']:.2f} MiB, trainer {mem['trainer']:.1f} MiB "
              f"(one input: {mem['input_mib']:.1f} MiB)")


def time_routing(spec: str, reps: int) -> None:
    """Median / min ms of ``grpo_monitor.stats.routing.routing_vector`` on ``TOKENS,L,k`` int32 expert ids (a tenth
    of the engine's routes differing, 1% missing), and ns per (token, layer) pair."""
    from grpo_monitor.stats.routing import routing_vector

    size, layers, k = spec.split(",")
    tokens, L, K = int(size.upper().replace("K", "")) * (1024 if "K" in size.upper() else 1), int(layers), int(k)
    g = torch.Generator().manual_seed(0)
    rows = max(1, tokens // 1024)
    a = torch.randint(0, 128, (rows, tokens // rows, L, K), generator=g, dtype=torch.int32)
    b = torch.where(torch.rand(a.shape[:3] + (1,), generator=g) < 0.1, (a + 1) % 128, a)
    b[torch.rand(a.shape[:3], generator=g) < 0.01] = -1
    mask = torch.ones(a.shape[:2])
    times = run_times(lambda: routing_vector(mask, a, b), reps)
    med, low = statistics.median(times) * 1e3, min(times) * 1e3
    print(f"routing counts, {tokens} tokens x {L} layers x top-{K} (int32): {med:.1f} / {low:.1f} ms, "
          f"{low * 1e6 / (tokens * L):.0f} ns per (token, layer) pair")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="1M,8M,32M", help="comma-separated token counts: 1M, 8M, 32M, or nM")
    ap.add_argument("--reps", type=int, default=9, help="timed repetitions per column (eager, trainer: a third)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--backends", default="native,compiled,eager,triton", help="backends to time, comma-separated")
    ap.add_argument("--spread", type=float, default=0.1, help="scale of ref/old minus logprobs (default 0.1)")
    ap.add_argument("--no-memory", action="store_true", help="skip the per-size memory subprocess")
    ap.add_argument("--no-trainer", action="store_true", help="skip timing the trainer pattern")
    ap.add_argument("--sampler", action="store_true", help="add sampler_logprobs and entropy (seven inputs): the "
                    "grpo/mismatch and grpo/entropy slots ride in the same pass")
    ap.add_argument("--padding", choices=("right", "left", "none"), default="right",
                    help="row layout: right-padded (default), left-padded, or none (dense rows, every token valid)")
    ap.add_argument("--clock", choices=sorted(CLOCK), default="wall", help="wall clock (default) or process CPU "
                    "time (all threads; leaves out descheduled waits on a shared machine)")
    ap.add_argument("--routing", default="", help="also time observe_loss's MoE routing counts (routed_experts, "
                    "sampler_routed_experts) on TOKENS,L,k int32 ids, e.g. 64K,48,8: a pass of their own (the float "
                    "pass above does not read them)")
    ap.add_argument("--_memory", type=int, help=argparse.SUPPRESS)
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    global _clock
    _clock = CLOCK[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    if args._memory:
        print(json.dumps(measure_memory(args._memory)))
        return
    names = [n.strip() for n in args.backends.split(",")]
    unknown = set(names) - set(BACKENDS)
    if unknown:
        raise SystemExit(f"--backends takes some of {list(BACKENDS)}; got {sorted(unknown)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"CPU {torch.backends.cpu.get_cpu_capability()}, load average {os.getloadavg()[0]:.1f}; float32 inputs "
          f"(mask, advantages, logprobs, ref_logprobs, old_logprobs{SAMPLER_INPUTS if args.sampler else ''}"
          f"), T = {T}, spread {args.spread}, {args.padding} padding; "
          f"{args.reps} runs after warm-up; {args.clock} clock")
    print(f"{'tokens':>6} {'column':>9} {'median / min':>23} {'x floor':>8}  {'first':>8}")
    for label, tokens in parse_sizes(args.sizes):
        row = time_size(tokens, args.reps, names, not args.no_trainer, args.spread, args.sampler, args.padding)
        print_row(label, row, None if args.no_memory else memory_in_subprocess(tokens, args.threads))
    if args.routing:
        time_routing(args.routing, args.reps)
    rows = min(max(tokens for _, tokens in parse_sizes(args.sizes)) // T, bk.CompiledBackend.block // T)
    nf = len(TOKEN_FIELDS)
    print(f"backend buffers (analytic): native {nf} float64 per thread plus {nf} (and 4 KiB of stack per thread); "
          f"compiled about {nf} per-row float32 partials x {rows} rows per call = {nf * rows * 4 / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
