"""The per-rank trace model every analysis reads (as HTA's ``Trace``): :mod:`jobs.analyze.trace.model`.

Also HTA's loading rules, kernel types and host launch names, which decide how an event is typed.
"""
