"""The import graph of our code keeps its arrows one way (ARCHITECTURE.md, issue 11).

The layer rules are import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``), run by
``lint-imports`` in ``make lint`` and by :func:`test_import_linter_contracts_are_kept` here:
``capture_hooks`` imports nothing of ours, ``schemas`` nothing of ``jobs``/``dags``, ``jobs`` nothing of
``dags``; ``dags/`` imports of ``jobs`` only the pipeline entry points; the layers of ``jobs`` in data-flow
order, every folder of ``jobs`` in one (``__main__`` modules are entry points: what they import is not
checked, and nothing imports them); no cycle among the sibling modules and folders of any folder.

This file checks with :mod:`ast` (no import runs) what those contracts cannot say. Every module of
``jobs/``, ``schemas/``, ``capture_hooks/`` and ``dags/`` is parsed: module-level, function-local and
``TYPE_CHECKING`` imports all count, relative imports are resolved, and ``from pkg import name`` points at
the submodule ``pkg.name`` when that is a module (else at ``pkg``). Checks, each failing with the offending
imports (``importer:line → imported``):

(a) no cycle among modules (the ``acyclic_siblings`` contract folds each sibling into one node and leaves
the package's own ``__init__`` out, so a cycle through ``pkg/__init__.py`` and ``pkg``'s submodules passes
it); (b) ``jobs/__init__.py`` imports nothing at all, standard library and third-party included (a
contract names the modules it forbids, it cannot say "nothing"); (c) a function-local import either loads
a heavy library (:data:`HEAVY`) or says why it is local in a trailing ``#`` comment (import-linter does not
tell a function-local import from a module-level one, nor reads comments).

Violations being fixed in other branches are listed in the ``PENDING_*`` sets: they are reported as
warnings (``pytest -W always::UserWarning`` or the warnings summary shows them), not failures, and an
entry that no longer occurs fails the test, so the lists only shrink. A contract's pending imports go in
its ``ignore_imports`` (an entry that matches no import fails ``lint-imports``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jobs", "schemas", "capture_hooks", "dags")

#: Libraries a function-local import may load without saying why (heavy, or kept off light paths),
#: plus the optional C extension of the Kineto scanner.
HEAVY = frozenset(
    {
        "pyspark",
        "mlflow",
        "great_expectations",
        "torch",
        "matplotlib",
        "airflow",
        "jinja2",
        "boto3",
        "s3fs",
        "scipy",
        "sklearn",
        "psutil",
        "xprof",
        "jobs.normalize.kineto._kineto_scan",
    }
)

# ----------------------------------------------------------------------------- pending (other branches)

#: Module cycles being broken in other branches: a cycle whose modules all lie in one of these sets is a warning.
PENDING_MODULE_CYCLES: frozenset[frozenset[str]] = frozenset()
#: Modules whose function-local imports (check c) are reviewed in other branches: their findings are warnings.
PENDING_LOCAL_IMPORTS: frozenset[str] = frozenset()

# ----------------------------------------------------------------------------- the graph


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}
SOURCES: dict[str, list[str]] = {m: p.read_text(encoding="utf-8").splitlines() for m, p in MODULES.items()}


def _is_package(name: str) -> bool:
    return name in MODULES and MODULES[name].name == "__init__.py"


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _ours(name: str) -> str | None:
    """The module of ours that ``name`` resolves to (its longest prefix that is a module), or ``None``."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) or None


@dataclass(frozen=True)
class Import:
    """One imported name of ``module`` as written: ``target`` is the dotted name (``pkg.name`` when
    ``from pkg import name`` names a module of ours, else ``pkg``); ``local`` inside a function."""

    module: str
    target: str
    line: int
    end_line: int
    local: bool


def _imports(name: str) -> list[Import]:
    tree = ast.parse("\n".join(SOURCES[name]), str(MODULES[name]))
    local = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for n in ast.walk(f)
        if isinstance(n, (ast.Import, ast.ImportFrom))
    }
    package = name if _is_package(name) else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x / from ..pkg import y
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if _ours(f"{mod}.{a.name}") == f"{mod}.{a.name}" else mod for a in node.names]
        else:
            continue
        out += [Import(name, t, node.lineno, node.end_lineno, id(node) in local) for t in targets]
    return sorted(set(out), key=lambda i: (i.line, i.target))


IMPORTS: dict[str, list[Import]] = {m: _imports(m) for m in MODULES}


@dataclass(frozen=True)
class Edge:
    """Module ``src`` imports module ``dst`` at ``line``."""

    src: str
    dst: str
    line: int

    def __str__(self) -> str:
        return f"{self.src}:{self.line} → {self.dst}"


EDGES: list[Edge] = sorted(
    {
        Edge(i.module, _ours(i.target), i.line)
        for imps in IMPORTS.values()
        for i in imps
        if _ours(i.target) not in (None, i.module)
    },
    key=lambda e: (e.src, e.line, e.dst),
)


def _warn(what: str, items) -> None:
    for item in items:
        warnings.warn(f"pending {what} (fixed in another branch): {item}", stacklevel=2)


def _sccs(nodes, succ) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on, stack, out = set(), [], []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def module_cycles() -> dict[frozenset, str]:
    """``{modules of a cycle: report}`` of the module graph :data:`EDGES`.

    Imports made by ``__main__`` modules are left out: nothing imports an entry point, so it closes no cycle
    of modules, and a command-line wrapper of a stage may call the layers above it (the pipeline
    declaration, the report renderer)."""
    succ, via = defaultdict(set), defaultdict(list)
    for e in EDGES:
        if not e.src.endswith(".__main__"):
            succ[e.src].add(e.dst)
            via[e.src, e.dst].append(e)
    nodes = set(succ) | {d for ds in succ.values() for d in ds}
    out = {}
    for comp in _sccs(nodes, succ):
        lines = [
            f"{a} → {b}: " + ", ".join(str(e) for e in es[:4]) + (f" (+{len(es) - 4} more)" if len(es) > 4 else "")
            for (a, b), es in sorted(via.items())
            if a in comp and b in comp
        ]
        out[frozenset(comp)] = "cycle among " + ", ".join(comp) + ":\n      " + "\n      ".join(lines)
    return out


def local_imports_without_reason() -> dict[str, list[str]]:
    """``{module: ["module:line: import …", …]}``: function-local imports of a module that is not
    :data:`HEAVY`, without a ``#`` comment on the import's lines saying why it is local."""
    out: dict[str, list[str]] = defaultdict(list)
    for name, imps in IMPORTS.items():
        for line in sorted({i.line for i in imps if i.local and not any(_under(i.target, h) for h in HEAVY)}):
            imp = next(i for i in imps if i.line == line)
            text = SOURCES[name][imp.line - 1 : imp.end_line]
            if not any("#" in t for t in text):
                out[name].append(f"{name}:{imp.line}: {text[0].strip()}")
    return out


# ----------------------------------------------------------------------------- checks


def test_import_linter_contracts_are_kept():
    """The contracts of ``[tool.importlinter]`` in pyproject.toml (the layer rules) are all kept."""
    # `lint-imports --no-cache` from the repository root (it puts the current directory on sys.path, so the
    # checkout's packages are the ones read, and dags/ is found as a namespace package)
    cmd = "from importlinter.cli import lint_imports_command as c; c.main(['--no-cache', '--no-logo'])"
    proc = subprocess.run([sys.executable, "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"lint-imports: contracts broken or not checked\n{proc.stdout}\n{proc.stderr}"


def test_no_module_cycles():
    """(a)"""
    every = module_cycles()
    stale = [sorted(p) for p in PENDING_MODULE_CYCLES if not any(p & c for c in every)]
    assert not stale, f"pending module cycles that no longer occur (remove them from PENDING_MODULE_CYCLES): {stale}"
    pending = [c for c in sorted(every, key=sorted) if any(c <= p for p in PENDING_MODULE_CYCLES)]
    _warn("module cycle", [every[c] for c in pending])
    bad = [every[c] for c in sorted(every, key=sorted) if c not in pending]
    assert not bad, "import cycles among modules:\n  " + "\n  ".join(bad)


def test_jobs_init_imports_nothing():
    """(b) ``jobs/__init__.py`` is empty of imports."""
    assert not IMPORTS["jobs"], f"jobs/__init__.py imports: {[i.target for i in IMPORTS['jobs']]}"


def test_function_local_imports_say_why():
    """(c)"""
    found = local_imports_without_reason()
    stale = sorted(PENDING_LOCAL_IMPORTS - set(found))
    assert not stale, f"PENDING_LOCAL_IMPORTS modules without such imports any more (remove them): {stale}"
    _warn(
        "function-local imports without a reason",
        [
            f"{m}: {len(found[m])} (lines " + ", ".join(x.split(":")[1] for x in found[m]) + ")"
            for m in sorted(found)
            if m in PENDING_LOCAL_IMPORTS
        ],
    )
    bad = [x for m in sorted(found) if m not in PENDING_LOCAL_IMPORTS for x in found[m]]
    assert not bad, (
        "function-local imports of a light module without a trailing '# why' comment (import them "
        "at the top, or say why they are local, e.g. '# heavy: pyspark', '# cycle: …'):\n  " + "\n  ".join(bad)
    )
