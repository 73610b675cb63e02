"""Data-quality gate: Great Expectations 1.x suites (``suites``) over warehouse tables after normalize and after analyze.

Results in ``report``; failed jobs marked in ``<table>/_validation.json`` (``marks``); CLI in ``__main__``.
"""
