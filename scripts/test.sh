#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite, slow integration tests included.
# Data: ALFWORLD_DATA and WEBSHOP_DATA default to ../shared/data/<benchmark> when that folder exists.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

shared=$(cd .. && pwd)/shared/data
if [ -z "${ALFWORLD_DATA:-}" ] && [ -d "$shared/alfworld" ]; then export ALFWORLD_DATA="$shared/alfworld"; fi
if [ -z "${WEBSHOP_DATA:-}" ] && [ -d "$shared/webshop" ]; then export WEBSHOP_DATA="$shared/webshop"; fi
# One cache for the whole run (extracted games, translated PDDL, generated catalogs), kept between runs.
export SKILLRISE_CACHE=${SKILLRISE_CACHE:-$PWD/.cache/skillrise}
export SKILLRISE_CACHE_PINNED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

.venv/bin/python -m pytest --timeout=1200 "$@"
# the whole suite (no arguments): also the other supported Python versions, a smoke test each
if [ "$#" -eq 0 ]; then bash scripts/smoke_pythons.sh; fi
