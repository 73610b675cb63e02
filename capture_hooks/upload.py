"""Background upload of spooled captures: a worker thread, a bounded queue, retries with backoff.

The training thread stages each capture into a :class:`~capture_hooks.spool.Spool` and calls
:meth:`BackgroundUploader.submit`, which only puts a wake-up token in a bounded queue (never
blocks; when the queue is full the worker is busy and will find the entry on disk anyway). The
worker, one daemon thread per uploader, does rounds: it lists the spool oldest first, claims each
entry, finalizes it (:func:`~capture_hooks.finalize.finalize_entry`: gzip, Neuron copy and
conversion, hashes, manifest) and writes it to the sink (:meth:`LandingZoneSink.write`: files, then
``manifest.json``), retrying ``retries`` times with exponential backoff and jitter
(``backoff_s * 2**i``, at most ``backoff_max_s``, times 0.5-1.0). An entry is deleted only after
the sink accepted its manifest, so nothing is lost; every retry rewrites the same keys of the same
capture folder, so nothing is duplicated.

When an upload still fails, the store is taken as unreachable: the round stops and the entries
stay spooled. The next round starts at the next capture, every ``retry_interval_s`` while
something is pending, at :meth:`flush` (``TraceCapture.stop``) and at interpreter exit
(``atexit``, bounded by ``exit_timeout_s``). What is still spooled when the process ends is
uploaded by the next process of the same job and rank that writes to the same sink, or by
:func:`drain_spool`.

The worker thread lowers its own scheduling priority (nice +10, Linux, per thread; threads it
starts, such as fsspec's I/O loop, inherit it) so that compression and uploads yield the CPU to the
training thread where the kernel honors it.

Errors never propagate: they are logged once per uploader (WARNING, further ones at DEBUG) and
counted (:attr:`BackgroundUploader.failed`).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from capture_hooks.finalize import finalize_entry
from capture_hooks.sink import LandingZoneSink
from capture_hooks.spool import _CLAIM, _READY, Spool, read_meta

__all__ = ["BackgroundUploader", "drain_spool"]

logger = logging.getLogger("capture_hooks")

_LIVE: weakref.WeakSet[BackgroundUploader] = weakref.WeakSet()
_MAX_FINALIZE_TRIES = 3


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class BackgroundUploader:
    """Uploads the entries of one spool to one sink, in a worker thread (or inline).

    Args:
        sink: the landing zone.
        spool: where captures wait.
        background: run uploads in a daemon thread (default); False runs each round in the caller.
        retries: upload attempts per entry and round (>= 1).
        backoff_s, backoff_max_s: first and largest pause between attempts, seconds.
        queue_size: capacity of the wake-up queue.
        retry_interval_s: pause between rounds while entries are pending, seconds.
        exit_timeout_s: how long the ``atexit`` hook waits for pending uploads, seconds.
        convert_neuron, conversion_timeout_s: passed to :func:`~capture_hooks.finalize.finalize_entry`.
        on_commit: called with the committed capture folder URI (worker thread).
        nice: niceness added to the worker thread (Linux; default 10), so it yields the CPU to training.

    Attributes:
        committed: URIs committed by this uploader, in order.
        failed: names of entries whose upload failed at least once (a capture counts once).
        errors: total number of failed rounds (attempt series) over all entries.
        discarded: entries given up after repeated finalize errors (kept on disk as ``.failed-*``).
    """

    def __init__(
        self,
        sink: LandingZoneSink,
        spool: Spool,
        *,
        background: bool = True,
        retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        queue_size: int = 16,
        retry_interval_s: float = 30.0,
        exit_timeout_s: float = 30.0,
        convert_neuron: bool = True,
        conversion_timeout_s: float = 900.0,
        on_commit: Callable[[str], None] | None = None,
        nice: int = 10,
    ) -> None:
        if retries < 1 or queue_size < 1 or backoff_s < 0 or backoff_max_s < 0 or retry_interval_s <= 0:
            raise ValueError("retries and queue_size must be >= 1, backoff_s/backoff_max_s >= 0, retry_interval_s > 0")
        self.sink = sink
        self.spool = spool
        self.background = background
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.retry_interval_s = float(retry_interval_s)
        self.exit_timeout_s = float(exit_timeout_s)
        self.convert_neuron = convert_neuron
        self.conversion_timeout_s = conversion_timeout_s
        self.on_commit = on_commit
        self.nice = int(nice)
        self.committed: list[str] = []
        self.failed: set[str] = set()
        self.errors = 0
        self.discarded: list[str] = []
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._round_lock = threading.Lock()
        self._closing = threading.Event()
        self._logged = False
        self._down_since: float | None = None
        self._finalize_tries: dict[str, int] = {}
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"BackgroundUploader({self.sink!r}, {self.spool!r})"

    # ------------------------------------------------------------------ caller side

    @property
    def pending(self) -> int:
        """Entries of this spool not yet uploaded (staged or claimed)."""
        try:
            return len(self.spool.ready()) + sum(".claim-" in n for n in os.listdir(self.spool.root))
        except OSError:
            return 0

    @property
    def store_down(self) -> bool:
        """True since an upload round failed, until the next successful upload."""
        return self._down_since is not None

    def submit(self, name: str | None = None) -> None:
        """Signal that an entry (``name``, informational) was staged. Never blocks, never raises."""
        if not self.background:
            self.process()
            return
        try:
            self._ensure_thread()
            self._queue.put_nowait(name)
        except queue.Full:
            pass  # the worker is busy and rescans the spool before it sleeps
        except Exception:  # noqa: BLE001 - e.g. cannot start a thread at interpreter shutdown
            logger.debug("tracelake capture: could not wake the upload worker", exc_info=True)

    def flush(self, timeout: float | None = 60.0) -> bool:
        """Run an upload round now and wait for it (at most ``timeout`` seconds).

        Returns:
            True when nothing is pending afterwards (everything committed).
        """
        if self.pending == 0:
            return True
        if not self.background or self._closing.is_set():
            self.process()
            return self.pending == 0
        marker = _Flush()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._ensure_thread()
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        marker.done.wait(remaining)
        return self.pending == 0

    def close(self, timeout: float | None = 60.0) -> bool:
        """Flush (at most ``timeout`` seconds), then stop the worker. Returns :meth:`flush`'s result."""
        ok = self.flush(timeout)
        self._closing.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            try:
                self._queue.put(_STOP, timeout=1.0)
            except queue.Full:
                pass
            thread.join(timeout=2.0)
        _LIVE.discard(self)
        if ok:
            self._prune_empty_folders()
        return ok

    def _prune_empty_folders(self) -> None:
        """Remove the spool folder and its ``rank=``/``job=`` parents when empty (``rmdir`` only; best effort)."""
        path = self.spool.root
        for _ in range(3):
            try:
                os.rmdir(path)
            except OSError:
                return
            path = os.path.dirname(path)

    # ------------------------------------------------------------------ worker side

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._closing.clear()
                self._thread = threading.Thread(target=self._run, name="tracelake-upload", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        _lower_thread_priority(self.nice)
        while True:
            try:
                timeout = self.retry_interval_s if self._down_since is not None else None
                try:
                    items = [self._queue.get(timeout=timeout)]
                except queue.Empty:
                    items = []
                while True:  # coalesce queued wake-ups into one round
                    try:
                        items.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(i is _STOP for i in items)
                if not stop or any(isinstance(i, _Flush) for i in items):
                    self.process()
                for item in items:
                    if isinstance(item, _Flush):
                        item.done.set()
                if stop:
                    return
            except Exception as exc:  # noqa: BLE001 - the worker must survive anything
                self._report(exc, "upload worker")
                time.sleep(min(1.0, self.retry_interval_s))

    def process(self) -> int:
        """One upload round in the calling thread; returns the number of captures committed."""
        with self._round_lock:
            done = 0
            for name in self.spool.ready():
                claimed = self.spool.claim(name)
                if claimed is None:
                    continue
                outcome = self._process_entry(name, claimed)
                if outcome == "committed":
                    self.spool.remove(claimed)
                    done += 1
                elif outcome == "discard":
                    self._discard(claimed, name)
                else:
                    self.spool.release(claimed)
                    if outcome == "down":
                        # store unreachable: keep the rest spooled for the next round (they count as failed)
                        self.failed.update(n for n in self.spool.ready() if n > name)
                        break
            return done

    def _process_entry(self, name: str, claimed: str) -> str:
        try:
            meta = read_meta(claimed)
            if meta.get("sink") not in (None, self.sink.root):
                return "skip"
            upload = finalize_entry(
                claimed, convert_neuron=self.convert_neuron, conversion_timeout_s=self.conversion_timeout_s
            )
        except Exception as exc:  # noqa: BLE001
            tries = self._finalize_tries.get(name, 0) + 1
            self._finalize_tries[name] = tries
            self.failed.add(name)
            self.errors += 1
            self._report(exc, f"finalizing spooled capture {name}")
            return "discard" if tries >= _MAX_FINALIZE_TRIES else "skip"
        last: BaseException | None = None
        for attempt in range(self.retries):
            if attempt:
                delay = min(self.backoff_max_s, self.backoff_s * (2 ** (attempt - 1))) * (0.5 + random.random() / 2)
                if self._closing.wait(delay):
                    break  # closing: do not keep the exit waiting on backoff
            try:
                uri = self.sink.write(upload)
            except Exception as exc:  # noqa: BLE001
                last = exc
                continue
            self._committed(uri, name)
            return "committed"
        self.failed.add(name)
        self.errors += 1
        if self._down_since is None:
            self._down_since = time.monotonic()
        self._report(
            last,
            f"uploading capture {name} to {self.sink.root} ({self.retries} attempts); it stays "
            f"spooled in {self.spool.root} and is retried later",
        )
        return "down"

    def _committed(self, uri: str, name: str) -> None:
        if self._down_since is not None:
            logger.info(
                "tracelake capture: sink %s reachable again after %.1f s; uploading spooled captures",
                self.sink.root,
                time.monotonic() - self._down_since,
            )
            self._down_since = None
        self._finalize_tries.pop(name, None)
        self.committed.append(uri)
        if self.on_commit is not None:
            try:
                self.on_commit(uri)
            except Exception:  # noqa: BLE001
                logger.debug("tracelake capture: on_commit callback failed", exc_info=True)

    def _discard(self, claimed: str, name: str) -> None:
        self.discarded.append(name)
        self.failed.add(name)
        dest = os.path.join(self.spool.root, f".failed-{name}")
        try:
            os.rename(claimed, dest)
        except OSError:
            dest = claimed
        logger.warning("tracelake capture: spooled capture %s cannot be finalized; kept at %s", name, dest)

    def _report(self, exc: BaseException | None, what: str) -> None:
        if not self._logged:
            self._logged = True
            logger.warning(
                "tracelake capture: export failed: %s (%s: %s); training continues "
                "(further upload failures are logged at DEBUG)",
                what,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
        else:
            logger.debug("tracelake capture: %s failed again: %r", what, exc)


def drain_spool(
    spool_dir: str,
    sink: str | LandingZoneSink,
    *,
    storage_options: dict[str, Any] | None = None,
    retries: int = 3,
    backoff_s: float = 0.5,
) -> tuple[list[str], int]:
    """Upload every capture spooled under ``spool_dir`` for ``sink``, in the calling thread.

    For operators: after a job ended while the store was unreachable, run
    ``drain_spool("/tmp/tracelake-spool", "s3://bucket/raw")`` on the node. Entries meant for
    another sink are left alone.

    Returns:
        ``(committed URIs, entries still pending)``. Never raises for upload errors (they are logged).
    """
    if not isinstance(sink, LandingZoneSink):
        sink = LandingZoneSink(sink, storage_options=storage_options)
    committed: list[str] = []
    pending = 0
    for folder, dirs, _names in os.walk(spool_dir):
        entries = [d for d in dirs if _READY.match(d) or _CLAIM.match(d)]
        if not entries:
            continue
        dirs[:] = [d for d in dirs if d not in entries]
        uploader = BackgroundUploader(
            sink, Spool(folder, max_bytes=1 << 62), background=False, retries=retries, backoff_s=backoff_s
        )
        uploader.process()
        committed.extend(uploader.committed)
        pending += sum(1 for n in uploader.spool.ready() if _entry_sink(os.path.join(folder, n)) in (None, sink.root))
        _LIVE.discard(uploader)
    return committed, pending


def _entry_sink(entry: str) -> str | None:
    """The sink root recorded in a spool entry (``None`` when unreadable: counted as ours)."""
    try:
        return read_meta(entry).get("sink")
    except (OSError, ValueError):
        return None


def _lower_thread_priority(increment: int) -> None:
    """Raise this thread's nice value by ``increment`` (Linux: per thread), so that compression, hashing
    and conversion yield the CPU to the training thread. Best effort; no-op elsewhere."""
    if increment <= 0 or not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        tid = threading.get_native_id()
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + increment))
    except OSError:
        pass


@atexit.register
def _flush_at_exit() -> None:
    """Give pending uploads a last chance (bounded by each uploader's ``exit_timeout_s``)."""
    for uploader in list(_LIVE):
        try:
            if uploader.pending:
                uploader.close(uploader.exit_timeout_s)
        except Exception:  # noqa: BLE001
            pass
