#!/usr/bin/env bash
# Round-trips every development-corpus file through the CLI and prints a size table against
# the best peer tool (PEERS.md). Usage: scripts/corpus_table.sh [BREVIS_BIN] [extra compress args]
set -euo pipefail
BIN=${1:-target/release/brevis}; shift || true
CORPUS=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
PEERS=${PEERS_MD:-$(dirname "$0")/../../shared/corpus/PEERS.md}
[ -d "$CORPUS" ] || { echo "no corpus at $CORPUS (see ../shared/corpus/README.md); skipping"; exit 0; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
printf '%-45s %9s %9s %8s %8s %6s %s\n' file MB brevis% best% H0word% ok time
tot_o=0; tot_c=0
while IFS= read -r f; do
  b=$(basename "$f")
  t0=$(date +%s.%N)
  "$BIN" compress -q -f "$@" "$f" -o "$TMP/$b.brv"
  t1=$(date +%s.%N)
  "$BIN" decompress -q -f "$TMP/$b.brv" -o "$TMP/$b"
  ok=$(cmp -s "$f" "$TMP/$b" && echo yes || echo NO)
  o=$(stat -c %s "$f"); c=$(stat -c %s "$TMP/$b.brv")
  best=$(grep "^| $b " "$PEERS" 2>/dev/null | awk -F'|' '{gsub(/[ *]/,"",$10); print $10}')
  h0=$(grep "^| $b " "$PEERS" 2>/dev/null | awk -F'|' '{gsub(/[ *]/,"",$12); print $12}')
  printf '%-45s %9.1f %9.2f %8s %8s %6s %.1fs\n' "$b" "$(echo "$o/1000000" | bc -l)" "$(echo "100*$c/$o" | bc -l)" "${best:-?}" "${h0:-?}" "$ok" "$(echo "$t1-$t0" | bc -l)"
  tot_o=$((tot_o+o)); tot_c=$((tot_c+c)); rm -f "$TMP/$b" "$TMP/$b.brv"
done < <(find "$CORPUS" -name '*.safetensors' | sort)
printf '%-45s %9.1f %9.2f %8s\n' TOTAL "$(echo "$tot_o/1000000" | bc -l)" "$(echo "100*$tot_c/$tot_o" | bc -l)" 76.82
echo "exact: $tot_c of $tot_o bytes ($(echo "scale=4; 100*$tot_c/$tot_o" | bc)%)"
