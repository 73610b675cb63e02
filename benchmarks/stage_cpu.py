#!/usr/bin/env python3
"""``python benchmarks/stage_cpu.py <tracelake arguments>``: the ``tracelake`` CLI, with the wall and CPU s of each
pipeline stage (:func:`jobs.pipeline.stages.run_stage`) printed to stderr, one line each::

    STAGE <name> <wall s> <CPU s>

CPU s: this process and every live descendant (the local executor's workers, a Spark JVM), user + system, from
psutil, read when the stage starts and when it ends. A benchmark reads one stage's cost out of a whole run (e.g.
``fleet_scale.py``: the ``publish`` stage, without the noise of the stages before it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]


def tree_cpu_s() -> float:
    """CPU s (user + system, and those of the children it waited for) of this process and its live descendants."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            c = p.cpu_times()
            total += c.user + c.system + c.children_user + c.children_system
        except psutil.Error:  # gone meanwhile
            pass
    return total


def main(argv: list[str]) -> int:
    import jobs.pipeline.stages as stages
    from jobs.cli import app

    run_stage = stages.run_stage

    def timed(name, *args, **kwargs):
        wall, cpu = time.perf_counter(), tree_cpu_s()
        try:
            return run_stage(name, *args, **kwargs)
        finally:
            print(
                f"STAGE {name} {time.perf_counter() - wall:.3f} {tree_cpu_s() - cpu:.3f}", file=sys.stderr, flush=True
            )

    stages.run_stage = timed
    try:
        app(argv, prog_name="tracelake")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
