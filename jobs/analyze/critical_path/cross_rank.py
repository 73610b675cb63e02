"""Cross-rank critical path per (job, attempt, step): stitch the ranks' legs through collectives.

Inputs: the *boundaries* of every rank (:data:`jobs.analyze.critical_path.rank.BOUNDARIES_SCHEMA`, from
:func:`jobs.analyze.critical_path.rank.rank_critical_path`, computed per rank in parallel) and the job's
``collectives`` rows (:func:`jobs.analyze.collectives.calls.match_collectives`: call matching, last
arrival, clock offsets). The graph stitched here is small: one node per leg and per collective call.

Model. A rank's step is a chain of *legs*: local work (HTA weights) from a path origin, or from the
end of a collective, to the arrival at the next collective (its kernel start) or to the end of the
rank's own critical path. A collective completes when its last rank arrives. On the job clock
(rank clock + ``clock_offset_ns``), with ``J0`` = the earliest step start over the ranks:

* a leg from an origin starts at ``late = aligned origin time − J0`` (the rank began this chain
  late: previous-step work, input wait or untraced time);
* a leg from collective ``c`` starts when ``c`` completes: ``T(c) = T(leg of the rank that arrived
  last at c, ending at c) + that rank's kernel duration`` (arrival → completion). The last arrival
  is the observed one (``collectives.is_last_arrival``). When it or its leg is unknown, the rank's
  own kernel is used (its wait is then ``collective_wait``);
* ``T(leg) = start + length``.

The step's job critical path ends at the ``step_end`` leg with the largest ``T`` and is followed
back through the same choices. Rows (CRITICAL_PATH, ``scope = "job"``, ``path_rank = -1``), in path
order: a ``late_start`` row (bound_by ``late_start``, job-clock span ``[J0, origin]``), then per leg
one row per ``bound_by`` category with time > 0 (all with the leg's span as ``start_ns``/``end_ns``
and the category's time as ``dur_ns``; ``name`` = ``"<from> -> <to>"``; ``event_id`` = the event the
leg ends at), and per collective on the path a ``communication`` row on the last-arriving rank.
``path_length_ns`` = Σ ``dur_ns`` of the step's rows = ``T`` of the path's end. The clock offsets
found are returned as the second value (:data:`jobs.analyze.collectives.calls.SKEW_SCHEMA`).
"""

from __future__ import annotations

import copy

import pyarrow as pa

from jobs.analyze.collectives.calls import clock_skew
from jobs.analyze.critical_path.rank import BOUND_BY
from schemas.tables import CRITICAL_PATH

__all__ = ["job_critical_path", "StepGraph", "step_inputs"]

_CATS = BOUND_BY[:7]


def job_critical_path(boundaries: pa.Table, collectives: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Cross-rank critical path of every (job, attempt, step) in ``boundaries``.

    Args:
        boundaries: boundaries rows of all ranks of the job(s).
        collectives: COLLECTIVES rows of the same job(s) (may be empty: each rank then stands alone
            and the path is the rank whose chain ends last).

    Returns:
        ``(rows, skew)``: CRITICAL_PATH rows with ``scope = "job"`` (module docstring) and the clock
        offsets found per rank (``SKEW_SCHEMA``).
    """
    if boundaries.num_rows == 0:
        return CRITICAL_PATH.empty(), clock_skew(collectives)
    steps, by_event, last_of, offset = step_inputs(boundaries, collectives)
    out = []
    for (job, att, step), ls in sorted(steps.items()):
        out.extend(StepGraph(job, att, ls, by_event, last_of, offset).rows(step))
    rows = pa.Table.from_pylist(out, schema=CRITICAL_PATH.arrow_schema()) if out else CRITICAL_PATH.empty()
    return rows, clock_skew(collectives)


def step_inputs(boundaries: pa.Table, collectives: pa.Table) -> tuple[dict, dict, dict, dict]:
    """What a :class:`StepGraph` is built from: ``(legs by (job, attempt, step), call by (job, attempt, rank,
    event_id), last-arrival call by (job, attempt, match_key), clock offset by (job, attempt, rank))``."""
    legs = boundaries.to_pylist()
    calls = collectives.to_pylist() if collectives.num_rows else []
    by_event = {(c["job_id"], c["attempt"], c["rank"], c["event_id"]): c for c in calls}
    last_of = {(c["job_id"], c["attempt"], c["match_key"]): c for c in calls if c["is_last_arrival"]}
    offset: dict = {}
    for c in calls:
        offset.setdefault((c["job_id"], c["attempt"], c["rank"]), int(c["clock_offset_ns"] or 0))
    steps: dict = {}
    for lg in legs:
        steps.setdefault((lg["job_id"], lg["attempt"], lg["step"]), []).append(lg)
    return steps, by_event, last_of, offset


class StepGraph:
    """The small cross-rank graph of one step and its longest chain (module docstring).

    ``cut``: match_key → ns taken off that collective's duration (a what-if: its exposed part hidden,
    :mod:`jobs.analyze.critical_path.comm_sites`).
    """

    def __init__(self, job, att, legs, by_event, last_of, offset, cut: dict | None = None):
        self.job, self.att, self.legs = job, att, legs
        self.cut = cut or {}
        self.by_event, self.last_of = by_event, last_of
        self.off = {lg["rank"]: offset.get((job, att, lg["rank"]), 0) for lg in legs}
        self.to_leg = {(lg["rank"], lg["to_kind"], lg["to_event_id"]): lg for lg in legs}
        self.j0 = min(lg["window_start_ns"] + self.off[lg["rank"]] for lg in legs)
        self.memo: dict = {}

    def _pred(self, lg):
        """How leg ``lg`` starts: ("origin", late_ns) | ("coll", via_leg, call_row, own_kernel)."""
        r = lg["rank"]
        if lg["from_kind"] == "collective":
            call = self.by_event.get((self.job, self.att, r, lg["from_event_id"]))
            last = self.last_of.get((self.job, self.att, call["match_key"])) if call else None
            nxt = self.to_leg.get((last["rank"], "collective", last["event_id"])) if last else None
            if nxt is not None:
                return ("coll", nxt, last, False)
            own = self.to_leg.get((r, "collective", lg["from_event_id"]))
            if own is not None:
                return ("coll", own, call, True)
        return ("origin", max(lg["from_ts_ns"] + self.off[r] - self.j0, 0))

    def T(self, lg, depth=0) -> int:
        """Job-clock completion of ``lg`` relative to J0 (HTA weights), memoized."""
        key = id(lg)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = 0  # loop guard
        p = self._pred(lg)
        if p[0] == "origin" or depth > 10_000:
            start = p[1] if p[0] == "origin" else 0
        else:
            _, via, call, _own = p
            start = self.T(via, depth + 1) + self.call_dur(call, via)
        self.memo[key] = start + int(lg["length_ns"])
        return self.memo[key]

    def call_dur(self, call, via) -> int:
        """Duration of collective ``call`` (the last arrival's kernel; else ``via``'s), less its ``cut``, ns."""
        if not call:
            return int(via["to_end_ns"] - via["to_ts_ns"])
        return max(int(call["dur_ns"]) - int(self.cut.get(call["match_key"], 0)), 0)

    def with_cut(self, cut: dict) -> StepGraph:
        """The same step with ``cut`` (match_key → ns) taken off those collectives: a what-if sharing this graph's
        leg index (a fresh memo)."""
        g = copy.copy(self)
        g.cut, g.memo = dict(cut), {}
        return g

    def length(self) -> int:
        """The step's job critical path length (the largest ``T`` of a ``step_end`` leg), ns; 0 without one."""
        ends = [lg for lg in self.legs if lg["to_kind"] == "step_end"]
        return max((self.T(lg) for lg in ends), default=0)

    def rows(self, step) -> list[dict]:
        ends = [lg for lg in self.legs if lg["to_kind"] == "step_end"]
        if not ends:
            return []
        cur = max(ends, key=lambda lg: (self.T(lg), -lg["rank"]))
        rev: list[dict] = []
        seen = set()
        while cur is not None and id(cur) not in seen:
            seen.add(id(cur))
            r = cur["rank"]
            span = (cur["from_ts_ns"] + self.off[r], cur["to_ts_ns"] + self.off[r])
            leg_rows = [
                self._row(
                    cur, r, cur["to_event_id"], f"{cur['from_name']} -> {cur['to_name']}", span, cur[f"{c}_ns"], c
                )
                for c in _CATS
                if (cur.get(f"{c}_ns") or 0) > 0
            ]
            rev.extend(reversed(leg_rows))
            p = self._pred(cur)
            if p[0] == "origin":
                if p[1] > 0:
                    rev.append(
                        self._row(
                            cur, r, None, f"late start of rank {r}", (self.j0, self.j0 + p[1]), p[1], "late_start"
                        )
                    )
                break
            _, via, call, own = p
            vr = via["rank"]
            kspan = (via["to_ts_ns"] + self.off[vr], via["to_end_ns"] + self.off[vr])
            dur = int(call["dur_ns"]) if call else int(via["to_end_ns"] - via["to_ts_ns"])
            wait = min(int(call["wait_ns"] or 0), dur) if (own and call) else 0
            if dur - wait > 0:
                rev.append(self._row(via, vr, via["to_event_id"], via["to_name"], kspan, dur - wait, "communication"))
            if wait > 0:
                rev.append(self._row(via, vr, via["to_event_id"], via["to_name"], kspan, wait, "collective_wait"))
            cur = via
        rows = list(reversed(rev))
        total = sum(x["dur_ns"] for x in rows)
        for i, x in enumerate(rows):
            x.update(
                {
                    "date": self.legs[0]["date"],
                    "job_id": self.job,
                    "attempt": self.att,
                    "step": step,
                    "scope": "job",
                    "path_rank": -1,
                    "path_capture_id": "",
                    "segment": i,
                    "path_length_ns": total,
                }
            )
        return rows

    @staticmethod
    def _row(leg, rank, event_id, name, span, dur, bound_by) -> dict:
        return {
            "rank": rank,
            "capture_id": leg["capture_id"],
            "event_id": event_id,
            "name": name,
            "start_ns": int(span[0]),
            "end_ns": int(span[1]),
            "dur_ns": int(dur),
            "bound_by": bound_by,
        }
