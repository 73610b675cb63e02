"""infra/cluster: every YAML/JSON file parses, and what it names exists in the code and agrees with it.

The step and manifest arguments are parsed by the applications' own parsers (argparse of the
``jobs/pipeline/*_main.py`` applications and ``jobs.publish.report``, typer/click of ``jobs.cli``), stopped right
after parsing, so a renamed or removed option fails here instead of on a cluster.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

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
    return [(p, d) for p in _config_files() if p.suffix in (".yaml", ".yml") for d in _load(p)
            if isinstance(d, dict) and d.get("kind") == kind]


def _repo_file_of(container_path: str, venv: str) -> Path:
    """The repository file installed at ``container_path`` (``<venv>/lib/python3.11/site-packages/<rel>``)."""
    prefix = venv + SITE
    assert container_path.startswith(prefix), f"{container_path}: not under {prefix}"
    return REPO / container_path[len(prefix):]


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


def _cli_params(argv: list[str]) -> dict:
    """Parameters of ``tracelake <command> <options>`` as typer/click parses them (nothing runs)."""
    import typer

    from jobs.cli import app

    group = typer.main.get_command(app)
    command = group.commands[argv[0]]
    return command.make_context(argv[0], list(argv[1:])).params


def _check_application(app_file: Path, args: list[str], monkeypatch) -> dict:
    """Parse ``args`` the way the spark-submit application ``app_file`` does; returns the parsed options."""
    assert app_file.is_file(), f"{app_file.relative_to(REPO)} does not exist"
    rel = app_file.relative_to(REPO).with_suffix("")
    module = importlib.import_module(".".join(rel.parts))
    if rel.name == "module_main":  # python -m <module> ARGS inside spark-submit
        target, rest = args[0], args[1:]
        spec = importlib.util.find_spec(target)
        assert spec is not None, f"module_main: module {target} does not exist"
        if target == "jobs.cli":
            return _cli_params(rest)
        main_mod = importlib.import_module(target + ".__main__" if spec.submodule_search_locations else target)
        return vars(_argparse_namespace(main_mod.main, rest, monkeypatch))
    return vars(_argparse_namespace(module.main, args, monkeypatch))


# --------------------------------------------------------------------------------------------------
# every file


def test_there_are_config_files():
    names = {p.relative_to(CLUSTER).as_posix() for p in _config_files()}
    assert {"emr/configurations.json", "emr/steps-ingest.json", "emr/steps-run.json", "k8s/rbac.yaml",
            "k8s/sparkapplication-run.yaml", "k8s/airflow-spark-conf.json"} <= names


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
        params = _check_application(_repo_file_of(main[len("local://"):], IMAGE_VENV), spec["arguments"], monkeypatch)
        assert params["raw"].startswith("s3://") and params["warehouse"].startswith("s3://")
        assert params["tracking_uri"] and not params["tracking_uri"].startswith("sqlite:"), \
            "a remote warehouse needs a tracking server (the sqlite default is for local warehouses)"
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
    (_, sa), = _docs("ServiceAccount")
    (_, binding), = _docs("RoleBinding")
    (_, role), = _docs("Role")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"], "kind": "ServiceAccount"} \
        in binding["subjects"]
    verbs = {v for r in role["rules"] for v in r["verbs"]}
    resources = {x for r in role["rules"] for x in r["resources"]}
    assert {"create", "delete", "get", "list", "watch"} <= verbs and {"pods", "services", "configmaps"} <= resources


def test_airflow_spark_conf_is_a_flat_map_of_spark_properties():
    conf = json.loads((CLUSTER / "k8s" / "airflow-spark-conf.json").read_text())
    assert isinstance(conf, dict) and conf
    for k, v in conf.items():
        assert isinstance(k, str) and k.startswith("spark.") and isinstance(v, str), (k, v)
    (_, app), = _docs("SparkApplication")
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


def _spark_step(step: dict) -> tuple[Path, list[str]]:
    args = step["Args"]
    assert args[0] == "spark-submit"
    i = next(i for i, a in enumerate(args) if a.endswith(".py"))
    return _repo_file_of(args[i], EMR_VENV), args[i + 1:]


@pytest.mark.parametrize("name", ["steps-ingest.json", "steps-run.json"])
def test_emr_spark_steps_parse_with_their_applications(name, monkeypatch):
    for step in _steps(name):
        if step["Args"][0] != "spark-submit":
            continue
        app, args = _spark_step(step)
        params = _check_application(app, args, monkeypatch)
        assert str(params.get("warehouse", "")).startswith("s3://"), step["Name"]


def test_emr_ingest_steps_follow_the_dag_and_share_one_run_record(monkeypatch):
    from jobs.landing.interval import as_utc
    from jobs.pipeline import settings

    steps = _steps("steps-ingest.json")
    parsed = {}
    for step in steps:
        if step["Args"][0] == "spark-submit":
            app, args = _spark_step(step)
            parsed[step["Name"]] = (app.name, _check_application(app, args, monkeypatch))
    apps = [a for a, _ in parsed.values()]
    # the DAG's order: normalize, validate normalize, analyze, validate analyze (then MLflow, the report)
    assert apps[:4] == ["normalize_main.py", "validate_main.py", "analyze_main.py", "validate_main.py"]
    assert [p.get("stage") for _, p in list(parsed.values())[:4]] == [None, "normalize", None, "analyze"]
    norm = next(p for a, p in parsed.values() if a == "normalize_main.py")
    record = norm["record"]
    expected = f"{norm['warehouse']}/_runs/ingest/{settings.interval_name(as_utc(norm['since']), as_utc(norm['until']))}.json"
    assert record == expected, "the record path the DAG uses for this interval"
    for a, p in parsed.values():
        if "record" in p:
            assert p["record"] == record and p["warehouse"] == norm["warehouse"], a
    json.loads(norm["storage_options"])


def test_emr_mlflow_step_calls_log_run_with_the_keys_it_reads():
    from jobs.pipeline import mlflow_log

    (step,) = [s for s in _steps("steps-ingest.json") if s["Args"][0] != "spark-submit"]
    python, flag, code, conf_json = step["Args"]
    assert python == EMR_VENV + "/bin/python" and flag == "-c"
    tree = ast.parse(code)  # valid Python
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("jobs.pipeline.mlflow_log", "log_run") in imported and callable(mlflow_log.log_run)
    reads = set(re.findall(r"""conf\[["'](\w+)["']\]""", inspect.getsource(mlflow_log.log_run)))
    assert reads and reads <= set(json.loads(conf_json)), f"log_run reads {reads}"
    ingest = [_spark_step(s) for s in _steps("steps-ingest.json") if s["Args"][0] == "spark-submit"]
    records = {a[a.index("--record") + 1] for _, a in ingest if "--record" in a}
    assert json.loads(conf_json)["record"] in records


def test_emr_configurations():
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
    import jobs.spark

    assert "TRACELAKE_SHUFFLE_PARTITIONS" in inspect.getsource(jobs.spark.get_spark)
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
