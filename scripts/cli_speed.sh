#!/usr/bin/env bash
# CLI against CLI: medians of N alternating runs, files on tmpfs.
# Usage: scripts/cli_speed.sh [BREVIS_BIN] [RUNS] FILE...
# Prints, per file: brevis decompress vs zstd -d (of a zstd -3 archive), brevis compress (default
# options) vs zstd -3 -T0, and the floor of writing the output: cp of the original to tmpfs.
set -euo pipefail
BIN=$(realpath "${1:-target/release/brevis}"); RUNS=${2:-10}; shift 2
DIR=$(mktemp -d /dev/shm/brevis-speed.XXXXXX); trap 'rm -rf "$DIR"' EXIT
. "$(dirname "$0")/timing.sh"
printf '| file | MB | brevis d s | zstd -d s | ratio | cp s | brevis c s | zstd -3 -T0 s | ratio |\n|---|---|---|---|---|---|---|---|---|\n'
for f in "$@"; do
  b=$(basename "$f"); cp "$f" "$DIR/$b"; f="$DIR/$b"
  "$BIN" compress -q -f "$f" -o "$f.brv"; zstd -q -3 -f "$f" -o "$f.zst"
  : > "$DIR/bd"; : > "$DIR/zd"; : > "$DIR/cp"; : > "$DIR/bc"; : > "$DIR/zc"
  for _ in $(seq "$RUNS"); do
    t "$BIN" decompress -q -f "$f.brv" -o "$DIR/o1" >> "$DIR/bd"
    t zstd -q -d -f "$f.zst" -o "$DIR/o2" >> "$DIR/zd"
    t cp "$f" "$DIR/o3" >> "$DIR/cp"
    cmp -s "$f" "$DIR/o1" && cmp -s "$f" "$DIR/o2" || { echo "round trip failed: $b" >&2; exit 1; }
    rm -f "$DIR/o1" "$DIR/o2" "$DIR/o3"
  done
  for _ in $(seq "$RUNS"); do
    t "$BIN" compress -q -f "$f" -o "$DIR/c1" >> "$DIR/bc"
    t zstd -q -3 -T0 -f "$f" -o "$DIR/c2" >> "$DIR/zc"
    rm -f "$DIR/c1" "$DIR/c2"
  done
  bd=$(median < "$DIR/bd"); zd=$(median < "$DIR/zd"); cpm=$(median < "$DIR/cp")
  bc=$(median < "$DIR/bc"); zc=$(median < "$DIR/zc")
  mb=$(echo "$(stat -c %s "$f")/1000000" | bc -l)
  printf '| %s | %.1f | %s | %s | %.2fx | %s | %s | %s | %.3fx |\n' "$b" "$mb" "$bd" "$zd" \
    "$(echo "$zd/$bd" | bc -l)" "$cpm" "$bc" "$zc" "$(echo "$zc/$bc" | bc -l)"
  rm -f "$f" "$f.brv" "$f.zst"
done
