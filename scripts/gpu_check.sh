#!/usr/bin/env bash
# GPU smoke check of skillrise-train on a lent GPU machine (no network there), in two steps:
#
#   bash scripts/gpu_check.sh --prepare    # HERE (CPU box, package registry reachable): fills gpu_wheels/
#   bash scripts/gpu_check.sh              # THERE (device tool, carry ["gpu_wheels"]): installs, measures
#
# --prepare downloads (pip download --no-deps, wheels for the GPU image's CPython, $GPU_PY_VERSION, default
# 3.12) the pure-Python packages the trainer needs beyond torch, at the versions in .venv: trl, the pinned
# transformers / accelerate / peft (the image has older ones; ours shadow them on PYTHONPATH), datasets and
# the small packages it pulls that the image lacks (dill, multiprocess, fsspec), gymnasium (+ its two deps),
# WebShop's bm25s and rapidfuzz, and regex (transformers checks its version at import). Not shipped: torch,
# pyarrow, pandas, xxhash, tokenizers, safetensors, huggingface_hub (the image has them; pyarrow's wheel
# alone is ~40 MiB). It also copies the SmolLM2 tokenizer and config (no weights) into
# gpu_wheels/smollm2-shape/, from which benchmarks/performance/gpu_check.py builds a randomly initialised model
# of SmolLM2-135M's shape.
#
# Without --prepare: installs gpu_wheels/*.whl into a --target folder (nothing of the image is changed), puts
# it and the repo first on PYTHONPATH, checks the imports, and runs benchmarks/performance/gpu_check.py under a
# hard time limit. Results: $OUT/gpu_check.json (benchmarks/results/gpu_check.json without $OUT) and $OUT/gpu_check.log.
# It never resets or reconfigures the GPU (nvidia-smi is only queried).
#
# Device tool call:  run(command="bash scripts/gpu_check.sh", carry=["gpu_wheels"], timeout_s=420): worst case
# ~5 min (install ~5 s + hard stop at budget + 20 s; `timeout` kills at budget + 45 s), expected 2-3 min.
# Environment: GPU_CHECK_BUDGET_S (default 250: the python part's own budget; it stops itself 20 s after it
# and `timeout` kills it 45 s after it), PYTHON (default python3 there), GPU_CHECK_ARGS (extra flags).
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=gpu_wheels
SHAPE="$WHEELS/smollm2-shape"

prepare() {
    set -e
    local py="${PYTHON:-.venv/bin/python}"
    local pyver="${GPU_PY_VERSION:-3.12}"
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    # the exact versions in .venv, so the device runs what the tests ran with
    local packages
    packages=$("$py" - <<'EOF'
import importlib.metadata as m
names = ["trl", "transformers", "accelerate", "peft", "datasets", "dill", "multiprocess", "fsspec",
         "gymnasium", "farama-notifications", "cloudpickle", "bm25s", "rapidfuzz", "regex"]
print(" ".join(f"{n}=={m.version(n)}" for n in names))
EOF
)
    echo "gpu_check --prepare: $packages (for CPython $pyver, manylinux x86_64)"
    rm -rf "$WHEELS"
    mkdir -p "$WHEELS" "$SHAPE"
    # shellcheck disable=SC2086
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHEELS" $packages
    local model
    model=$("$py" -c "from skillrise_gym.models import resolve_model_path; print(resolve_model_path('smollm2'))")
    for f in config.json generation_config.json tokenizer.json tokenizer_config.json special_tokens_map.json \
             chat_template.jinja; do
        if [ -f "$model/$f" ]; then cp "$model/$f" "$SHAPE/"; fi
    done
    echo "copied from $model (no weights): $(ls "$SHAPE" | tr '\n' ' ')"
    ls -l "$WHEELS" | awk 'NR > 1 {printf "  %9d  %s\n", $5, $9}'
    echo "gpu_wheels/ total: $(du -sh "$WHEELS" | cut -f1) ($(du -sb "$WHEELS" | cut -f1) bytes); the device tool" \
         "carries at most 64 MiB with the working tree ($(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes tracked)"
}

install_wheels() {  # python, target folder: every wheel; else (another CPython than the wheels') the pure ones
    local py=$1 site=$2
    if "$py" -m pip --version >/dev/null 2>&1; then
        local pip=(env PIP_ROOT_USER_ACTION=ignore timeout 120 "$py" -m pip install -q --no-index --no-deps
                   --no-compile --no-cache-dir --upgrade --disable-pip-version-check --target "$site")
        "${pip[@]}" "$WHEELS"/*.whl && return 0
        echo "gpu_check: WARNING: pip refused some wheels (they are for CPython ${GPU_PY_VERSION:-3.12}:" \
             "$("$py" -V 2>&1) here?); installing the pure-Python ones only"
        rm -rf "$site"
        "${pip[@]}" "$WHEELS"/*-py3-none-any.whl
        return
    fi
    echo "gpu_check: no pip for $py: unpacking the wheels into $site"
    "$py" - "$site" "$WHEELS"/*.whl <<'EOF'
import sys, zipfile
for wheel in sys.argv[2:]:
    zipfile.ZipFile(wheel).extractall(sys.argv[1])
EOF
}

device() {
    local started=$SECONDS
    local out="${OUT:-benchmarks/results}"
    local budget="${GPU_CHECK_BUDGET_S:-250}"
    local py="${PYTHON:-}"
    if [ -z "$py" ]; then
        py=$(command -v python3 || command -v python)
    fi
    mkdir -p "$out"
    echo "gpu_check: $(date -u +%FT%TZ) python=$py ($("$py" -V 2>&1)) out=$out budget=${budget}s"
    if command -v nvidia-smi >/dev/null; then  # a query only
        nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader || true
    fi
    if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        echo "gpu_check: no wheels in $WHEELS/: run 'bash scripts/gpu_check.sh --prepare' on the CPU box and" \
             "call the device tool with carry [\"gpu_wheels\"]"
    else
        local site=/tmp/gpu_check_site
        rm -rf "$site"
        if install_wheels "$py" "$site"; then
            export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
            echo "gpu_check: installed wheels into $site in $((SECONDS - started)) s: $(ls "$site" | grep -c dist-info) packages"
        else
            echo "gpu_check: WARNING: could not install $WHEELS/*.whl; going on with the image's packages"
        fi
    fi
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
    export PYTHONUNBUFFERED=1 SKILLRISE_CACHE="${SKILLRISE_CACHE:-/tmp/gpu_check_cache}"
    # what is installed, and from where (found, not imported: gpu_check.py imports each and records failures)
    "$py" - <<'EOF'
import importlib.metadata as m, importlib.util as u
for name in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "pyarrow", "pandas", "xxhash", "dill",
             "multiprocess", "fsspec", "huggingface_hub", "tokenizers", "safetensors", "regex", "gymnasium",
             "bm25s", "rapidfuzz", "numpy"):
    spec = u.find_spec(name)
    try:
        version = m.version({"huggingface_hub": "huggingface-hub"}.get(name, name))
    except m.PackageNotFoundError:
        version = "?"
    print(f"  {name:16s} " + (f"{version:14s} {spec.origin}" if spec else "MISSING"))
EOF
    # shellcheck disable=SC2086
    timeout -k 10 $((budget + 45)) "$py" benchmarks/performance/gpu_check.py --budget-s "$budget" \
        --out "$out/gpu_check.json" ${GPU_CHECK_ARGS:-}
    local rc=$?
    echo "gpu_check: benchmarks/performance/gpu_check.py exited $rc after $((SECONDS - started)) s in all"
    if [ -f "$out/gpu_check.json" ]; then
        if [ "$rc" -gt 2 ]; then  # stopped (its own hard limit: 3; timeout: 124/137) before printing its summary
            "$py" benchmarks/performance/gpu_check.py --summarise "$out/gpu_check.json" || cat "$out/gpu_check.json"
        fi
    else
        echo "gpu_check: no $out/gpu_check.json was written"
    fi
    return $rc
}

case "${1:-}" in
    --prepare) prepare ;;
    "") mkdir -p "${OUT:-benchmarks/results}"
        device 2>&1 | tee "${OUT:-benchmarks/results}/gpu_check.log"
        exit "${PIPESTATUS[0]}" ;;
    *) echo "usage: bash scripts/gpu_check.sh [--prepare]" >&2; exit 2 ;;
esac
