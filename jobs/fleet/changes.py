"""What changed between a run and its baseline runs: the ``regressions.changes_json`` of each row whose
verdict is ``regression`` or ``improvement`` (issue 15).

A regression tied to a version bump, a new node type or a config change shows it here, next to the
kernels whose time per step moved most and the findings that appeared or cleared:

* ``context``: each of ``torch_version``, ``hardware``, ``world_size`` and every manifest tag (``tags.<key>``:
  ``git_sha``, ``config``, …) whose value in the run differs from a value of the baseline runs:
  ``{"field", "run", "baseline": [distinct baseline values]}``;
* ``kernels``: the :data:`TOP_KERNELS` kernels with the largest |Δ time per step| (Σ over ranks ÷ the
  run's job steps; the baseline's pooled over its runs), ``{"name", "run_ns_per_step",
  "baseline_ns_per_step", "delta_ns_per_step"}``, with ``kernel_type``;
* ``findings_appeared`` / ``findings_cleared``: rules that fired in the run and in none of the baseline
  runs, or in every baseline run and not in the run.
"""

from __future__ import annotations

import json

import pandas as pd

TOP_KERNELS = 5
#: The verdicts whose rows say what changed.
EXPLAINED = ("regression", "improvement")
CONTEXT_FIELDS = ("torch_version", "hardware", "world_size")


def _tags(captures: pd.DataFrame | None) -> dict[tuple[str, int], dict[str, str]]:
    """``(job_id, attempt)`` → the manifest tags of its captures (first capture's, keys sorted)."""
    out: dict[tuple[str, int], dict[str, str]] = {}
    if captures is None or not len(captures) or "tags_json" not in captures.columns:
        return out
    c = captures.sort_values(["job_id", "attempt", "rank"], kind="stable")
    for job, attempt, text in zip(c["job_id"], c["attempt"], c["tags_json"]):
        key = (str(job), int(attempt))
        if key in out or not isinstance(text, str):
            continue
        try:
            tags = json.loads(text)
        except ValueError:
            continue
        out[key] = {str(k): str(v) for k, v in sorted(tags.items())} if isinstance(tags, dict) else {}
    return out


def _value(v):
    if v is None or (isinstance(v, float) and v != v):
        return None
    return int(v) if isinstance(v, float) and v.is_integer() else (v.item() if hasattr(v, "item") else v)


def what_changed(
    regressions: pd.DataFrame,
    job_steps: pd.DataFrame,
    job_kernels: pd.DataFrame | None = None,
    captures: pd.DataFrame | None = None,
    findings: pd.DataFrame | None = None,
) -> pd.Series:
    """``changes_json`` for every row of ``regressions`` (module docstring): a JSON object for the rows whose
    verdict is ``regression`` or ``improvement``, ``None`` for the others.

    Args:
        regressions: :func:`jobs.fleet.regressions.find_regressions` rows (``baseline_runs``: ``job#attempt``).
        job_steps: :func:`jobs.fleet.stats.job_steps_frame` rows (run metadata and the job steps per run).
        job_kernels: :func:`jobs.fleet.stats.job_kernels_frame` rows; captures: ``captures`` (``tags_json``);
        findings: ``findings`` (``rule``) — each optional.

    Returns:
        A Series aligned with ``regressions``' index.
    """
    out = pd.Series([None] * len(regressions), index=regressions.index, dtype=object)
    moved = regressions["verdict"].isin(EXPLAINED) if len(regressions) else []
    if not len(regressions) or not moved.any():
        return out
    js = job_steps.assign(run=job_steps["job_id"].astype(str) + "#" + job_steps["attempt"].astype(int).astype(str))
    meta = js.groupby("run").agg(
        **{f: (f, "first") for f in CONTEXT_FIELDS if f in js.columns}, n_steps=("step", "nunique")
    )
    tags = {f"{j}#{a}": t for (j, a), t in _tags(captures).items()}
    per_step = pd.DataFrame(columns=["run", "name", "kernel_type", "total_ns"])
    if job_kernels is not None and len(job_kernels):
        k = job_kernels.assign(
            run=job_kernels["job_id"].astype(str) + "#" + job_kernels["attempt"].astype(int).astype(str)
        )
        per_step = (
            k.groupby(["run", "name"], sort=True)
            .agg(kernel_type=("kernel_type", "first"), total_ns=("total_ns", "sum"))
            .reset_index()
        )
    rules: dict[str, set[str]] = {}
    if findings is not None and len(findings):
        for job, attempt, rule in zip(findings["job_id"], findings["attempt"], findings["rule"]):
            rules.setdefault(f"{job}#{int(attempt)}", set()).add(str(rule))
    cache: dict[tuple, str] = {}
    for i, r in regressions[moved].iterrows():
        run = f"{r['job_id']}#{int(r['attempt'])}"
        base = [str(b) for b in (r["baseline_runs"] if r["baseline_runs"] is not None else [])]
        key = (run, tuple(base))
        if key not in cache:
            cache[key] = json.dumps(_changes(run, base, meta, tags, per_step, rules), sort_keys=True)
        out[i] = cache[key]
    return out


def _changes(
    run: str, base: list[str], meta: pd.DataFrame, tags: dict, per_step: pd.DataFrame, rules: dict[str, set[str]]
) -> dict:
    context = []
    fields = [
        (f, {x: _value(meta.at[x, f]) for x in [run, *base] if x in meta.index})
        for f in CONTEXT_FIELDS
        if f in meta.columns
    ]
    keys = sorted(set(tags.get(run, {})).union(*(tags.get(b, {}) for b in base)))
    fields += [(f"tags.{k}", {x: tags.get(x, {}).get(k) for x in [run, *base]}) for k in keys]
    for name, values in fields:
        mine = values.get(run)
        theirs = sorted({values.get(b) for b in base if b in values}, key=lambda v: (v is None, str(v)))
        if theirs and any(v != mine for v in theirs):
            context.append({"field": name, "run": mine, "baseline": theirs})
    kernels = []
    steps = {x: float(meta.at[x, "n_steps"]) for x in [run, *base] if x in meta.index and meta.at[x, "n_steps"]}
    if len(per_step) and run in steps:
        mine = per_step[per_step["run"] == run].set_index("name")
        theirs = per_step[per_step["run"].isin([b for b in base if b in steps])]
        base_steps = sum(steps[b] for b in base if b in steps)
        theirs = theirs.groupby("name").agg(kernel_type=("kernel_type", "first"), total_ns=("total_ns", "sum"))
        names = sorted(set(mine.index) | set(theirs.index))
        rows = []
        for n in names:
            a = float(mine.at[n, "total_ns"]) / steps[run] if n in mine.index else 0.0
            b = float(theirs.at[n, "total_ns"]) / base_steps if n in theirs.index and base_steps else 0.0
            kind = mine.at[n, "kernel_type"] if n in mine.index else theirs.at[n, "kernel_type"]
            rows.append(
                {
                    "name": n,
                    "kernel_type": None if kind != kind else kind,
                    "run_ns_per_step": round(a, 1),
                    "baseline_ns_per_step": round(b, 1),
                    "delta_ns_per_step": round(a - b, 1),
                }
            )
        rows.sort(key=lambda x: (-abs(x["delta_ns_per_step"]), x["name"]))
        kernels = rows[:TOP_KERNELS]
    mine_rules = rules.get(run, set())
    base_rules = [rules.get(b, set()) for b in base]
    return {
        "baseline_runs": base,
        "context": context,
        "kernels": kernels,
        "findings_appeared": sorted(mine_rules - set().union(*base_rules)) if base_rules else sorted(mine_rules),
        "findings_cleared": sorted(set.intersection(*base_rules) - mine_rules) if base_rules else [],
    }
