#!/usr/bin/env bash
# Make the reference implementations that benchmarks/side_by_side.py runs, each in a place of its own:
#
#   benchmarks/peers/setup_peers.sh [DIR]        (default DIR: /tmp/tts_peers)
#
#   DIR/its_hub/            virtual environment with its_hub[lm]==1.2.0 (--its-hub-python DIR/its_hub/bin/python)
#   DIR/optillm/            virtual environment with optillm==0.4.0     (--optillm-python DIR/optillm/bin/python)
#   DIR/search-and-learn/   huggingface/search-and-learn at commit $SAL_COMMIT (--sal-src DIR/search-and-learn/src);
#                           its code runs on tts's own environment (its pins do not install next to tts):
#                           see benchmarks/peers/sal_beam_search.py for what that changes.
#
# search-and-learn comes from GitHub (git clone), or, where GitHub is not reachable, from a local git
# directory that holds the commit: SAL_GIT_DIR=/path/to/repo.git benchmarks/peers/setup_peers.sh.
# PYTHON (default python3.11) makes the virtual environments. Existing parts are kept (delete to redo).
set -euo pipefail
DIR=${1:-/tmp/tts_peers}
PYTHON=${PYTHON:-python3.11}
SAL_COMMIT=6f81cac8b1ca4c4be9fabefc27a856c928f3ae7f
mkdir -p "$DIR"

if [ ! -x "$DIR/its_hub/bin/python" ]; then
  "$PYTHON" -m venv "$DIR/its_hub"
  "$DIR/its_hub/bin/pip" install -q 'its_hub[lm]==1.2.0'
fi
if [ ! -x "$DIR/optillm/bin/python" ]; then
  "$PYTHON" -m venv "$DIR/optillm"
  "$DIR/optillm/bin/pip" install -q optillm==0.4.0
fi
if [ ! -f "$DIR/search-and-learn/src/sal/search/beam_search.py" ]; then
  rm -rf "$DIR/search-and-learn"
  if [ -n "${SAL_GIT_DIR:-}" ]; then
    mkdir -p "$DIR/search-and-learn"
    git --git-dir="$SAL_GIT_DIR" archive "$SAL_COMMIT" | tar -x -C "$DIR/search-and-learn"
  else
    git clone -q https://github.com/huggingface/search-and-learn "$DIR/search-and-learn"
    git -C "$DIR/search-and-learn" checkout -q "$SAL_COMMIT"
  fi
  echo "$SAL_COMMIT" > "$DIR/search-and-learn/COMMIT"
fi
echo "peers ready in $DIR: --sal-src $DIR/search-and-learn/src --its-hub-python $DIR/its_hub/bin/python" \
     "--optillm-python $DIR/optillm/bin/python"
