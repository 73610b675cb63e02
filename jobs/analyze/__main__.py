"""``python -m jobs.analyze --warehouse W [--job J]`` (spark-submit-able)."""

from jobs.cli import app

if __name__ == "__main__":
    app(["analyze", *__import__("sys").argv[1:]])
