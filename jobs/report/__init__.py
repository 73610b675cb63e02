"""HTML reports: one per job run, one for the fleet, one per comparison, and the validation page.

Self-contained pages (inline CSS, plots as base64 PNG, no external JS/CSS or fonts), rendered by
Jinja2 with autoescaping, so every name that comes from a trace is shown as text, never as markup.
:mod:`jobs.report.html` renders, :mod:`jobs.report.plots` draws, :mod:`jobs.report.publish` logs
them to MLflow.
"""
