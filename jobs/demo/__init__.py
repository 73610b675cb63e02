"""Demo training jobs that produce real traces for tracelake (not part of the Spark pipeline)."""
