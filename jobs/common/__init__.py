"""Helpers shared by every stage, below all of them: ids, interval arithmetic, finite floats, the binomial tail.

Nothing here imports a stage; pure functions, no Spark.
"""
