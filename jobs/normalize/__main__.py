"""``python -m jobs.normalize --raw R --warehouse W`` on the local executor (on Spark:
``submit.py --stage normalize``)."""

from jobs.cli import app

if __name__ == "__main__":
    app(["normalize", *__import__("sys").argv[1:]])
