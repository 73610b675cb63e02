"""Where the stages' Arrow transforms run: a Spark cluster, or the embedded local executor.

Every stage is one set of pure transforms over Arrow tables (:func:`jobs.normalize.job.normalize_file`,
:func:`jobs.analyze.job.rank_tables`, :func:`jobs.analyze.job.job_tables`, the validation suites, the
fleet reduction) and two ways to run them, chosen by the *engine* handed to the stage:

* a ``SparkSession`` — what the DAGs submit and what any cluster runs: the transforms run in
  ``mapInArrow``/``applyInArrow`` on the executors, reads and writes go through Spark;
* a :class:`LocalExecutor` — what ``tracelake run`` uses by default on one machine: the same transforms
  in a pool of worker processes (one per CPU this process may run on), reads through
  ``pyarrow.dataset``, each worker writing its output rows as Parquet into the run's work folder, which
  the driver hands to the storage seam's crash-safe write (:func:`jobs.warehouse.write_table`). No JVM starts.

Both leave identical tables (``tests/integration/test_executors.py``). Memory: a worker holds one
task (one raw file, one rank's events, one job's calls) at a time, so its peak is set by the largest
task, not by the fleet.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor

#: Worker processes of the local executor (default: the CPUs this process may run on).
WORKERS_ENV = "TRACELAKE_LOCAL_WORKERS"


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as ``taskset`` sets it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class LocalExecutor:
    """The embedded executor: a pool of worker processes on this machine, no JVM.

    The pool starts at the first :meth:`map` and is kept for the run (every stage reuses it), so
    worker start-up is paid once. Workers are forked: they start in milliseconds with the driver's
    imports already loaded.

    Args:
        workers: processes in the pool (default ``$TRACELAKE_LOCAL_WORKERS`` or :func:`available_cpus`).
    """

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = int(workers or os.environ.get(WORKERS_ENV) or available_cpus())
        self._pool: ProcessPoolExecutor | None = None

    def start(self, warm: Callable[[], object] | None = None) -> LocalExecutor:
        """Start the pool and fork its workers now (each runs a no-op): afterwards the driver may start
        threads without a later fork copying their locks. Returns ``self``.

        ``warm``: called in the driver first, before the fork: imports and set-up every worker would
        otherwise repeat (e.g. the Great Expectations context, ~5 CPU s per process) are then paid once
        and inherited by the workers.
        """
        if warm is not None and self._pool is None:
            warm()
        list(self._ensure_pool().map(_noop, range(self.workers)))
        return self

    def map(self, fn: Callable, items: Iterable) -> Iterator:
        """``fn(item)`` for every item, in the pool; results in the order of ``items``.

        ``fn`` must be a module-level function and items and results picklable. Put the largest items
        first: they are handed out in order as workers become free.

        Raises:
            whatever ``fn`` raises (the first failure, in item order); ``BrokenProcessPool`` when a
            worker died (killed, out of memory).
        """
        items = list(items)
        if not items:
            return iter(())
        return self._ensure_pool().map(fn, items, chunksize=1)

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"))
        return self._pool

    def close(self) -> None:
        """Stop the pool's workers (the executor can be used again: a new pool starts)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalExecutor(workers={self.workers})"


def _noop(_item) -> None:
    return None


def is_local(engine) -> bool:
    """Whether a stage's ``engine`` is the :class:`LocalExecutor` (else it is a SparkSession)."""
    return isinstance(engine, LocalExecutor)
