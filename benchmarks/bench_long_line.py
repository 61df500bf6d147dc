"""One long JSONL line: peak memory and time of reading it, against its size (not a test: run it by hand).

    .venv/bin/python benchmarks/bench_long_line.py [--sizes 25,50,100,200] [--dir /tmp]

For each size (MiB), a fresh process writes a generic JSONL file whose second row holds a
``completion`` of that many bytes (written in 1 MiB pieces, so the writing does not count),
then reads it with the scan's reader (``JsonlReader.steps()``) and prints the seconds and
the rise of peak RSS (``VmHWM``, reset before reading) over the line's size. Linear reading shows as flat
MiB/s and a flat multiple (about 2x: the bytes and their decoded text, then the text and
the parsed string).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
from pathlib import Path
from grpo_monitor.tools.scan.readers import JsonlReader
path, size = Path(sys.argv[1]), int(sys.argv[2])
with open(path, "w") as f:
    f.write(json.dumps({"step": 0, "group": 0, "reward": 1.0}) + "\n")
    f.write('{"step": 0, "group": 0, "reward": 0.0, "completion": "')
    for _ in range(size >> 20):
        f.write("x" * (1 << 20))
    f.write('"}\n')
def status(key):  # kB figures of /proc/self/status (ru_maxrss would carry the parent's peak across exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
reader = JsonlReader(path)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current size
base = status("VmRSS:")
start = time.perf_counter()
steps = list(reader.steps())
seconds = time.perf_counter() - start
peak = status("VmHWM:") - base
path.unlink()
print(json.dumps({"seconds": seconds, "peak": peak}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="25,50,100,200", help="line sizes in MiB, comma-separated")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the test file is written")
    args = parser.parse_args()
    print(f"{'line MiB':>9} {'seconds':>8} {'MiB/s':>7} {'peak RSS rise / line':>21}")
    for mib in (int(s) for s in args.sizes.split(",")):
        path = Path(args.dir) / f"grpo-bench-long-line-{mib}.jsonl"
        proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(mib << 20)], capture_output=True,
                              text=True, check=True)
        found = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{mib:>9} {found['seconds']:>8.2f} {mib / found['seconds']:>7.0f} "
              f"{found['peak'] / (mib << 20):>20.2f}x")


if __name__ == "__main__":
    main()
