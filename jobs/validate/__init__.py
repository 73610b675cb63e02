"""Data-quality gate: Great Expectations 1.x suites over warehouse tables, after normalize and after analyze.

Failed jobs are marked in ``<table>/_validation.json``; publishing them is :mod:`jobs.publish`'s business.
"""
