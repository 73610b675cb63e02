"""The import graph of our code keeps its arrows one way (ARCHITECTURE.md, issue 11).

Every module of ``jobs/``, ``schemas/``, ``capture_hooks/`` and ``dags/`` is parsed with :mod:`ast` (no
import runs): module-level, function-local and ``TYPE_CHECKING`` imports all count, relative imports
are resolved, and ``from pkg import name`` points at the submodule ``pkg.name`` when that is a module
(else at ``pkg``). Checks, each failing with the offending imports (``importer:line → imported``):

(a) no cycle among modules; (b) no cycle among folders (two sibling folders, i.e. children of one folder,
never import each other, directly or through other siblings); (c) ``capture_hooks`` imports nothing of
``jobs``/``schemas``, ``schemas`` nothing of ``jobs``; (d) ``dags/`` imports of ``jobs`` only
:data:`DAG_ENTRY_POINTS`; (e) no backward arrow between the layers of :data:`LAYERS` (``__main__``
modules are entry points, the top layer; ``jobs/__init__.py`` imports nothing); (f) a function-local
import either loads a heavy library (:data:`HEAVY`) or says why it is local in a trailing ``#`` comment.

Violations being fixed in other branches are listed in the ``PENDING_*`` sets: they are reported as
warnings (``pytest -W always::UserWarning`` or the warnings summary shows them), not failures, and an
entry that no longer occurs fails the test, so the lists only shrink.
"""

from __future__ import annotations

import ast
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jobs", "schemas", "capture_hooks", "dags")

#: Layers of ``jobs``, lowest first: a module may import its own layer and those below it, never above.
LAYERS = (
    ("jobs.common", "jobs.spark", "jobs.executor"),
    ("jobs.commit", "jobs.warehouse"),
    ("jobs.landing",),
    ("jobs.normalize",),
    ("jobs.validate",),
    ("jobs.analyze",),
    ("jobs.fleet",),
    ("jobs.publish",),
    ("jobs.pipeline",),
    ("jobs.agent",),
    ("jobs.cli", "jobs.sql", "jobs.demo"),
)
#: The only modules of ``jobs`` a DAG file may import.
DAG_ENTRY_POINTS = frozenset({"jobs.pipeline.stages", "jobs.pipeline.settings", "jobs.pipeline.operators"})
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

#: Imports being removed in other branches (issue 11), as ``(importer prefix, imported prefix)``: the cycle
#: checks leave them out (a cycle only they close is a warning), their layer and DAG violations are warnings.
PENDING_EDGES: frozenset[tuple[str, str]] = frozenset()
#: Module cycles being broken in other branches: a cycle whose modules all lie in one of these sets is a warning.
PENDING_MODULE_CYCLES: frozenset[frozenset[str]] = frozenset()
#: Modules whose function-local imports (check f) are reviewed in other branches: their findings are warnings.
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


def _pending_edge(e: Edge) -> tuple[str, str] | None:
    return next((p for p in sorted(PENDING_EDGES) if _under(e.src, p[0]) and _under(e.dst, p[1])), None)


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


def _cycles(edges: list[Edge], node_of) -> dict[frozenset, str]:
    """``{nodes of a cycle: report}`` for the graph ``node_of(edge) = (from, to)`` (``None``: edge not counted).

    Imports made by ``__main__`` modules are left out: nothing imports an entry point, so it closes no cycle
    of modules, and a command-line wrapper of a stage may call the layers above it (the pipeline
    declaration, the report renderer)."""
    succ, via = defaultdict(set), defaultdict(list)
    for e in edges:
        if e.src.endswith(".__main__"):
            continue
        pair = node_of(e)
        if pair is not None and pair[0] != pair[1]:
            succ[pair[0]].add(pair[1])
            via[pair].append(e)
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


def _check_cycles(node_of, what: str, pending_sets=frozenset()) -> list[str]:
    """Reports of the cycles of the graph without :data:`PENDING_EDGES` that lie in no ``pending_sets`` entry.

    Warns about the other cycles (closed only by pending edges, or inside a pending set); fails on a
    ``pending_sets`` entry that no cycle touches any more.
    """
    every = _cycles(EDGES, node_of)
    kept = _cycles([e for e in EDGES if _pending_edge(e) is None], node_of)
    stale = [sorted(p) for p in pending_sets if not any(p & c for c in every)]
    assert not stale, f"pending {what}s that no longer occur (remove them from the PENDING list): {stale}"
    _warn(
        f"{what} closed by a pending edge",
        [every[c] for c in sorted(every, key=sorted) if not any(c <= k for k in kept)],
    )
    inside = [c for c in sorted(kept, key=sorted) if any(c <= p for p in pending_sets)]
    _warn(what, [kept[c] for c in inside])
    return [kept[c] for c in sorted(kept, key=sorted) if c not in inside]


def _check_edges(bad: list[Edge], what: str) -> list[str]:
    """``bad`` edges not pending, as text; warns about the pending ones, grouped per :data:`PENDING_EDGES` entry."""
    pending: dict = defaultdict(list)
    for e in bad:
        if _pending_edge(e) is not None:
            pending[_pending_edge(e)].append(str(e))
    _warn(what, [f"{p[0]} → {p[1]}: {', '.join(es)}" for p, es in sorted(pending.items())])
    return [str(e) for e in bad if _pending_edge(e) is None]


def _sibling_folders(e: Edge) -> tuple[str, str] | None:
    """The two children of the deepest folder holding both ends of ``e`` that hold ``e.src`` and ``e.dst``,
    when both are folders (``None`` when one end contains the other or is a module at that level)."""
    a, b = e.src.split("."), e.dst.split(".")
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if i >= len(a) or i >= len(b):
        return None
    fa, fb = ".".join(a[: i + 1]), ".".join(b[: i + 1])
    return (fa, fb) if _is_package(fa) and _is_package(fb) or (fa in PACKAGES and fb in PACKAGES) else None


def layer_of(module: str) -> int | None:
    """Index of ``module``'s layer in :data:`LAYERS`; ``__main__`` modules are the top layer."""
    if module.endswith(".__main__"):
        return len(LAYERS)
    return next((i for i, layer in enumerate(LAYERS) if any(_under(module, p) for p in layer)), None)


def _layer_violation(e: Edge) -> bool:
    if not (_under(e.src, "jobs") and _under(e.dst, "jobs")) or "jobs" in (e.src, e.dst):
        return False
    ls, ld = layer_of(e.src), layer_of(e.dst)
    return ls is not None and ld is not None and ld > ls


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


def test_no_module_cycles():
    """(a)"""
    bad = _check_cycles(lambda e: (e.src, e.dst), "module cycle", PENDING_MODULE_CYCLES)
    assert not bad, "import cycles among modules:\n  " + "\n  ".join(bad)


def test_no_folder_cycles():
    """(b)"""
    bad = _check_cycles(_sibling_folders, "folder cycle")
    assert not bad, "import cycles among folders:\n  " + "\n  ".join(bad)


def test_capture_hooks_and_schemas_import_nothing_above_them():
    """(c)"""
    bad = [
        e
        for e in EDGES
        if (_under(e.src, "capture_hooks") and not _under(e.dst, "capture_hooks"))
        or (_under(e.src, "schemas") and _under(e.dst, "jobs"))
    ]
    assert not bad, "capture_hooks may import only capture_hooks, schemas nothing of jobs:\n  " + "\n  ".join(
        map(str, bad)
    )


def test_dags_import_only_pipeline_entry_points():
    """(d)"""
    bad = _check_edges(
        [e for e in EDGES if _under(e.src, "dags") and _under(e.dst, "jobs") and e.dst not in DAG_ENTRY_POINTS],
        "DAG import",
    )
    assert not bad, f"dags/ may import of jobs only {sorted(DAG_ENTRY_POINTS)}:\n  " + "\n  ".join(bad)


def test_no_backward_arrows_between_layers():
    """(e)"""
    order = " < ".join(", ".join(layer) for layer in LAYERS) + " < __main__ modules"
    bad = _check_edges([e for e in EDGES if _layer_violation(e)], "backward arrow")
    assert not bad, f"imports from a lower layer of a higher one ({order}):\n  " + "\n  ".join(bad)


def test_every_jobs_module_has_a_layer():
    """(e) covers every module of ``jobs``."""
    missing = [m for m in MODULES if _under(m, "jobs") and m != "jobs" and layer_of(m) is None]
    assert not missing, f"modules of jobs in no layer (add their folder to LAYERS): {missing}"


def test_jobs_init_imports_nothing():
    """(e) ``jobs/__init__.py`` is empty of imports."""
    assert not IMPORTS["jobs"], f"jobs/__init__.py imports: {[i.target for i in IMPORTS['jobs']]}"


def test_pending_edges_still_occur():
    """Every :data:`PENDING_EDGES` entry still matches an import (else remove it from the list)."""
    stale = [p for p in sorted(PENDING_EDGES) if not any(_pending_edge(e) == p for e in EDGES)]
    assert not stale, f"PENDING_EDGES entries that no longer occur (remove them): {stale}"


def test_function_local_imports_say_why():
    """(f)"""
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
