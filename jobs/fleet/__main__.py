"""``python -m jobs.fleet --warehouse W`` (spark-submit-able): rebuild the fleet tables."""

from jobs.cli import app

if __name__ == "__main__":
    app(["fleet", *__import__("sys").argv[1:]])
