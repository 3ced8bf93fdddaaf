#!/usr/bin/env bash
# CLI compression time per level against zstd -3 -T0: medians of N alternating runs, files on
# tmpfs. Usage: scripts/cli_compress_levels.sh [BREVIS_BIN] [RUNS] FILE...
# Prints, per file: the median wall time of zstd -3 -T0 and of brevis compress at each level, and
# each level's ratio (zstd time / brevis time: 1.0 or more means at least as fast as zstd).
set -euo pipefail
BIN=$(realpath "${1:-target/release/brevis}"); RUNS=${2:-10}; shift 2
DIR=$(mktemp -d /dev/shm/brevis-clevels.XXXXXX); trap 'rm -rf "$DIR"' EXIT
. "$(dirname "$0")/timing.sh"
printf '| file | MB | zstd -3 -T0 s | fast s | ratio | default s | ratio | max s | ratio |\n|---|---|---|---|---|---|---|---|---|\n'
for f in "$@"; do
  b=$(basename "$f"); cp "$f" "$DIR/$b"; f="$DIR/$b"
  : > "$DIR/z"; for l in fast default max; do : > "$DIR/$l"; done
  for _ in $(seq "$RUNS"); do
    t zstd -q -3 -T0 -f "$f" -o "$DIR/c0" >> "$DIR/z"
    for l in fast default max; do
      t "$BIN" compress -q -f --level "$l" "$f" -o "$DIR/c1" >> "$DIR/$l"
    done
    rm -f "$DIR/c0" "$DIR/c1"
  done
  z=$(median < "$DIR/z"); row="| $b | $(printf %.1f "$(echo "$(stat -c %s "$f")/1000000" | bc -l)") | $z |"
  for l in fast default max; do
    m=$(median < "$DIR/$l"); row="$row $m | $(printf %.2f "$(echo "$z/$m" | bc -l)")x |"
  done
  echo "$row"
  rm -f "$f"
done
