"""``python -m jobs.analyze --warehouse W [--job J]`` on the local executor (on Spark:
``submit.py --stage analyze``)."""

from jobs.cli import app

if __name__ == "__main__":
    app(["analyze", *__import__("sys").argv[1:]])
