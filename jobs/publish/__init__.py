"""Publish results: one MLflow run per (job, attempt), the validation report, HTML reports, comparisons.

Reads the warehouse only; never changes a table.
"""
