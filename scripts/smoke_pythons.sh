#!/usr/bin/env bash
# Smoke test of the other supported Python versions (3.10 to 3.13; the main suite runs on .venv's).
# Each version gets its own virtual environment (.venv-py3.X, set up once, again when pyproject.toml or
# this script changes) with the environment extras (the trainer is tested on the main version only), and
# runs: every registered id on its real engine (check_env and an expert sequence), the env tests, and the
# Gymnasium idioms (async vector envs, pickling). A version that is not installed is skipped with a notice
# (SKILLRISE_REQUIRE_PYTHONS=1 makes that an error). SKILLRISE_SMOKE_PYTHONS="3.12 3.13" picks versions;
# SKILLRISE_SMOKE_PYTHONS="" skips the smoke tests.
set -euo pipefail
cd "$(dirname "$0")/.."
versions=${SKILLRISE_SMOKE_PYTHONS-"3.10 3.12 3.13"}
main=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
want=$(cat pyproject.toml scripts/smoke_pythons.sh | sha256sum | cut -c1-16)
for v in $versions; do
    [ "$v" = "$main" ] && continue
    py=""  # pyenv's versions first (its shims name versions that may not be active), then PATH
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v" "$(command -v "python$v" || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c "import sys" >/dev/null 2>&1; then
            py=$candidate
            break
        fi
    done
    if [ -z "$py" ]; then
        echo "[smoke] python$v is not installed: skipped"
        if [ "${SKILLRISE_REQUIRE_PYTHONS:-0}" = 1 ]; then exit 1; fi
        continue
    fi
    venv=.venv-py$v
    if [ "$(cat "$venv/.skillrise-installed" 2>/dev/null)" != "$want" ]; then
        echo "[smoke] setting up $venv with $py"
        rm -rf "$venv"
        "$py" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --upgrade pip
        "$venv/bin/python" -m pip install -q -e ".[alfworld,scienceworld,webshop,bench]" "pytest>=8" "pytest-timeout>=2.3"
        echo "$want" > "$venv/.skillrise-installed"
    fi
    echo "[smoke] python $v: registered envs, env, Gymnasium idioms"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 \
        tests/test_registered_envs.py tests/test_env.py tests/test_gym_idioms.py
done
