"""Ranked bottleneck findings with evidence and a recommendation: one rule per function, GPU and Neuron.

The ``findings`` table and ``findings.json``.
"""
