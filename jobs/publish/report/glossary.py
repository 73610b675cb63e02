"""Glossary of the capture flags (``captures.flags``): each flag in words, and what it means for the numbers.

Sources of the flags: the Kineto parser (:data:`jobs.normalize.kineto.parse.FLAGS`: every key has an entry here,
``tests/unit/test_report_html.py`` checks it), rank identity (``jobs/normalize/identity.py``), the normalize job's
duplicate checks (``jobs/normalize/job.py``), raw-blob routing (``jobs/normalize/route.py``), the xplane converter
(``jobs/normalize/xla/xplane.py``) and the Neuron readers (``jobs/normalize/neuron/``). The column doc is
``schemas/tables.py`` CAPTURES ``flags``.

The job report renders the flags its captures carry (:func:`glossary_rows`) in its "Capture flags" section, linked
from the captures table and the verdict.
"""

from __future__ import annotations

import pandas as pd

#: flag → (what happened, in words; what it means for the numbers).
FLAG_GLOSSARY: dict[str, tuple[str, str]] = {
    "rank_assumed_0": (
        "The trace names no rank (no distributedInfo, no rank in the file name), so it was read as rank 0.",
        "Per-rank numbers are right for a single-rank job; in a multi-rank job this file may be mislabelled.",
    ),
    "duplicate_rank": (
        "Two files claim the same rank of one job run.",
        "Files without a manifest each became a job of their own (the folder's job id and the file's name); of two "
        "manifests, the first by path is kept and the other quarantined, its reason naming both.",
    ),
    "rank_mismatch": (
        "The trace's distributedInfo names another rank than its manifest.",
        "The trace's rank is used (the profiled process reported it); the capture may have been committed under the "
        "wrong rank, so check the landing step.",
    ),
    "world_size_mismatch": (
        "The trace's distributedInfo names another world size than its manifest.",
        "The trace's world size is used; fleet estimates that scale by world size follow it.",
    ),
    "duplicate_capture_id": (
        "A manifest's capture id repeats in another folder; this file got a suffixed id.",
        "None: the file is analyzed as its own capture.",
    ),
    "converted_form_ingested": (
        "A raw blob kept as is; its converted form is what was analyzed.",
        "None: the numbers come from the converted trace.",
    ),
    "xprof_converted": (
        "An XLA xplane profile converted to a trace by xprof before parsing.",
        "Numbers come from xprof's trace view, not from the raw profile.",
    ),
    "xprof_truncated": (
        "xprof's conversion hit its event limit: the trace is cut short.",
        "Totals undercount the profile; per-step numbers of the steps that are in the trace still hold.",
    ),
    "unsupported_format_version": (
        "A Neuron profile newer than the reader.",
        "The file is quarantined: it adds nothing to the numbers.",
    ),
    "nonfinite_number": (
        "NaN or infinity tokens in the JSON, read as missing values.",
        "Those fields count as absent; no time is invented for them.",
    ),
    "control_characters": (
        "Raw control characters inside strings, read as if escaped.",
        "None on the numbers; names may show odd characters.",
    ),
    "invalid_utf8": (
        "Invalid UTF-8 bytes inside strings, each read as the replacement character.",
        "None on the numbers; affected names show the replacement character.",
    ),
    "invalid_escape": (
        "Invalid escapes inside strings, read as a literal backslash.",
        "None on the numbers; affected names keep the backslash.",
    ),
    "trailing_comma": (
        "Commas before a closing bracket in the JSON, removed.",
        "None: the events around them are read as written.",
    ),
    "missing_value": (
        "Keys written without a value (`\"key\": ,`), read as missing values.",
        "Those fields count as absent.",
    ),
    "bare_word": (
        "Unquoted words written as values (`N/A`), read as strings.",
        "None on the numbers; a numeric field holding such a word counts as absent.",
    ),
    "decimal_comma": (
        "Numbers written with a locale decimal comma (`0,015152`), read with the comma as the decimal point.",
        "None: the values are read as the profiler meant them (occupancy, timestamps).",
    ),
    "unescaped_quote": (
        "Double quotes inside a name or value that the profiler did not escape, escaped where only one reading "
        "fits the event.",
        "None on the numbers; the name keeps its quotes. Files where the end of such a string is ambiguous stay "
        "quarantined.",
    ),
    "truncated_tail": (
        "The file was cut short (a profiler killed while writing): every complete event is kept, the cut event "
        "and the header after the events are dropped.",
        "Totals cover only the events written; the last steps are cut short, so the capture is flagged "
        "partial_trace and those steps are left out of the step statistics.",
    ),
    "duplicate_key": (
        "A key repeated inside an event (e.g. two `ts` or two `correlation`); the last value is used, as JSON "
        "readers do.",
        "The event's numbers come from the last value; if the profiler meant the first, that event's time or "
        "link may be off.",
    ),
    "lone_surrogate": (
        "Lone UTF-16 surrogate escapes inside strings, read as the replacement character.",
        "None on the numbers.",
    ),
    "invalid_timestamp": (
        "Events without a valid timestamp were dropped.",
        "Their time is missing from every total: sums may undercount.",
    ),
    "negative_duration": (
        "Events with a negative duration: their duration is read as unknown.",
        "They are never summed as time and are left out of the trace span.",
    ),
    "missing_duration": (
        "Events without a valid duration.",
        "They are never summed as time.",
    ),
    "improper_nesting": (
        "Slices that start inside another slice of their track and end after it (kept as they are).",
        "Host-side nesting (which op called which) is approximate for those slices; durations are the trace's.",
    ),
    "negative_launch_delay": (
        "GPU work starts before the host call that launched it ends: the host and device clocks disagree by a "
        "little (common in Kineto traces).",
        "Launch delays (launch to GPU start) below zero are counted as 0 in the launch statistics; step times, "
        "GPU idle and the other breakdowns are unaffected.",
    ),
    "merged_ranks": (
        "One file holds several ranks' host events (launches share correlation ids).",
        "Launches are linked to their GPU work by process and correlation id, so launch statistics stay per rank.",
    ),
    "partial_trace": (
        "The trace looks truncated: events stop before the last ProfilerStep ends, or the file reports dropped events.",
        "The last step and any whole-trace totals may undercount.",
    ),
    "correlation_zero": (
        "Correlation id 0 (ROCm) read as absent.",
        "GPU rows are linked to launches another way (External id or time), see the next two flags.",
    ),
    "linked_by_time": (
        "GPU rows without a usable correlation id linked to the last free launch call before them.",
        "Launch delays of those rows are estimates.",
    ),
    "unlinked_device_rows": (
        "GPU rows that no launch call could be linked to.",
        "They count in GPU time and idle time, but not in launch statistics.",
    ),
    "stream_overlap_clipped": (
        "GPU events that ran past the start of the next event on their stream were clipped to that start.",
        "GPU busy time is not counted twice; the raw durations are kept in the events table.",
    ),
    "begin_end_pairs": (
        "Begin/end duration events paired into complete events.",
        "None: they count like any other event.",
    ),
    "unmatched_begin": (
        "Begin events never closed by an end event: kept without a duration.",
        "Their time is not counted.",
    ),
    "unmatched_end": (
        "End events with no open begin event: dropped.",
        "Their time is not counted.",
    ),
    "unsupported_phase": (
        "Events of a phase the reader does not know were skipped.",
        "They add nothing to the numbers.",
    ),
    "no_profiler_step": (
        "The trace has no ProfilerStep annotation.",
        "There are no per-step numbers: the job is judged on each rank's whole trace as one window.",
    ),
    "no_summary": (
        "The Neuron profile has no summary section.",
        "Hardware utilization numbers are computed from the events instead.",
    ),
    "no_metadata": (
        "The Neuron profile has no metadata section.",
        "Instance and model details are unknown.",
    ),
    "profiler_warnings": (
        "The profiler warned about the data it wrote (Kineto WARNING/ERROR lines or dropped-record counts, Neuron "
        "profile warnings).",
        "The metrics and findings each warning concerns are uncertain: they are listed under Profiler warnings, and "
        "those findings' confidence is lowered.",
    ),
    "summary_from_events": (
        "The Neuron summary was computed from the events.",
        "Utilization numbers are tracelake's, not the profiler's own.",
    ),
    "percent_scale_100": (
        "The Neuron profile reports fractions on a 0–100 scale.",
        "None: values are rescaled to percent.",
    ),
    "model_flops_estimated": (
        "Model FLOPs were estimated (not reported by the profile).",
        "FLOP-based utilization numbers are estimates.",
    ),
    "hw_constants_from_instance_type": (
        "Hardware peak numbers taken from the instance type.",
        "Utilization percentages rely on those published peaks.",
    ),
    "metrics_reported_only": (
        "Only the profiler's reported metrics are available.",
        "Numbers are the profiler's own; no cross-check against events.",
    ),
    "multiple_executions": (
        "The Neuron profile holds several executions.",
        "Numbers are over all executions together.",
    ),
    "renamed_fields_read_by_alias": (
        "Renamed Neuron profile fields read by their older names.",
        "None on the numbers.",
    ),
    "device_and_system_clocks_not_aligned": (
        "The Neuron device clock and the system clock are not aligned.",
        "Host and device events cannot be placed on one timeline: host-device overlap numbers are unreliable.",
    ),
}


def flag_words(flag: str) -> tuple[str, str]:
    """``(meaning, effect on the numbers)`` of a flag; families (``schema_…_by_field_presence``,
    ``reported_…_mismatch``) and unknown flags get a generic entry."""
    if flag in FLAG_GLOSSARY:
        return FLAG_GLOSSARY[flag]
    if flag.startswith("schema_") and flag.endswith("_by_field_presence"):
        return (
            "The Neuron profile's schema version was inferred from which fields it has.",
            "None on the numbers, unless the inference is wrong.",
        )
    if flag.startswith("reported_") and flag.endswith("_mismatch"):
        return (
            "A metric the profiler reports disagrees with the one computed from its events.",
            "The computed value is used.",
        )
    return ("Not in the glossary yet.", "Unknown: see the captures table's flag documentation.")


def glossary_rows(captures: pd.DataFrame | None) -> pd.DataFrame:
    """One row per flag raised on ``captures`` (``flags`` column: lists of text).

    Returns:
        Columns ``flag``, ``n_captures`` (files carrying it), ``meaning``, ``effect``; sorted by flag. Empty
        (same columns) when no capture has a flag.
    """
    cols = ["flag", "n_captures", "meaning", "effect"]
    if captures is None or not len(captures) or "flags" not in captures.columns:
        return pd.DataFrame(columns=cols)
    counts: dict[str, int] = {}
    for v in captures["flags"]:
        if v is None or isinstance(v, float):
            continue
        for f in {str(x) for x in v}:
            counts[f] = counts.get(f, 0) + 1
    rows = [
        {"flag": f, "n_captures": n, "meaning": flag_words(f)[0], "effect": flag_words(f)[1]} for f, n in counts.items()
    ]
    return pd.DataFrame(rows, columns=cols).sort_values("flag").reset_index(drop=True)
