"""Scan speed against parsing alone, and memory against the number of steps (not a test: run it by hand).

    .venv/bin/python benchmarks/bench_scan.py [--steps 1000] [--rows 1024] [--data /tmp/grpo-bench-verl]

Writes (once; reused when present) a synthetic verl ``rollout_data_dir`` in ``--data``:
``--steps`` files ``<step>.jsonl`` of ``--rows`` rows each, written the way verl's
``_write_generations`` writes them (``json.dumps(entry, ensure_ascii=False)`` per line),
with text fields of realistic length: ``input`` a chat-templated prompt of about 700
characters from a pool of 4,096 questions, ``output`` about 300 characters, plus ``gts``,
``score`` (0/1 with a per-question success rate), ``step`` and an extra ``acc`` field;
8 responses per prompt (128 groups per step at 1,024 rows).

Then, each in a fresh process:

- **parse**: read each file and ``json.loads`` every line (stdlib json, the fastest JSON
  reader grpo-monitor depends on), nothing else: the floor of any scan;
- **scan**: ``scan_rollouts`` as ``grpo-monitor scan`` runs it (JSONL and TensorBoard
  outputs, no report.html, which is built once after the loop and costs the same however
  the steps were read): large inputs are read and grouped in a child process beside the
  monitor; the ratio to parsing is the target (within 2x). **inline**: the same in one
  process (``prefetch=False``), what a machine with a single free core gets;
- **memory**: the scan of the first 100 and of all steps, peak RSS of the process
  (``ru_maxrss``) and the tracemalloc peak of the scan loop (a separate run: tracemalloc
  slows Python down), to show memory flat in the number of steps.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

G = 8
QUESTIONS = 4096
TEMPLATE = ("system\nYou are a careful assistant. Solve the problem, show your reasoning briefly, and give the final "
            "answer after '####'.\nuser\n{question}\nLet's think step by step and output the final answer after "
            "\"####\".\nassistant\n")


def _question(i: int, rng: random.Random) -> str:
    words = " ".join(rng.choice(("apples", "trains", "a number", "the sum", "twice", "each", "remaining", "cost"))
                     for _ in range(60))
    return f"Problem {i}: {words}. How many are left if {rng.randint(2, 99)} are taken away?"


def write_dump(folder: Path, steps: int, rows: int, seed: int = 0) -> None:
    """The synthetic verl dump (see the module docstring); skipped when ``folder`` already holds it."""
    stamp = folder / "bench.json"
    want = {"steps": steps, "rows": rows, "seed": seed}
    if stamp.is_file() and json.loads(stamp.read_text()) == want:
        return
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    prompts = [TEMPLATE.format(question=_question(i, rng)) for i in range(QUESTIONS)]
    rate = [rng.random() ** 2 for _ in range(QUESTIONS)]
    output = "Let me work through this. " * 12
    for step in range(1, steps + 1):
        lines = []
        for q in rng.sample(range(QUESTIONS), rows // G):
            for _ in range(G):
                entry = {"input": prompts[q], "output": output[: rng.randint(250, 320)], "gts": str(q % 97),
                         "score": float(rng.random() < rate[q]), "step": step, "acc": rng.random() < 0.5}
                lines.append(json.dumps(entry, ensure_ascii=False))
        (folder / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    stamp.write_text(json.dumps(want))


def subset(folder: Path, steps: int) -> Path:
    """A folder of hard links to (or copies of) the first ``steps`` step files: a scan refuses symlinks that leave
    the folder it reads."""
    out = Path(tempfile.mkdtemp(prefix=f"grpo-bench-{steps}-"))
    for step in range(1, steps + 1):
        try:
            os.link(folder / f"{step}.jsonl", out / f"{step}.jsonl")
        except OSError:  # another file system
            shutil.copyfile(folder / f"{step}.jsonl", out / f"{step}.jsonl")
    return out


def mode_parse(folder: Path) -> dict:
    """Read and parse every line with the stdlib's C scanner (what ``json.loads`` runs, without its wrappers)."""
    files = sorted((int(p.stem), p) for p in folder.glob("*.jsonl") if p.stem.isdigit())
    scan_once, rows = json.JSONDecoder().scan_once, 0
    start, cpu = time.perf_counter(), time.process_time()
    for _, path in files:
        records = [scan_once(line, 0)[0] for line in path.read_bytes().decode("utf-8").split("\n") if line]
        rows += len(records)
    return {"rows": rows, "seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def mode_scan(folder: Path, trace: bool, prefetch: bool | None) -> dict:
    """``scan_rollouts`` as the CLI runs it, the imports done first (they are not the scan)."""
    from torch.utils import tensorboard  # noqa: F401

    import grpo_monitor.monitor  # noqa: F401  torch and the monitor: imported before timing
    from grpo_monitor.sinks import tensorboard_sink  # noqa: F401
    from grpo_monitor.tools.scan import scan_rollouts

    out = Path(tempfile.mkdtemp(prefix="grpo-bench-out-"))
    if trace:
        import tracemalloc

        tracemalloc.start()
    start, cpu, child_cpu = time.perf_counter(), time.process_time(), _children_cpu()
    result = scan_rollouts(folder, out, quiet=True, report=False, prefetch=prefetch)
    seconds = time.perf_counter() - start
    cpu, child_cpu = time.process_time() - cpu, _children_cpu() - child_cpu
    peak = None
    if trace:
        import tracemalloc

        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {"rows": result.rows, "steps": result.steps, "seconds": seconds, "cpu": cpu + child_cpu,
            "monitor_cpu": cpu, "reader_cpu": child_cpu,
            "tracemalloc_peak_mb": peak / 2**20 if peak is not None else None,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child(mode: str, folder: Path) -> dict:
    """Run one mode in a fresh interpreter; its JSON result."""
    code = (f"import sys; sys.argv = ['bench', '--child', {mode!r}, '--data', {str(folder)!r}]; "
            f"import pathlib; exec(pathlib.Path({__file__!r}).read_text())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="offline"))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "grpo-bench-verl"))
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each; the best is shown")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = Path(args.data)
    if args.child:
        prefetch = {"scan": None, "trace": False, "inline": False}.get(args.child)
        result = mode_parse(folder) if args.child == "parse" else mode_scan(folder, args.child == "trace", prefetch)
        print(json.dumps(result))
        return
    t = time.perf_counter()
    write_dump(folder, args.steps, args.rows)
    size = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
    print(f"data: {folder}: {args.steps} steps x {args.rows} rows, {size / 2**20:,.0f} MiB "
          f"({size / (args.steps * args.rows):,.0f} bytes/row; ready in {time.perf_counter() - t:.0f} s)")
    runs = [(child("parse", folder), child("scan", folder), child("inline", folder)) for _ in range(args.repeat)]
    parse, scan, inline = (min((r[i] for r in runs), key=lambda r: r["seconds"]) for i in range(3))
    print(f"best of {args.repeat} interleaved runs; wall time (CPU time of every thread and process):")
    print(f"  parse only (stdlib json)          {parse['rows'] / parse['seconds']:>10,.0f} rows/s  "
          f"{parse['seconds']:6.2f} s ({parse['cpu']:.2f} s)")
    for label, r in (("grpo-monitor scan (default)", scan), ("  in one process (prefetch=False)", inline)):
        print(f"  {label:32}  {r['rows'] / r['seconds']:>10,.0f} rows/s  {r['seconds']:6.2f} s ({r['cpu']:.2f} s)"
              f"  = {r['seconds'] / parse['seconds']:.2f}x parsing alone ({r['cpu'] / parse['cpu']:.2f}x in CPU time)")
    bound = max(scan["reader_cpu"], scan["monitor_cpu"])
    print(f"  default scan, CPU by process: reader {scan['reader_cpu']:.2f} s, monitor {scan['monitor_cpu']:.2f} s: "
          f"with a free core for each, the scan takes ~{bound:.2f} s = {bound / parse['cpu']:.2f}x parsing alone")
    for steps in sorted({min(100, args.steps), args.steps}):
        part = subset(folder, steps)
        rss, traced = child("inline", part), child("trace", part)
        print(f"memory at {steps:>5} steps:  peak RSS {rss['maxrss_mb']:,.0f} MiB, "
              f"tracemalloc peak {traced['tracemalloc_peak_mb']:,.1f} MiB")


if __name__ == "__main__" or (len(sys.argv) > 1 and sys.argv[1] == "--child"):
    main()
