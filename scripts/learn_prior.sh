#!/usr/bin/env bash
# Learns the prior that ships with Brevis (src/synth/builtin_prior.json) from the development
# corpus of real checkpoints (../shared/corpus; $BREVIS_CORPUS). Usage: scripts/learn_prior.sh [BREVIS_BIN]
set -euo pipefail
BIN=${1:-target/release/brevis}
CORPUS=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
[ -f "$CORPUS/MANIFEST.md" ] || { echo "no corpus at $CORPUS (see ../shared/corpus/README.md)" >&2; exit 1; }
mapfile -t files < <(find "$CORPUS" -name '*.safetensors' | sort)
"$BIN" prior learn -f -o "$(dirname "$0")/../src/synth/builtin_prior.json" "${files[@]}"
