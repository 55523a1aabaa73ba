#!/usr/bin/env bash
# Set up (idempotent) and run the main job: a few SkillRise training steps on WebShop, offline, on CPU,
# with the embedded SmolLM2-135M-Instruct and a generated product catalog. Extra flags go to skillrise-train.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/skillrise-train --env webshop "$@"
