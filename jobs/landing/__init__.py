"""The landing zone: find committed captures, restrict them to an interval, sniff each file's format.

Read-only over the raw store (local folder or fsspec URI); writes nothing. A store that cannot be
reached fails the caller (:mod:`jobs.landing.store`); only a file's own problems quarantine it.
"""
