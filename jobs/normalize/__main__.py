"""``python -m jobs.normalize --raw R --warehouse W`` (spark-submit-able)."""

from jobs.cli import app

if __name__ == "__main__":
    app(["normalize", *__import__("sys").argv[1:]])
