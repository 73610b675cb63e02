"""spark-submit application that runs ``python -m <module> ARGS…`` inside this spark-submit.

``spark-submit jobs/pipeline/module_main.py jobs.publish.report --warehouse W …``: the SparkSession is
created first the spark-submit way (:func:`jobs.pipeline.session.submit_session`, honouring
``--master``), so a module that calls :func:`jobs.spark.get_spark` gets that session instead of
starting a local one.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo of this file, when not installed


def main(argv: list[str] | None = None) -> None:
    """Run module ``argv[0]`` as ``__main__`` with ``argv[1:]`` as its arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        raise SystemExit("usage: module_main.py MODULE [ARGS…]")
    from jobs.pipeline.session import submit_session

    submit_session(f"tracelake-{argv[0].rsplit('.', 1)[-1]}")
    sys.argv = [argv[0], *argv[1:]]
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
