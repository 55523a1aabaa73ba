#!/usr/bin/env bash
# Commit each stage of the decisive experiment as it lands, with its report and every rendered page brought up
# to date: run it beside `python benchmarks/experiments/decisive_experiment.py run` so that a session that ends
# abruptly loses no finished arm. It polls every minute for new stage JSONs under benchmarks/results/decisive/,
# waits while a stage is still being written (*.tmp) and for the init the run packs right after its JSON, then
# runs `report` and scripts/render_results.py and commits only those files (your own edits elsewhere stay
# uncommitted: commit them with `git commit -- <paths>`). Each commit is logged to runs/commit_stages.log.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p runs
while true; do
  sleep 60
  git status --porcelain -uall -- benchmarks/results/decisive | grep -v 'decisive\.\(json\|md\)$' | grep -q '\.json$' || continue
  ls benchmarks/results/decisive/*/*.tmp benchmarks/results/decisive/*/*/*.tmp >/dev/null 2>&1 && continue
  sleep 90
  stages=$(git status --porcelain -uall -- benchmarks/results/decisive | awk '{print $2}' | grep -v '/inits/' \
           | grep -E '/(r1|r2)/.*\.json$' | sed 's|benchmarks/results/decisive/||; s|\.json$||' | tr '\n' ' ')
  .venv/bin/python benchmarks/experiments/decisive_experiment.py report >/dev/null 2>&1
  rendered=$(.venv/bin/python scripts/render_results.py 2>&1 | sed -n 's/^render_results: \(.*\): rewritten$/\1/p')
  git add benchmarks/results/decisive $rendered
  git commit -qm "decisive experiment: stage ${stages:-inits} landed, with the report re-rendered" \
    && echo "[$(date +%H:%M)] committed ${stages:-inits}" >> runs/commit_stages.log
done
