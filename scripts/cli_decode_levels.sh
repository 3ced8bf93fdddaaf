#!/usr/bin/env bash
# CLI decompression time of each level's archive against zstd -d (of a zstd -3 archive): medians
# of N alternating runs, files on tmpfs. Usage: scripts/cli_decode_levels.sh [BREVIS_BIN] [RUNS] FILE...
set -euo pipefail
BIN=$(realpath "${1:-target/release/brevis}"); RUNS=${2:-7}; shift 2
DIR=$(mktemp -d /dev/shm/brevis-dlevels.XXXXXX); trap 'rm -rf "$DIR"' EXIT
. "$(dirname "$0")/timing.sh"
printf '| file | fast s | default s | max s | zstd -d s |\n|---|---|---|---|---|\n'
for f in "$@"; do
  b=$(basename "$f"); cp "$f" "$DIR/$b"; f="$DIR/$b"
  for l in fast default max; do "$BIN" compress -q -f --level "$l" "$f" -o "$DIR/$l.brv"; : > "$DIR/$l"; done
  zstd -q -3 -f "$f" -o "$DIR/z.zst"; : > "$DIR/z"
  for _ in $(seq "$RUNS"); do
    for l in fast default max; do
      t "$BIN" decompress -q -f "$DIR/$l.brv" -o "$DIR/out" >> "$DIR/$l"
      cmp -s "$f" "$DIR/out" || { echo "round trip failed: $b ($l)" >&2; exit 1; }
    done
    t zstd -q -d -f "$DIR/z.zst" -o "$DIR/out" >> "$DIR/z"
  done
  echo "| $b | $(median < "$DIR/fast") | $(median < "$DIR/default") | $(median < "$DIR/max") | $(median < "$DIR/z") |"
  rm -f "$f" "$DIR"/*.brv "$DIR/out"
done
