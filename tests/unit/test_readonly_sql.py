"""The sql tool's query check (jobs/agent/readonly_sql.py): hostile queries refused with their reason, every
ordinary query over the warehouse views (the README examples included) accepted. No Spark."""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from jobs.agent.readonly_sql import DENIED_FUNCTIONS, UnsafeQuery, check_query
from jobs.sql import readme_examples
from schemas.tables import FLEET_TABLES, TABLES

README = Path(__file__).resolve().parents[2] / "README.md"
VIEWS = [*TABLES, *FLEET_TABLES]

NOT_A_QUERY = "only SELECT queries are allowed"
HOSTILE = [
    ("DROP VIEW steps", NOT_A_QUERY + r" \(got DROP"),
    ("INSERT INTO steps SELECT * FROM steps", NOT_A_QUERY + r" \(got INSERT\)"),
    ("WITH a AS (SELECT 1) INSERT INTO steps SELECT * FROM a", NOT_A_QUERY + r" \(got INSERT\)"),
    ("CREATE TABLE x AS SELECT 1", NOT_A_QUERY + r" \(got CREATE TABLE\)"),
    ("CREATE OR REPLACE TEMP VIEW steps AS SELECT 1", NOT_A_QUERY + r" \(got CREATE VIEW\)"),
    ("CREATE TEMPORARY FUNCTION f AS 'x.Y'", NOT_A_QUERY + r" \(got CREATE FUNCTION\)"),
    ("ALTER TABLE steps ADD COLUMNS (x INT)", NOT_A_QUERY + r" \(got ALTER"),
    ("DELETE FROM steps", NOT_A_QUERY + r" \(got DELETE\)"),
    ("UPDATE steps SET step = 1", NOT_A_QUERY + r" \(got UPDATE\)"),
    ("MERGE INTO steps USING steps s ON 1 = 1 WHEN MATCHED THEN DELETE", NOT_A_QUERY + r" \(got MERGE\)"),
    ("TRUNCATE TABLE steps", NOT_A_QUERY + r" \(got TRUNCATE\)"),
    ("SET spark.sql.x=1", NOT_A_QUERY + r" \(got SET\)"),
    ("RESET", NOT_A_QUERY + r" \(got RESET\)"),
    ("ADD JAR /tmp/x.jar", NOT_A_QUERY + r" \(got ADD JAR\)"),
    ("ADD FILE /tmp/x.py", NOT_A_QUERY + r" \(got ADD FILE\)"),
    ("LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE steps", NOT_A_QUERY + r" \(got LOAD DATA\)"),
    ("CACHE TABLE steps", NOT_A_QUERY + r" \(got CACHE\)"),
    ("UNCACHE TABLE steps", NOT_A_QUERY + r" \(got UNCACHE\)"),
    ("REFRESH TABLE steps", NOT_A_QUERY + r" \(got REFRESH\)"),
    ("MSCK REPAIR TABLE steps", NOT_A_QUERY + r" \(got MSCK"),
    ("USE default", NOT_A_QUERY + r" \(got USE\)"),
    ("SHOW TABLES", NOT_A_QUERY + r" \(got SHOW\)"),
    ("DESCRIBE steps", NOT_A_QUERY + r" \(got DESCRIBE\)"),
    ("EXPLAIN SELECT 1", NOT_A_QUERY + r" \(got EXPLAIN\)"),
    ("EXECUTE IMMEDIATE 'DROP VIEW steps'", NOT_A_QUERY + r" \(got EXECUTE\)"),
    ("DECLARE VARIABLE v INT", NOT_A_QUERY + r" \(got DECLARE\)"),
    ("VALUES (1)", NOT_A_QUERY + r" \(got VALUES\)"),
    ("SELECT * INTO t FROM steps", NOT_A_QUERY + r" \(got SELECT \.\.\. INTO\)"),
    ("SELECT 1; SELECT 2", r"only one statement is allowed \(got 2\)"),
    ("SELECT 1; DROP VIEW steps", "only one statement is allowed"),
    ("", "the query is empty"),
    ("  ;  ", "the query is empty"),
    ("-- just a comment", "the query is empty"),
    ("SELEC * FROM steps", r"^syntax error at line 1, column 12: incomplete FROM \(near 'SELEC \* FROM steps'\)$"),
    ("SELECT * FROM steps WHERE (", r"^syntax error at line 1, column 27: incomplete '\(' \(near '.*WHERE \('\)$"),
    ("SELECT 'unclosed", r"^syntax error: the text cannot be read near .*\(an unclosed quote or comment\?\)$"),
    ("SELECT * FROM parquet.`/etc/passwd`", r"file-reading table reference parquet\.`/etc/passwd` is not allowed"),
    ("SELECT * FROM json.`/etc`", r"file-reading table reference json\.`/etc` is not allowed"),
    ("SELECT * FROM csv.`file:/x` AS c", r"file-reading table reference csv\.`file:/x`"),
    ("SELECT * FROM `parquet`.`s3://bucket/x`", r"file-reading table reference parquet\.`s3://bucket/x`"),
    ("SELECT * FROM binaryFile.`/etc`", r"file-reading table reference binaryFile\.`/etc`"),
    ("SELECT * FROM steps s JOIN (SELECT * FROM text.`/etc/passwd`) t ON true", "file-reading table reference text"),
    ("SELECT * FROM read_files('/etc/passwd')", r"function read_files is not allowed \(it reads files\)"),
    ("SELECT * FROM range(10)", r"table-valued function range\(\.\.\.\) in FROM is not allowed"),
    ("SELECT * FROM steps, range(3)", r"table-valued function range\(\.\.\.\) in FROM is not allowed"),
    ("SELECT * FROM explode(array(1, 2))", r"table-valued function explode\(\.\.\.\) in FROM is not allowed"),
    ("SELECT * FROM IDENTIFIER('secrets')", r"function identifier is not allowed"),
    ("SELECT java_method('java.lang.Runtime', 'getRuntime')", r"function java_method is not allowed \(it runs code\)"),
    ("SELECT JAVA_METHOD('java.lang.Runtime', 'getRuntime')", r"function java_method is not allowed \(it runs code\)"),
    ("SELECT `java_method`('java.lang.Runtime', 'getRuntime')", r"function java_method is not allowed"),
    ("SELECT system.builtin.java_method('a', 'b')", r"function java_method is not allowed"),
    ("SELECT reflect('java.lang.System', 'exit', '0')", r"function reflect is not allowed \(it runs code\)"),
    ("SELECT try_reflect('java.lang.System', 'exit', '0')", r"function try_reflect is not allowed \(it runs code\)"),
    ("SELECT job_id FROM steps WHERE reflect('a', 'b') IS NULL", r"function reflect is not allowed"),
    ("SELECT udf_evil(step) FROM steps", r"function udf_evil is not allowed \(it runs code\)"),
    ("SELECT input_file_name() FROM steps", r"function input_file_name is not allowed \(it reads files\)"),
    ("SELECT current_user()", r"function current_user is not allowed \(it reveals the server\)"),
    ("SELECT CURRENT_USER", r"function current_user is not allowed"),
    ("SELECT user()", r"function user is not allowed \(it reveals the server\)"),
    ("SELECT session_user()", r"function session_user is not allowed"),
    ("SELECT current_database()", r"function current_database is not allowed"),
    ("SELECT current_schema()", r"function current_schema is not allowed"),
    ("SELECT current_catalog()", r"function current_catalog is not allowed"),
    ("SELECT version()", r"function version is not allowed \(it reveals the server\)"),
    ("SELECT raise_error('boom')", r"function raise_error is not allowed"),
    ("SELECT assert_true(false)", r"function assert_true is not allowed"),
    ("SELECT * FROM secrets", r"table `secrets` is not a warehouse view \(views: .*captures.*steps"),
    ("SELECT * FROM steps JOIN secrets USING (job_id)", r"table `secrets` is not a warehouse view"),
    ("SELECT * FROM steps WHERE job_id IN (SELECT job_id FROM secrets)", r"table `secrets` is not a warehouse view"),
    ("SELECT * FROM `/etc/passwd`", r"table `/etc/passwd` is not a warehouse view"),
    ("SELECT * FROM default.steps", r"qualified table reference default\.steps is not allowed"),
    ("SELECT * FROM spark_catalog.default.steps", r"qualified table reference spark_catalog\.default\.steps"),
    ("SELECT * FROM global_temp.steps", r"qualified table reference global_temp\.steps"),
    # a CTE is visible only in its own scope: `secrets` below is the catalog's, not the CTE
    (
        "SELECT * FROM (WITH secrets AS (SELECT 1) SELECT * FROM secrets) t, secrets",
        r"table `secrets` is not a warehouse view",
    ),
    ("WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a", r"table `b` is not a warehouse view"),
]


@pytest.mark.parametrize("query,reason", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_hostile_query_refused(query, reason):
    with pytest.raises(UnsafeQuery, match=reason):
        check_query(query, VIEWS)


@pytest.mark.parametrize("name", sorted(DENIED_FUNCTIONS))
def test_every_denied_function_refused(name):
    with pytest.raises(UnsafeQuery, match=rf"function {name} is not allowed"):
        check_query(f"SELECT {name}() FROM steps", VIEWS)


ACCEPTED = [
    "SELECT * FROM steps",
    "select job_id, count(*) from STEPS group by job_id",
    "SELECT * FROM Captures LIMIT 5",
    "SELECT s.job_id, r.rank FROM steps s JOIN ranks r ON s.job_id = r.job_id AND s.rank = r.rank",
    "WITH t AS (SELECT job_id, step_time_ns FROM steps) SELECT job_id, max(step_time_ns) FROM t GROUP BY job_id",
    "WITH a AS (SELECT job_id FROM steps), b AS (SELECT * FROM a) SELECT * FROM b JOIN a USING (job_id)",
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "SELECT job_id FROM steps UNION SELECT job_id FROM ranks",
    "SELECT job_id FROM steps EXCEPT SELECT job_id FROM ranks",
    "(SELECT job_id FROM steps) UNION ALL (SELECT job_id FROM ranks)",
    "(SELECT 1)",
    "SELECT * FROM (SELECT job_id, rank FROM ranks) t WHERE t.rank = 0",
    "SELECT job_id FROM steps WHERE job_id IN (SELECT job_id FROM captures WHERE status = 'ok')",
    "SELECT job_id, rank, row_number() OVER (PARTITION BY job_id ORDER BY step_time_ns DESC) AS n FROM steps",
    "SELECT explode(array(1, 2, 3)) AS x",
    "SELECT job_id, x FROM steps LATERAL VIEW explode(array(1, 2)) t AS x",
    "SELECT /*+ BROADCAST(c) */ r.job_id FROM ranks r JOIN captures c USING (job_id)",
    "SELECT spark_partition_id(), count(*) FROM events GROUP BY 1",
    "SELECT 1 -- a trailing comment",
    "SELECT * FROM VALUES (1, 2) AS t(a, b)",
    "SELECT * FROM fleet_stats",
    "SELECT 'DROP TABLE steps; SELECT java_method' AS s",
]


@pytest.mark.parametrize("query", ACCEPTED, ids=[f"ok{i}" for i in range(len(ACCEPTED))])
def test_ordinary_query_accepted(query):
    assert check_query(query, VIEWS) == query


@pytest.mark.parametrize(
    "text,expect",
    [
        ("SELECT 1;", "SELECT 1"),
        ("  SELECT * FROM steps ;  \n", "SELECT * FROM steps"),
        ("\nSELECT job_id\nFROM steps\n", "SELECT job_id\nFROM steps"),
    ],
)
def test_stripped_of_one_trailing_semicolon(text, expect):
    assert check_query(text, VIEWS) == expect


EXAMPLES = readme_examples(README.read_text(encoding="utf-8"))


def test_readme_has_examples():
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize("query", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_readme_example_accepted(query):
    assert check_query(query, VIEWS) == query.strip()


def test_views_are_the_ones_given():
    check_query("SELECT * FROM mine", ["Mine"])
    with pytest.raises(UnsafeQuery, match=r"table `steps` is not a warehouse view \(views: mine\)"):
        check_query("SELECT * FROM steps", ["mine"])


def test_json_safe_values():
    from jobs.agent.readonly_sql import json_safe as j

    assert j(Decimal("1.50")) == 1.5
    assert j(float("nan")) is None and j(math.inf) is None and j(-math.inf) is None
    assert j(datetime(2024, 5, 1, 12, 30, 1, 5)) == "2024-05-01T12:30:01.000005"
    assert j(date(2024, 5, 1)) == "2024-05-01"
    assert j(b"\x00\xff") == "00ff" and j(bytearray(b"\x01")) == "01"
    assert j([1, [2.0, float("nan")], None]) == [1, [2.0, None], None]
    assert j({1: Decimal("2"), "a": (b"\x02",)}) == {"1": 2.0, "a": ["02"]}
    assert j(True) is True and j(3) == 3 and j("x") == "x" and j(None) is None
