"""tracelake's batch jobs, in data-flow order: landing → normalize → validate → analyze → fleet → publish.

:mod:`jobs.pipeline` declares the stages once; ``common``, ``warehouse``, ``commit`` and ``spark`` sit below them all.
"""
