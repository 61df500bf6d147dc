"""The C token kernel's roofline on this CPU, dense rows, seven inputs, one thread (not a test: run it by hand).

    .venv/bin/python benchmarks/roofline_tokens.py [--tokens 8M] [--reps 9] [--rounds 3]

Builds ``roofline_driver.c`` after the kernel's own source (``native_build.source_text()``, the
same flags) into a standalone program and measures, each the minimum CPU time over ``reps``
runs, repeated ``rounds`` times (the machine is shared: the minimum is the figure least
inflated by other jobs):

* ``floor``: one AVX2 sum over each of the seven float32 inputs, every token valid (read once);
* ``kernel``: ``grpo_token_stats`` on the same dense batch, one thread;
* ``fma``: eight independent chains of 256-bit FMAs (the core's arithmetic peak, lanes per ns);
* ``exp``: the kernel's exponential polynomial (k3 and expm1 of 8 floats) over an L1-resident
  block (what a simple exp loop sustains per token).

With ``valgrind`` on the PATH, callgrind counts the instructions the kernel and the exp loop
retire per token (on a 64K-token dense batch), and the roofline follows: the kernel's
instructions per token at the exp loop's sustained instruction rate is its arithmetic floor,
set against the read-once floor and the kernel's measured time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from grpo_monitor.stats.tokens import native_build  # noqa: E402

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roofline_driver.c")
T = 4096


def build(folder: str) -> str:
    """The driver compiled after the kernel source, with the kernel's flags (less -shared / -fPIC)."""
    with open(DRIVER) as fh:
        src = native_build.source_text() + '\n#line 1 "roofline_driver.c"\n' + fh.read()
    exe = os.path.join(folder, "roofline_driver")
    flags = [f for f in native_build.FLAGS if f not in ("-shared", "-fPIC")]
    res = subprocess.run([native_build.compiler(), *flags, "-o", exe, "-x", "c", "-", "-lm"], input=src, text=True,
                         capture_output=True)
    if res.returncode:
        raise SystemExit(f"building the driver failed: {res.stderr[-2000:]}")
    return exe


def measure(exe: str, *args: object) -> float:
    return float(subprocess.run([exe, *map(str, args)], capture_output=True, text=True, check=True).stdout)


def instructions(exe: str, fn: str, *args: object) -> int | None:
    """Instructions retired inside ``fn`` (callgrind), or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(["valgrind", "--tool=callgrind", f"--toggle-collect={fn}",
                              f"--callgrind-out-file={tmp}/cg", exe, *map(str, args)], capture_output=True, text=True)
    match = re.search(r"I\s+refs:\s+([\d,]+)", res.stderr)
    return int(match.group(1).replace(",", "")) if match else None


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--tokens", default="8M", help="dense tokens (nM), T = 4096")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    B = (int(args.tokens.rstrip("Mm")) << 20) // T
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(tmp)
        rounds = [{"floor": measure(exe, "floor", B, T, args.reps), "kernel": measure(exe, "kernel", B, T, args.reps),
                   "fma": measure(exe, "fma", 50_000_000), "exp": measure(exe, "exp", 20_000)}
                  for _ in range(args.rounds)]
        best = {k: (max if k == "fma" else min)(r[k] for r in rounds) for k in rounds[0]}
        small = 16
        ins_kernel = instructions(exe, "run_kernel", "kernel", small, T, 1)
        ins_exp = instructions(exe, "run_exp", "exp", 100)
    print(f"load average {os.getloadavg()[0]:.1f}; {B} x {T} dense tokens, seven inputs, one thread; min CPU time of "
          f"{args.reps} runs, best of {args.rounds} rounds")
    for r in rounds:
        print("  round: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()))
    print(f"read-once floor   {best['floor']:.3f} ns/token")
    print(f"kernel            {best['kernel']:.3f} ns/token = {best['kernel'] / best['floor']:.2f} x floor")
    print(f"fma loop          {best['fma']:.2f} float32 FMAs/ns ({best['fma'] / 8:.2f} 256-bit FMAs/ns)")
    print(f"exp loop          {best['exp']:.4f} ns/token")
    if ins_kernel and ins_exp:
        per_token, exp_per_token = ins_kernel / (small * T), ins_exp / (100 * 1024)
        rate = exp_per_token / best["exp"]  # instructions per ns a simple vector loop sustains here
        arith = per_token / rate
        print(f"instructions      kernel {per_token:.1f}/token, exp loop {exp_per_token:.2f}/token "
              f"(sustained {rate:.1f}/ns)")
        print(f"arithmetic floor  {arith:.3f} ns/token = {arith / best['floor']:.2f} x the read-once floor; "
              f"the kernel runs at {best['kernel'] / arith:.2f} x its arithmetic floor")
    else:
        print("instructions      (valgrind not found: no instruction counts, no arithmetic floor)")


if __name__ == "__main__":
    main()
