"""infra/cluster: every YAML/JSON file parses, and what it names exists in the code and agrees with it.

The step and manifest arguments are parsed by the application's own parser (argparse of the one spark-submit
application ``jobs/pipeline/submit.py``, stopped right after parsing, then ``RunSettings(**json)`` of its
``--settings``), so a renamed or removed option or setting fails here instead of on a cluster. The EMR ingest
steps must be the declared stages (:data:`jobs.pipeline.stages.INGEST`) in order, sharing one run record.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import jobs.spark
from jobs.landing.interval import as_utc
from jobs.pipeline import stages, submit
from jobs.pipeline.stages import FLEET_REPORT, INGEST, STAGES, RunSettings, record_uri

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "infra" / "cluster"
EMR_VENV = "/opt/tracelake/venv"
IMAGE_VENV = "/opt/venv"
SITE = "/lib/python3.11/site-packages/"


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.strip()
    return pins


def _config_files() -> list[Path]:
    return sorted(p for p in CLUSTER.rglob("*") if p.suffix in (".json", ".yaml", ".yml"))


def _load(path: Path) -> list:
    """Documents of a YAML (all of them) or JSON file."""
    text = path.read_text()
    if path.suffix == ".json":
        return [json.loads(text)]
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _docs(kind: str) -> list[tuple[Path, dict]]:
    return [
        (p, d)
        for p in _config_files()
        if p.suffix in (".yaml", ".yml")
        for d in _load(p)
        if isinstance(d, dict) and d.get("kind") == kind
    ]


def _repo_file_of(container_path: str, venv: str) -> Path:
    """The repository file installed at ``container_path`` (``<venv>/lib/python3.11/site-packages/<rel>``)."""
    prefix = venv + SITE
    assert container_path.startswith(prefix), f"{container_path}: not under {prefix}"
    return REPO / container_path[len(prefix) :]


# --------------------------------------------------------------------------------------------------
# parsing with the applications' own parsers


class _Parsed(Exception):
    """Raised right after a successful argparse parse (carries the namespace)."""


def _argparse_namespace(main, argv: list[str], monkeypatch) -> argparse.Namespace:
    """``main(argv)`` stopped after its ``parse_args``; an invalid argv fails with argparse's SystemExit(2)."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    try:
        main(list(argv))
    except _Parsed as parsed:
        return parsed.args[0]
    finally:
        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", original)
    raise AssertionError(f"{main.__module__}.main did not parse its arguments")


def _check_application(app_file: Path, args: list[str], monkeypatch) -> dict:
    """Parse ``args`` the way the spark-submit application ``app_file`` does; returns the parsed options, with
    ``settings`` as the :class:`~jobs.pipeline.stages.RunSettings` the application builds from its JSON."""
    assert app_file.is_file(), f"{app_file.relative_to(REPO)} does not exist"
    rel = app_file.relative_to(REPO).with_suffix("")
    assert rel.as_posix() == "jobs/pipeline/submit", (
        f"{rel}: the one spark-submit application is jobs/pipeline/submit.py"
    )
    module = importlib.import_module(".".join(rel.parts))
    params = vars(_argparse_namespace(module.main, args, monkeypatch))
    params["settings"] = RunSettings(**json.loads(params["settings"]))  # what main() does next
    return params


# --------------------------------------------------------------------------------------------------
# every file


def test_there_are_config_files():
    names = {p.relative_to(CLUSTER).as_posix() for p in _config_files()}
    assert {
        "emr/configurations.json",
        "emr/steps-ingest.json",
        "emr/steps-run.json",
        "k8s/rbac.yaml",
        "k8s/sparkapplication-run.yaml",
        "k8s/airflow-spark-conf.json",
    } <= names


@pytest.mark.parametrize("path", _config_files(), ids=lambda p: p.relative_to(CLUSTER).as_posix())
def test_every_file_parses(path):
    docs = _load(path)
    assert docs, f"{path}: empty"


# --------------------------------------------------------------------------------------------------
# Kubernetes


def test_sparkapplication_matches_the_image_and_the_code(monkeypatch):
    apps = _docs("SparkApplication")
    assert apps, "no SparkApplication manifest"
    pyspark = _lock()["pyspark"]
    for path, doc in apps:
        assert doc["apiVersion"] == "sparkoperator.k8s.io/v1beta2", path
        spec = doc["spec"]
        assert spec["type"] == "Python" and str(spec["pythonVersion"]) == "3" and spec["mode"] == "cluster"
        assert str(spec["sparkVersion"]) == pyspark, f"{path}: sparkVersion != pyspark pin {pyspark}"
        main = spec["mainApplicationFile"]
        assert main.startswith("local://"), f"{path}: the application is in the image (local://)"
        params = _check_application(_repo_file_of(main[len("local://") :], IMAGE_VENV), spec["arguments"], monkeypatch)
        assert params["pipeline"] == "ingest" and params["stage"] is None, "the main job: every declared stage"
        _assert_remote(params["settings"], path)
        for section in ("sparkConf", "hadoopConf"):
            for k, v in spec.get(section, {}).items():
                assert isinstance(k, str) and isinstance(v, str), f"{path}: {section} {k!r}: {v!r} must be strings"
        assert all(k.startswith("spark.") for k in spec["sparkConf"])
        assert not any(k.startswith("spark.") for k in spec["hadoopConf"]), "the operator adds spark.hadoop."
        assert spec["sparkConf"]["spark.pyspark.python"] == IMAGE_VENV + "/bin/python"
        sa = spec["driver"]["serviceAccount"]
        assert spec["sparkConf"]["spark.kubernetes.authenticate.executor.serviceAccountName"] == sa
        assert any(e["name"] == "TRACELAKE_SHUFFLE_PARTITIONS" for e in spec["driver"]["env"])
        rbac = {(d["kind"], d["metadata"]["name"]) for _, d in _docs("ServiceAccount")}
        assert ("ServiceAccount", sa) in rbac, f"{path}: service account {sa} is not in k8s/rbac.yaml"


def test_rbac_binds_the_role_to_the_service_account():
    ((_, sa),) = _docs("ServiceAccount")
    ((_, binding),) = _docs("RoleBinding")
    ((_, role),) = _docs("Role")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {
        "name": sa["metadata"]["name"],
        "namespace": sa["metadata"]["namespace"],
        "kind": "ServiceAccount",
    } in binding["subjects"]
    verbs = {v for r in role["rules"] for v in r["verbs"]}
    resources = {x for r in role["rules"] for x in r["resources"]}
    assert {"create", "delete", "get", "list", "watch"} <= verbs and {"pods", "services", "configmaps"} <= resources


def test_airflow_spark_conf_is_a_flat_map_of_spark_properties():
    conf = json.loads((CLUSTER / "k8s" / "airflow-spark-conf.json").read_text())
    assert isinstance(conf, dict) and conf
    for k, v in conf.items():
        assert isinstance(k, str) and k.startswith("spark.") and isinstance(v, str), (k, v)
    ((_, app),) = _docs("SparkApplication")
    spec = app["spec"]
    assert conf["spark.kubernetes.container.image"] == spec["image"]
    assert conf["spark.kubernetes.namespace"] == app["metadata"]["namespace"]
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == spec["driver"]["serviceAccount"]
    assert conf["spark.pyspark.python"] == spec["sparkConf"]["spark.pyspark.python"]
    assert "spark.kubernetes.driverEnv.TRACELAKE_SHUFFLE_PARTITIONS" in conf
    for k, v in spec["hadoopConf"].items():  # the same S3A mapping as the SparkApplication
        if f"spark.hadoop.{k}" in conf:
            assert conf[f"spark.hadoop.{k}"] == v, k


# --------------------------------------------------------------------------------------------------
# EMR


def _steps(name: str) -> list[dict]:
    steps = json.loads((CLUSTER / "emr" / name).read_text())
    assert isinstance(steps, list) and steps
    for s in steps:
        assert {"Name", "ActionOnFailure", "Type", "Jar", "Args"} <= set(s), s.get("Name")
        assert s["Type"] == "CUSTOM_JAR" and s["Jar"] == "command-runner.jar"
        assert all(isinstance(a, str) for a in s["Args"])
    return steps


def _assert_remote(s, where) -> None:
    """Settings of a cluster run: S3 landing zone and warehouse, and an MLflow server."""
    assert s.raw.startswith("s3://") and s.warehouse.startswith("s3://"), where
    assert s.tracking_uri and not s.tracking_uri.startswith("sqlite:"), (
        f"{where}: a remote warehouse needs a tracking server (the sqlite default is for local warehouses)"
    )


def _spark_step(step: dict) -> tuple[Path, list[str]]:
    args = step["Args"]
    assert args[0] == "spark-submit"
    i = next(i for i, a in enumerate(args) if a.endswith(".py"))
    return _repo_file_of(args[i], EMR_VENV), args[i + 1 :]


def _python_step(step: dict, monkeypatch) -> tuple[str, dict]:
    """``(stage, RunSettings dict)`` a step run with the venv's Python (no spark-submit) passes to
    :func:`jobs.pipeline.stages.run_stage`: ``python -m jobs.pipeline.submit ARGS`` parsed by submit.py, or
    ``python -c CODE JSON`` executed with ``run_stage`` and ``check_validation`` recorded, not run."""
    python, flag, *rest = step["Args"]
    assert python == EMR_VENV + "/bin/python", step["Name"]
    if flag == "-m":
        assert rest[0] == "jobs.pipeline.submit" and importlib.util.find_spec(rest[0]) is not None, step["Name"]
        params = vars(_argparse_namespace(submit.main, rest[1:], monkeypatch))
        assert params["stage"] is not None, f"{step['Name']}: one stage per step"
        return params["stage"], RunSettings(**json.loads(params["settings"])).model_dump()
    assert flag == "-c", step["Name"]
    code, settings_json = rest
    ast.parse(code)  # valid Python
    calls = []
    monkeypatch.setattr(
        stages,
        "run_stage",
        lambda name, settings, **kw: (
            calls.append(("run_stage", name, settings)) or {"stages": {name: {"status": "done"}}}
        ),
    )
    monkeypatch.setattr(stages, "check_validation", lambda record: calls.append(("check_validation", record)))
    monkeypatch.setattr(sys, "argv", ["-c", settings_json])
    exec(compile(code, step["Name"], "exec"), {"__name__": "__main__"})
    (_, name, settings), *after = calls
    assert calls[0][0] == "run_stage" and name in STAGES, f"{step['Name']}: calls no declared stage"
    assert after == [("check_validation", {"stages": {name: {"status": "done"}}})], (
        f"{step['Name']}: the step must fail, after publishing, when a job failed validation (as the DAG's last task)"
    )
    return name, RunSettings(**settings).model_dump()


@pytest.mark.parametrize("name", ["steps-ingest.json", "steps-run.json"])
def test_emr_spark_steps_parse_with_their_applications(name, monkeypatch):
    spark_steps = [s for s in _steps(name) if s["Args"][0] == "spark-submit"]
    assert spark_steps
    for step in spark_steps:
        app, args = _spark_step(step)
        params = _check_application(app, args, monkeypatch)
        assert params["pipeline"] == "ingest" or STAGES[params["stage"]].spark, (
            f"{step['Name']}: a non-Spark stage needs no spark-submit (it runs with the venv's Python)"
        )
        _assert_remote(params["settings"], step["Name"])
        assert "--deploy-mode" in step["Args"] and step["Args"][step["Args"].index("--deploy-mode") + 1] == "cluster"


def test_emr_run_step_runs_the_whole_ingest_pipeline(monkeypatch):
    (step,) = _steps("steps-run.json")
    params = _check_application(*_spark_step(step), monkeypatch)
    assert params["pipeline"] == "ingest" and params["stage"] is None


def test_emr_ingest_steps_follow_the_dag_and_share_one_run_record(monkeypatch):
    names, settings = [], []
    for step in _steps("steps-ingest.json"):
        if step["Args"][0] == "spark-submit":
            params = _check_application(*_spark_step(step), monkeypatch)
            name, s = params["stage"], params["settings"].model_dump()
        else:
            name, s = _python_step(step, monkeypatch)
        assert STAGES[name].spark == (step["Args"][0] == "spark-submit"), (
            f"{step['Name']}: Spark stages are spark-submit steps, the others plain Python"
        )
        assert step["Name"] == "tracelake-" + name.replace("_", "-")
        names.append(name)
        settings.append(s)
    # the declared order (the DAG's tasks), then the fleet report
    assert names == [st.name for st in INGEST] + [st.name for st in FLEET_REPORT]
    first = settings[0]
    assert all(s == first for s in settings), "every step runs on the same settings, hence the same run record"
    s = RunSettings(**first)
    assert s.since and s.until, "one interval"
    assert s.record == record_uri(s.warehouse, as_utc(s.since), as_utc(s.until)), (
        "the record path the DAG uses for this interval"
    )
    assert s.record.startswith(s.warehouse + "/_runs/ingest/")
    _assert_remote(s, "steps-ingest.json")
    # a failed stage stops the interval; the fleet report (a separate pipeline) is best effort
    failure = {st["Name"]: st["ActionOnFailure"] for st in _steps("steps-ingest.json")}
    assert [failure["tracelake-" + st.name.replace("_", "-")] for st in INGEST] == ["CANCEL_AND_WAIT"] * len(INGEST)


def test_emr_publish_step_calls_the_declared_stage(monkeypatch):
    (step,) = [s for s in _steps("steps-ingest.json") if s["Name"] == "tracelake-publish"]
    name, _ = _python_step(step, monkeypatch)
    assert name == "publish" and not STAGES[name].spark


def test_emr_bootstrap_imports_the_application_without_pyspark():
    """The bootstrap's import check runs in the EMR venv, which has no pyspark (the cluster's own is used)."""
    text = (CLUSTER / "emr" / "bootstrap.sh").read_text()
    code = re.search(r'"\$VENV/bin/python" -c "([^"]+)"', text).group(1)
    assert "jobs.pipeline.submit" in code
    block = (
        "import sys, importlib.abc\n"
        "class _NoPyspark(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in ('pyspark', 'torch'):\n"
        "            raise ImportError('not in the EMR venv: ' + name)\n"
        "sys.meta_path.insert(0, _NoPyspark())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", block + code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert out.returncode == 0 and "tracelake ok" in out.stdout, out.stderr


def test_emr_configurations(monkeypatch):
    conf = json.loads((CLUSTER / "emr" / "configurations.json").read_text())
    by = {c["Classification"]: c for c in conf}
    assert {"spark-defaults", "spark-env"} <= set(by)
    for c in conf:
        for k, v in c.get("Properties", {}).items():
            assert isinstance(k, str) and isinstance(v, str), (c["Classification"], k, v)
        for sub in c.get("Configurations", []):
            for k, v in sub.get("Properties", {}).items():
                assert isinstance(k, str) and isinstance(v, str), (sub["Classification"], k, v)
    defaults = by["spark-defaults"]["Properties"]
    assert all(k.startswith("spark.") for k in defaults)
    assert defaults["spark.pyspark.python"] == EMR_VENV + "/bin/python"
    env = by["spark-env"]["Configurations"][0]
    assert env["Classification"] == "export" and env["Properties"]["PYSPARK_PYTHON"] == EMR_VENV + "/bin/python"
    # get_spark takes the shuffle partitions from the environment (its builder setting beats spark-defaults)
    monkeypatch.setenv("TRACELAKE_SHUFFLE_PARTITIONS", "64")
    assert jobs.spark.session_conf()["spark.sql.shuffle.partitions"] == "64"
    assert "TRACELAKE_SHUFFLE_PARTITIONS" in env["Properties"]
    assert "spark.yarn.appMasterEnv.TRACELAKE_SHUFFLE_PARTITIONS" in defaults
    assert "spark.sql.shuffle.partitions" not in defaults, "overridden by get_spark: set the env var instead"


def test_emr_bootstrap_installs_the_venv_the_configurations_name():
    text = (CLUSTER / "emr" / "bootstrap.sh").read_text()
    assert f"VENV={EMR_VENV}" in text and "python3.11 -m venv" in text
    pattern = re.search(r"grep -v -E '([^']+)'", text).group(1)
    kept = [line for line in (REPO / "requirements.lock").read_text().splitlines() if not re.search(pattern, line)]
    names = {line.split("==")[0].lower() for line in kept if "==" in line}
    assert not names & {"torch", "pyspark", "pyspark-client"} and {"pyarrow", "msgspec", "s3fs"} <= names
    assert "--no-deps -r" in text


# --------------------------------------------------------------------------------------------------
# the image


def _dockerfile() -> str:
    return (CLUSTER / "Dockerfile").read_text()


def test_dockerfile_spark_and_python_match_the_lock():
    text = _dockerfile()
    spark = re.search(r"^ARG SPARK_VERSION=(\S+)$", text, re.M).group(1)
    assert spark == _lock()["pyspark"], "the entrypoint scripts' Spark version must be the pyspark pin"
    py = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)", text, re.M).group(1)
    requires = re.search(r'requires-python\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert f">={py}" in requires and SITE.strip("/").split("/")[1] == f"python{py}"
    assert f"SPARK_HOME={IMAGE_VENV}{SITE}pyspark" in text and f"VENV={IMAGE_VENV}" in text


def test_dockerfile_copies_files_that_exist_and_leaves_torch_out():
    text = _dockerfile()
    for src in re.findall(r"^COPY (?!--from)(.+?) \S+$", text, re.M):
        for name in shlex.split(src):
            assert (REPO / name).exists(), f"Dockerfile copies {name}, which is not in the repository"
    pattern = re.search(r"grep -v -E '([^']+)' /tmp/requirements.lock", text).group(1)
    lock = (REPO / "requirements.lock").read_text().splitlines()
    dropped = [line for line in lock if "==" in line and re.search(pattern, line)]
    assert [d.split("==")[0] for d in dropped] == ["torch"], "only torch is left out of the image"
    capture = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["capture"]
    assert [r.split("==")[0] for r in capture] == ["torch"], "what the image leaves out is the capture extra"
    assert "--no-deps -r /tmp/requirements.image.txt" in text
