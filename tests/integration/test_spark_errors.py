"""A Spark failure on the terminal (jobs/cli.py ``_spark_errors_in_one_line``, real Spark): one line with the error's
first line and the log file's path; the Java stack trace in that file, beside the driver JVM's own log."""

from __future__ import annotations

import pytest
import typer

from jobs.cli import _spark_errors_in_one_line

pytestmark = pytest.mark.integration


def test_a_java_error_is_one_line_and_its_stack_trace_goes_to_the_log(spark, tmp_path, monkeypatch, capsys):
    log = tmp_path / "spark.log"
    monkeypatch.setenv("TRACELAKE_SPARK_LOG", str(log))
    with pytest.raises(typer.Exit) as done, _spark_errors_in_one_line("tracelake run"):
        spark.sql("SELECT raise_error('the disk is full') AS x").collect()
    assert done.value.exit_code == 1
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tracelake run: "), out.err
    assert "the disk is full" in lines[0] and lines[0].endswith(f"(stack trace in {log})")
    assert "at org.apache.spark" in log.read_text(encoding="utf-8")  # the Java frames are kept, in the file
    assert "at org.apache" not in out.err + out.out


def test_other_errors_pass_unchanged():
    with pytest.raises(KeyError), _spark_errors_in_one_line("tracelake run"):
        raise KeyError("not Spark's")
