#!/usr/bin/env bash
# Create the HTA 0.5.0 reference venv used by tests/golden/make_hta_golden.py and
# benchmarks/normalize_bench.py. Kept apart from .venv: HTA is a peer tool we compare
# against, not a dependency of tracelake.
#
#   benchmarks/hta_venv.sh            # -> /work/main/.hta-venv
#   HTA_VENV=/some/dir benchmarks/hta_venv.sh
#   HTA_PYTHON=python3.11 ...         # interpreter used to create the venv (default python3.11)
#
# Idempotent: does nothing when `import hta` already works in the venv and reports 0.5.0.
# HTA does not need torch. If pip ever tries to pull torch in, we pin the local CPU wheel
# torch==2.13.0 (never a CUDA build).
set -euo pipefail

HTA_VENV="${HTA_VENV:-/work/main/.hta-venv}"
HTA_PYTHON="${HTA_PYTHON:-python3.11}"
HTA_VERSION="0.5.0"

check() {
  "$HTA_VENV/bin/python" - <<PY 2>/dev/null
import importlib.metadata as m, sys
import hta  # noqa: F401
from hta.trace_analysis import TraceAnalysis  # noqa: F401
v = m.version("HolisticTraceAnalysis")
import pandas
sys.exit(0 if v == "$HTA_VERSION" and int(pandas.__version__.split(".")[0]) < 3 else 1)
PY
}

if [ -x "$HTA_VENV/bin/python" ] && check; then
  echo "hta_venv: $HTA_VENV already has HolisticTraceAnalysis $HTA_VERSION (pandas<3); nothing to do"
  exit 0
fi

if [ ! -x "$HTA_VENV/bin/python" ]; then
  echo "hta_venv: creating $HTA_VENV with $("$HTA_PYTHON" --version)"
  "$HTA_PYTHON" -m venv "$HTA_VENV"
fi

# A constraints file keeps any transitive torch on the CPU wheel we already use.
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" > "$constraints"

"$HTA_VENV/bin/python" -m pip install --quiet --upgrade pip
"$HTA_VENV/bin/python" -m pip install --quiet -c "$constraints" \
  "holistictraceanalysis==$HTA_VERSION" 'pandas<3'

if "$HTA_VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "hta_venv: note: torch is installed in $HTA_VENV ($("$HTA_VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
fi

check || { echo "hta_venv: install finished but 'import hta' / version check failed" >&2; exit 1; }
"$HTA_VENV/bin/python" - <<'PY'
import importlib.metadata as m
names = ["HolisticTraceAnalysis", "pandas", "numpy", "networkx", "plotly", "psutil"]
print("hta_venv: ok:", ", ".join(f"{n} {m.version(n)}" for n in names))
PY
