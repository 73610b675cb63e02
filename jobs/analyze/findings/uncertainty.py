"""Findings and rule coverage made uncertain by the profiler's own warnings (``captures.profiler_warnings_json``).

A warning (and a capture flagged ``partial_trace``, cut short) names the finding rules that read the metrics it concerns (:data:`jobs.normalize.profiler_warnings.KINDS`,
e.g. Kineto's ``Record counts: Out-of-range = 120`` → the GPU-time rules; a Neuron "DMA values may be inaccurate"
→ ``neuron_dma_bound``, ``neuron_small_dma_transfers``). Then:

* a finding of such a rule on a warned rank (or on the job, when it names no rank; on any rank for the rules that
  compare ranks, :data:`CROSS_RANK_RULES`) keeps its numbers, its confidence
  is multiplied by :data:`UNCERTAIN_CONFIDENCE`, and its evidence gains ``uncertain``: the warnings, by rank;
* the rule's ``rule_coverage.uncertain`` says why in words, so a verdict without findings says which judgments the
  warnings make uncertain (:mod:`jobs.publish.verdict`).
"""

from __future__ import annotations

import json

import pandas as pd

from jobs.normalize.profiler_warnings import flag_warnings, read_warnings

__all__ = [
    "CROSS_RANK_RULES",
    "UNCERTAIN_CONFIDENCE",
    "capture_warnings",
    "warned_rules",
    "mark_uncertain",
    "uncertain_of",
    "uncertain_words",
]

#: Factor applied to the confidence of a finding a profiler warning makes uncertain.
UNCERTAIN_CONFIDENCE = 0.5
#: Rules that judge a rank against the others (who arrives last; how long the others wait): a warning on any rank of
#: the job makes their findings uncertain, whichever rank they name.
CROSS_RANK_RULES = frozenset({"straggler_rank", "exposed_communication"})


def capture_warnings(captures: pd.DataFrame | None) -> list[dict]:
    """Every warning of ``captures`` rows once, with its capture's rank.

    Returns:
        ``[{"rank", "kind", "words", "count", "message", "rules"}]``: the ``profiler_warnings_json`` entries, then a
        ``partial_trace`` entry per capture so flagged (:func:`jobs.normalize.profiler_warnings.flag_warnings`).
    """
    if captures is None or not len(captures):
        return []
    n = len(captures)
    ranks = captures["rank"] if "rank" in captures.columns else pd.Series([None] * n)
    values = captures["profiler_warnings_json"] if "profiler_warnings_json" in captures.columns else [None] * n
    flags = captures["flags"] if "flags" in captures.columns else [None] * n
    out = []
    for rank, value, fl in zip(ranks, values, flags):
        listed = list(fl) if fl is not None and not isinstance(fl, float) else []
        for w in read_warnings(value) + flag_warnings(listed):
            out.append(
                {
                    "rank": None if rank is None or rank != rank else int(rank),
                    "kind": w.get("kind"),
                    "words": w.get("words"),
                    "count": w.get("count"),
                    "message": w.get("message"),
                    "rules": [str(r) for r in w.get("rules") or []],
                }
            )
    return out


def warned_rules(captures: pd.DataFrame | None) -> dict[str, list[dict]]:
    """Rule → the warnings of ``captures`` (:func:`capture_warnings`, without ``rules``) that concern it."""
    out: dict[str, list[dict]] = {}
    for w in capture_warnings(captures):
        item = {k: v for k, v in w.items() if k != "rules"}
        for rule in w["rules"]:
            out.setdefault(rule, []).append(item)
    return out


def mark_uncertain(found: list[dict], warned: dict[str, list[dict]]) -> None:
    """Lower the confidence of the findings (FINDINGS rows as dicts, ``evidence_json`` text) whose rule a warning
    concerns on one of their ranks, and add the warnings to their evidence (``uncertain``). In place."""
    if not warned:
        return
    for f in found:
        ws = warned.get(str(f.get("rule")))
        if not ws:
            continue
        ranks = {int(r) for r in (f.get("ranks") or [])}
        job_wide = str(f.get("rule")) in CROSS_RANK_RULES
        hit = [w for w in ws if job_wide or not ranks or w["rank"] is None or w["rank"] in ranks]
        if not hit:
            continue
        if f.get("confidence") is not None:
            f["confidence"] = float(f["confidence"]) * UNCERTAIN_CONFIDENCE
        ev = json.loads(f["evidence_json"]) if f.get("evidence_json") else {}
        ev["uncertain"] = hit
        f["evidence_json"] = json.dumps(ev, sort_keys=True, default=str)


def uncertain_words(warnings: list[dict]) -> str | None:
    """``rule_coverage.uncertain`` of one rule: its warnings in words, with the ranks (None without a warning)."""
    by_words: dict[str, set] = {}
    for w in warnings:
        by_words.setdefault(str(w.get("words")), set()).add(w.get("rank"))
    if not by_words:
        return None
    parts = []
    for words, ranks in sorted(by_words.items()):
        known = sorted(r for r in ranks if r is not None)
        on = f" (rank{'s' if len(known) > 1 else ''} {', '.join(map(str, known))})" if known else ""
        parts.append(f"the profiler warned: {words}{on}")
    return "; ".join(parts)


def uncertain_of(evidence_json) -> str | None:
    """A finding's ``uncertain`` evidence (:func:`mark_uncertain`) in words: ``the profiler warned on rank 7: …``;
    None when its evidence has none (or is not JSON)."""
    try:
        ev = json.loads(evidence_json) if isinstance(evidence_json, str) and evidence_json else {}
    except ValueError:
        return None
    return uncertain_words(ev.get("uncertain") or []) if isinstance(ev, dict) else None
