"""Issue 33: one file's parse is bounded in memory and time (``jobs.normalize.limits.ParseBudget``), a gzip bomb stops
at the decompression ratio, and what goes past a bound is quarantined with the figure while the batch goes on."""

from __future__ import annotations

import time
import zlib

import psutil
import pytest

from jobs.landing.discover import CaptureFile
from jobs.normalize.container import iter_decoded
from jobs.normalize.job import normalize_file
from jobs.normalize.limits import LimitExceeded, ParseBudget, ParseLimits, parse_budget


def test_budget_names_the_figure_it_went_past():
    rss = psutil.Process().memory_info().rss
    b = ParseBudget(max_memory_bytes=rss + (64 << 20), max_seconds=3600)
    b.check()
    held = bytearray(160 << 20)  # resident: written, not only reserved
    held[::4096] = b"x" * len(held[::4096])
    with pytest.raises(LimitExceeded, match=r"parse memory past the ceiling of \d+ MiB \(\d+ MiB resident\)"):
        b.check()
    del held
    t = ParseBudget(max_memory_bytes=1 << 40, max_seconds=0.01)
    time.sleep(0.05)
    with pytest.raises(LimitExceeded, match=r"parse ran past the limit of 0.01 s"):
        t.check()


def test_a_gzip_bomb_stops_at_the_ratio_not_at_the_size_cap():
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = co.compress(b"[") + b"".join(co.compress(b" " * (1 << 24)) for _ in range(16)) + co.flush()
    decoded = 0
    with pytest.raises(LimitExceeded, match=r"decompression ratio above the limit of 200:1") as e:
        for piece in iter_decoded(bomb):
            decoded += len(piece)
    # stopped once past the ratio (judged from 64 MiB decoded on), within one 4 MiB piece; far below the 8 GiB cap
    assert decoded <= max(64 << 20, 200 * len(bomb)) + (4 << 20)
    assert f"from {len(bomb)} stored" in str(e.value)


def test_a_parse_past_its_memory_ceiling_is_quarantined_and_the_next_file_parses(CORPUS):
    owl = CORPUS / "torch" / "TraceLens" / "h100" / "google_owlv2-large-patch14-ensemble__1016001.json.gz"
    small = CORPUS / "torch" / "HolisticTraceAnalysis" / "trace_filter" / "sampled_rank-0.json.gz"
    tight = ParseLimits(max_memory_bytes=psutil.Process().memory_info().rss + (16 << 20))

    def task(p):
        return CaptureFile(uri=str(p), capture_id=p.name[:12], job_id="j", size_bytes=p.stat().st_size).to_dict()

    cap, events = normalize_file(task(owl), owl.read_bytes(), limits=tight)
    assert cap["status"] == "quarantined" and events is None
    assert "parse memory past the ceiling of" in cap["reason"] and str(owl) in cap["reason"]
    cap, events = normalize_file(task(small), small.read_bytes())
    assert cap["status"] == "ingested" and events.num_rows > 0


def test_budgets_nest_per_file_and_end_with_it():
    from jobs.normalize.limits import check_budget

    with parse_budget(1 << 40, 0.01):
        time.sleep(0.03)
        with pytest.raises(LimitExceeded):
            check_budget()
    check_budget()  # outside a file's parse: nothing to check
