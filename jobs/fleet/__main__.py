"""``python -m jobs.fleet --warehouse W [--rebuild]``: bring the fleet tables up to date on the local executor (on
Spark: ``submit.py --stage fleet``)."""

from jobs.cli import app

if __name__ == "__main__":
    app(["fleet", *__import__("sys").argv[1:]])
