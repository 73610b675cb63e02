"""tracelake batch jobs (normalize, analyze) and their pure helpers."""
