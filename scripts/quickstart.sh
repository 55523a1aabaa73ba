#!/usr/bin/env bash
# Set up (idempotent) and run the main job: a few SkillRise training steps on WebShop, offline, on CPU,
# with the embedded SmolLM2-135M-Instruct and a generated product catalog. Extra flags go to skillrise-train.
# Tasks are capped at 5 steps (WebShop's own limit is 15: a 135M model uses them all, three times the run
# time, and does not shop either way); pass --max-task-steps 15 for the backend's limit.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Each run in a folder of its own (runs/quickstart/<time>): the trainer refuses a folder that holds a run
# (--resume or --overwrite), and a second quick start should not lose the first. --output-dir overrides.
out=(--output-dir "runs/quickstart/$(date +%Y%m%d-%H%M%S)")
for arg in "$@"; do case "$arg" in --output-dir|--output_dir|--output-dir=*|--output_dir=*) out=() ;; esac; done
# A CPU with bfloat16 units (avx512_bf16, amx_bf16) samples with a bfloat16 copy of the policy and autocasts
# the update, which is faster (benchmarks/performance/main_job.py measures it; the ratio corrects the sampler's precision, docs/train.md
# "CPU generation and update"). SKILLRISE_FLOAT32=1 keeps everything in float32.
fast=()
if [ -z "${SKILLRISE_FLOAT32:-}" ] && grep -qE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; then
  fast=(--generation-dtype bfloat16 --bf16)
fi
exec .venv/bin/skillrise-train --env webshop --max-task-steps 5 "${fast[@]}" "${out[@]}" "$@"
