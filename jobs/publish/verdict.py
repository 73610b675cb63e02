"""A job run's verdict, earned from its findings and its rule coverage (``rule_coverage``, ``schemas/tables.py``).

The verdict is ``ok`` ("no bottleneck found") only when at least one rule judged the job, no rule that needed to
judge it was left out (status ``not_run``) and no finding fired. Otherwise it says what it knows:

* ``findings``: a rule fired (the top finding is the verdict's headline);
* ``partly_judged``: nothing fired, but some rules did not run (the reasons are listed: what is unknown);
* ``not_judged``: no rule ran at all (e.g. a trace without the activity any rule reads);
* ``coverage_unknown``: nothing fired, and the warehouse has no ``rule_coverage`` rows for the job (analyzed before
  coverage was recorded), so "no bottleneck" cannot be claimed.

Whatever the verdict, when the profiler warned about the data a rule that judged the job reads
(``rule_coverage.uncertain``), the headline ends with those judgments named as uncertain (:attr:`Verdict.uncertain`).

The same :class:`Verdict` feeds the job report's verdict and coverage block, the MLflow tags ``tracelake.verdict``
and ``tracelake.top_finding`` and the ``coverage/…`` metrics, ``tracelake run``'s summary and the MCP job answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from schemas import COVERAGE_STATUSES

#: Verdict values (the MLflow tag ``tracelake.verdict``).
VERDICTS = ("ok", "findings", "partly_judged", "not_judged", "coverage_unknown")
#: ``rule_coverage.status`` values, in the order the coverage block lists them.
STATUSES = COVERAGE_STATUSES
STATUS_WORDS = {
    "ran": "ran on the ProfilerSteps",
    "ran_on_trace": "ran on the whole trace (no ProfilerStep)",
    "not_applicable": "not applicable",
    "not_run": "did not run",
}
#: Finding rules in words (``findings.rule``; jobs/analyze/findings/rules.py ``RULES``).
RULE_WORDS = {
    "host_bound_launch": "host-bound launches",
    "many_tiny_kernels": "many tiny kernels",
    "exposed_communication": "exposed communication",
    "straggler_rank": "straggler rank",
    "dataloader_bound": "data loading",
    "blocking_sync": "blocking host-device syncs",
    "memcpy_bound": "memory copies",
    "low_gpu_utilization": "low GPU utilization",
    "pageable_memcpy": "copies from pageable host memory",
    "kernels_below_peak": "kernels far below the device's peak",
}


def rule_words(rule) -> str:
    """A rule in words (:data:`RULE_WORDS`; an unknown rule: its name with spaces for underscores)."""
    return RULE_WORDS.get(str(rule), str(rule).replace("_", " "))


@dataclass
class Verdict:
    """The verdict of one job run.

    Attributes:
        status: one of :data:`VERDICTS`.
        headline: one sentence in words (no column names).
        unknown: what is unknown, one phrase per reason (rules that did not run, grouped by reason).
        counts: ``{status: number of rules}`` for :data:`STATUSES` (all 0 when coverage is unknown).
        whole_trace: some rule ran on whole-trace windows (no ProfilerStep).
        coverage_known: the job has ``rule_coverage`` rows.
        top_rule: the rule of the top finding (``None`` without a finding).
        uncertain: the judgments the profiler's warnings make uncertain, one phrase per warning
            (``"<rules>: the profiler warned: …"``).
    """

    status: str
    headline: str
    unknown: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    whole_trace: bool = False
    coverage_known: bool = False
    top_rule: str | None = None
    uncertain: list[str] = field(default_factory=list)

    @property
    def top_finding_tag(self) -> str:
        """The MLflow tag ``tracelake.top_finding``: the top rule; ``none`` only when the verdict is ``ok``;
        otherwise the verdict itself (``partly_judged``, ``not_judged``, ``coverage_unknown``)."""
        if self.top_rule:
            return self.top_rule
        return "none" if self.status == "ok" else self.status

    def coverage_metrics(self) -> dict[str, float]:
        """MLflow metrics ``coverage/n_rules_<status>`` per :data:`STATUSES` (left out when coverage is unknown)."""
        if not self.coverage_known:
            return {}
        return {f"coverage/n_rules_{s}": float(self.counts.get(s, 0)) for s in STATUSES}

    def as_dict(self) -> dict:
        """JSON-ready: status, headline, unknown, counts, whole_trace, coverage_known, top_rule."""
        return {
            "status": self.status,
            "headline": self.headline,
            "unknown": list(self.unknown),
            "counts": dict(self.counts),
            "whole_trace": self.whole_trace,
            "coverage_known": self.coverage_known,
            "top_rule": self.top_rule,
            "uncertain": list(self.uncertain),
        }


def _rules(df: pd.DataFrame) -> str:
    return ", ".join(rule_words(r) for r in sorted(df["rule"].astype(str)))


def unknown_reasons(coverage: pd.DataFrame) -> list[str]:
    """``"<reason>: <rules> did not run"`` per distinct reason of the ``not_run`` rows (a missing reason:
    "reason not recorded")."""
    nr = coverage[coverage["status"] == "not_run"]
    if not len(nr):
        return []
    reason = (
        nr["reason"].where(nr["reason"].notna(), "reason not recorded") if "reason" in nr else "reason not recorded"
    )
    nr = nr.assign(_reason=reason)
    return [f"{r}: {_rules(g)} did not run" for r, g in nr.groupby("_reason", sort=True)]


def uncertain_reasons(coverage: pd.DataFrame) -> list[str]:
    """``"<rules>: <warning in words>"`` per distinct ``uncertain`` text of the rules that judged the job."""
    if "uncertain" not in coverage.columns:
        return []
    u = coverage[coverage["uncertain"].map(lambda x: isinstance(x, str) and bool(x))]
    return [f"{_rules(g)}: {w}" for w, g in u.groupby("uncertain", sort=True)]


def job_verdict(findings: pd.DataFrame | None, coverage: pd.DataFrame | None) -> Verdict:
    """The verdict of one job run (module docstring) from its ``findings`` and ``rule_coverage`` rows.

    Args:
        findings: the run's ``findings`` rows (None or empty: nothing fired).
        coverage: the run's ``rule_coverage`` rows (None or empty: coverage unknown).

    Returns:
        A :class:`Verdict`.
    """
    v = _verdict(findings, coverage)
    if coverage is not None and len(coverage):
        v.uncertain = uncertain_reasons(coverage)
    if v.uncertain:
        v.headline += " Uncertain, because the profiler warned about its own data: " + "; ".join(v.uncertain) + "."
    return v


def _verdict(findings: pd.DataFrame | None, coverage: pd.DataFrame | None) -> Verdict:
    """:func:`job_verdict` before the profiler's warnings are added."""
    has_f = findings is not None and len(findings) > 0
    known = coverage is not None and len(coverage) > 0 and {"rule", "status"} <= set(coverage.columns)
    counts = {s: 0 for s in STATUSES}
    unknown: list[str] = []
    whole = False
    if known:
        assert coverage is not None
        vc = coverage["status"].astype(str).value_counts()
        counts = {s: int(vc.get(s, 0)) for s in STATUSES}
        unknown = unknown_reasons(coverage)
        whole = counts["ran_on_trace"] > 0
    n_ran = counts["ran"] + counts["ran_on_trace"]
    on = " Judged on the whole trace: no ProfilerStep, so each rank's whole trace is one window." if whole else ""
    if has_f:
        assert findings is not None
        f = findings.sort_values("rank_order") if "rank_order" in findings.columns else findings
        top = str(f.iloc[0]["rule"]) if "rule" in f.columns else None
        n = len(f)
        head = f"{n} finding{'s' if n > 1 else ''} fired; the top one is above, the rest in Findings."
        if not known:
            head += " Which rules judged the job is not recorded (analyzed before rule coverage was recorded)."
        return Verdict("findings", head + on, unknown, counts, whole, known, top)
    if not known:
        return Verdict(
            "coverage_unknown",
            "Coverage unknown: no finding fired, but this warehouse does not record which rules judged the job "
            "(it was analyzed before rule coverage was recorded), so no verdict of health can be given; "
            "re-run the analysis to judge it.",
            [],
            counts,
            False,
            False,
        )
    if n_ran == 0:
        why = "; ".join(unknown) if unknown else "every rule was not applicable to these traces"
        return Verdict("not_judged", f"Not judged: no rule could judge this job ({why}).", unknown, counts, whole, True)
    if counts["not_run"]:
        return Verdict(
            "partly_judged",
            f"Partly judged: the {n_ran} rule{'s' if n_ran != 1 else ''} that ran found no bottleneck, but {'; '.join(unknown)}, so "
            "what those rules judge is unknown." + on,
            unknown,
            counts,
            whole,
            True,
        )
    na = f" ({counts['not_applicable']} not applicable)" if counts["not_applicable"] else ""
    return Verdict(
        "ok",
        f"No bottleneck found: all {n_ran} rule{'s' if n_ran != 1 else ''} that could judge this job ran{na} and none "
        "fired." + on,
        [],
        counts,
        whole,
        True,
    )
