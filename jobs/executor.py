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
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from functools import partial

#: Worker processes of the local executor (default: the CPUs this process may run on).
WORKERS_ENV = "TRACELAKE_LOCAL_WORKERS"


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as ``taskset`` sets it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


#: Modules the fork server imports once, before it forks the workers (they start with them loaded).
PRELOAD = ("numpy", "pandas", "pyarrow.dataset", "pyarrow.parquet", "jobs.warehouse")


class LocalExecutor:
    """The embedded executor: a pool of worker processes on this machine, no JVM.

    The pool starts at the first :meth:`map` and is kept for the run (every stage reuses it), so
    worker start-up is paid once. Workers are forked from a fork server (``multiprocessing`` "forkserver"), not
    from the driver: the driver's delta-rs runtime (its threads) must never be copied into a child, which would
    panic on its first table read. The fork server imports :data:`PRELOAD` (and ``preload`` of :meth:`start`)
    once, so workers start in milliseconds with them loaded. Each task runs with the driver's environment at
    the time of the :meth:`map` call.

    Args:
        workers: processes in the pool (default ``$TRACELAKE_LOCAL_WORKERS`` or :func:`available_cpus`).
    """

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = int(workers or os.environ.get(WORKERS_ENV) or available_cpus())
        self._pool: ProcessPoolExecutor | None = None
        self._preload: tuple[str, ...] = PRELOAD
        self._starter: threading.Thread | None = None

    def start(self, preload: Iterable[str] = (), wait: bool = True) -> LocalExecutor:
        """Start the pool and its workers now (each runs a no-op). Returns ``self``.

        ``preload``: more modules for the fork server to import before it forks the workers (e.g. Great
        Expectations, ~3 CPU s to import): paid once, inherited by every worker. Only before the pool first
        starts in this process (the fork server is started once). ``wait=False``: start them in a thread and return
        at once, so that this process's own imports overlap the fork server's; the first :meth:`map` waits for them.
        """
        self._preload = tuple(dict.fromkeys([*self._preload, *preload]))
        pool = self._ensure_pool()
        if wait:
            list(pool.map(_noop, range(self.workers)))
        else:
            self._starter = threading.Thread(target=lambda: list(pool.map(_noop, range(self.workers))), daemon=True)
            self._starter.start()
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
        return self._ensure_pool().map(partial(_with_env, dict(os.environ), fn), items, chunksize=1)

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(list(self._preload))
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx)
        return self._pool

    def close(self) -> None:
        """Stop the pool's workers (the executor can be used again: a new pool starts)."""
        if self._starter is not None:
            self._starter.join()
            self._starter = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalExecutor(workers={self.workers})"


@contextmanager
def main_script_hidden() -> Iterator[None]:
    """Hide this process's ``__main__.__file__`` for the duration, so that workers started meanwhile do not run it.

    multiprocessing starts each worker by running the parent's main script (by path) as ``__mp_main__``. In an
    Airflow task that script is Airflow's CLI, and importing airflow there fails (a task process has no metadata
    database); elsewhere it only costs the workers its imports. The local executor's workers run module-level
    functions of importable modules, never of ``__main__``.
    """
    main = sys.modules["__main__"]
    path = main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        if path is not None:
            main.__file__ = path


def _with_env(env: dict, fn: Callable, item):
    """Run ``fn(item)`` in a worker with the driver's environment of the map call."""
    if os.environ != env:
        os.environ.clear()
        os.environ.update(env)
    return fn(item)


def _noop(_item) -> None:
    return None


def is_local(engine) -> bool:
    """Whether a stage's ``engine`` is the :class:`LocalExecutor` (else it is a SparkSession)."""
    return isinstance(engine, LocalExecutor)
