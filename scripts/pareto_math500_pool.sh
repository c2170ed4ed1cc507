#!/usr/bin/env bash
# The accuracy-per-compute frontier of the shared MATH-500 pool (7 reasoning models x 500 problems x 80
# samples) and of the harder GPQA-Diamond pool: self-consistency at n = 1..80, priced on an H100.
# No engine needed: every cell is estimated from the pool (about a minute per pool on 2 cores).
# Usage: scripts/pareto_math500_pool.sh [OUT_DIR]     (default runs/pareto); figures in OUT_DIR/*/plots/
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/pareto}
TTS=${TTS:-.venv/bin/tts}
# Only architectures that are the same network are mapped for pricing: the Thinking-2507 checkpoint
# of Qwen3-30B-A3B shares its config. Models without a known architecture get tokens but no FLOPs/$.
ARCH=(--arch Qwen3-30B-A3B-Thinking-2507=qwen3-30b-a3b)
for pool in math500 gpqa_diamond; do
  "$TTS" sweep --pool "../shared/data/pools/${pool}_reasoning_models.jsonl.gz" -s self_consistency \
    --n 1,2,4,8,16,32,64,80 "${ARCH[@]}" --out "$OUT/$pool"
  "$TTS" plot "$OUT/$pool"
done
