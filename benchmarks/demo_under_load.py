#!/usr/bin/env python3
"""The demo's regression verdict on a busy machine (issue 27): ``tracelake demo`` run while ``--hogs`` processes
(default: one per core) spin on the CPU, as on a shared node. The slow run's job step p50 row must never say
``unchanged`` (a 20 ms-per-step slowdown is there); ``regression`` or ``inconclusive`` with its reason are honest.

Prints, per repeat, the ``regressions.summary`` of the slow run's ``step_time_p50_ns`` row and ``ok``/``MISSED``.
Needs torch (the demo trains a real 2-rank gloo DDP job). Usage (from the repo root)::

    .venv/bin/python benchmarks/demo_under_load.py [--repeat 1] [--hogs 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jobs.warehouse import read_pandas  # noqa: E402


def _spin() -> None:
    while True:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    ok = True
    for i in range(a.repeat):
        hogs = [mp.Process(target=_spin, daemon=True) for _ in range(a.hogs)]
        for h in hogs:
            h.start()
        t0 = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory() as work:
                cmd = [str(ROOT / ".venv" / "bin" / "tracelake"), "demo", "--workdir", work]
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
                    return 2
                r = read_pandas(str(Path(work) / "warehouse"), ("regressions",))["regressions"]
        finally:
            for h in hogs:
                h.kill()
        p50 = r[r["job_id"].str.endswith("-slow") & (r["metric"] == "step_time_p50_ns")].iloc[0]
        good = p50["verdict"] != "unchanged"
        ok &= good
        print(
            f"repeat {i + 1}, {a.hogs} CPU hog(s), {time.perf_counter() - t0:.0f} s: {p50['summary']} — "
            f"never 'unchanged': {'ok' if good else 'MISSED'}",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
