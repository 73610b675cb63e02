"""Corpus jobs through normalize and analyze in-process, for the findings tests (``test_findings.py``,
``test_rule_coverage.py``, ``test_windows.py``): parse each rank's trace (:func:`jobs.normalize.kineto.parse.parse_kineto`),
run stage 1 per rank and stage 2 per job (:func:`jobs.analyze.job.rank_tables`, :func:`jobs.analyze.job.job_tables`)
and return the tables :func:`jobs.analyze.findings.ranking.job_findings` reads, plus the ``captures`` rows it needs
for the whole-trace windows (``capture_id``, ``rank``, ``trace_start_ns``, ``trace_end_ns``, ``flags`` from the
parser's metadata)."""

from __future__ import annotations

import glob
from functools import cache
from pathlib import Path

import pandas as pd
import pyarrow as pa

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"
TORCH = CORPUS / "torch"
#: name → glob (relative to the torch corpus) of the job's rank traces.
JOBS = {
    "dlrm": "param/dlrm_kineto/*.json",
    "alexnet": "HolisticTraceAnalysis/critical_path/alexnet/*.json.gz",
    "cpu_only": "HolisticTraceAnalysis/cpu_only/*.json.gz",
    "ns_resolution": "HolisticTraceAnalysis/ns_resolution_trace/*.json.gz",
}
_EXPECTED_FILES = {"dlrm": 8, "alexnet": 1, "cpu_only": 1, "ns_resolution": 1}


def files_of(name: str) -> list[str]:
    """The corpus files of job ``name`` (sorted); empty when the corpus is absent."""
    return sorted(glob.glob(str(TORCH / JOBS[name])))


def available(name: str) -> bool:
    """Whether the corpus holds every file of job ``name``."""
    return len(files_of(name)) == _EXPECTED_FILES[name]


@cache
def corpus_job(name: str) -> tuple[dict[str, pd.DataFrame], dict[int, pa.Table]]:
    """(tables for ``job_findings`` incl. ``captures``, events per rank) of corpus job ``name`` (job id = ``name``,
    attempt 0). Cached: treat the frames as read-only."""
    from jobs.analyze.efficiency.ops import add_device_peaks
    from jobs.analyze.findings.ranking import EVENTS_COLUMNS, rule_events_filter
    from jobs.analyze.job import job_tables, rank_tables
    from jobs.normalize.identity import with_identity
    from jobs.normalize.kineto.parse import parse_kineto

    events, per_rank, captures = {}, [], []
    for i, f in enumerate(files_of(name)):
        p = parse_kineto(Path(f).read_bytes(), f)
        r = p.meta.get("rank")
        r = int(r) if r is not None else i
        cap = f"cap{r}"
        ev = with_identity(p.events, dict(date="2023-09-08", job_id=name, attempt=0, rank=r, capture_id=cap))
        events[r] = ev
        per_rank.append(rank_tables(ev))
        captures.append(
            dict(
                date="2023-09-08",
                job_id=name,
                attempt=0,
                rank=r,
                capture_id=cap,
                trace_start_ns=p.meta.get("trace_start_ns"),
                trace_end_ns=p.meta.get("trace_end_ns"),
                flags=list(p.meta.get("flags") or []),
                device_name=p.meta.get("device_name"),
            )
        )
    job = job_tables(*(pa.concat_tables([t[n] for t in per_rank]) for n in ("_calls", "_legs")))
    tables: dict[str, pd.DataFrame] = {}
    for tname in (
        "steps", "ranks", "kernels", "collectives", "critical_path", "op_efficiency", "utilization_windows", "comm_sites",
    ):  # fmt: skip
        parts = [t[tname] for t in [*per_rank, job] if tname in t]
        tables[tname] = pa.concat_tables(parts).to_pandas() if parts else pd.DataFrame()
    # the device's peaks, as the analyze driver adds them from the captures
    tables["op_efficiency"] = add_device_peaks(
        tables["op_efficiency"].assign(device_name=[c["device_name"] for c in captures][0])
    )
    sync = []
    for ev in events.values():
        sync.append(ev.filter(rule_events_filter()).select(list(EVENTS_COLUMNS)))
    tables["events"] = pa.concat_tables(sync).to_pandas()
    tables["captures"] = pd.DataFrame(captures)
    return tables, events
