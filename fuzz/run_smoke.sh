#!/usr/bin/env bash
# Builds the CTF fuzz target with AddressSanitizer and UndefinedBehaviorSanitizer and runs it for a short
# while on the seeds (libFuzzer with clang when available; the standalone driver with g++ otherwise).
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-20}
out=$(mktemp -d)
sources=(ctf_fuzz.cpp ../src/native/ctf_index.cpp ../src/native/ctf_parse.cpp)
flags=(-std=c++17 -O1 -g -pthread -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all)
if command -v clang++ >/dev/null 2>&1; then
  clang++ "${flags[@]}" -fsanitize=fuzzer "${sources[@]}" -o "$out/fuzz_ctf"
  "$out/fuzz_ctf" -max_total_time="$seconds" -max_len=4096 seeds/
else
  g++ "${flags[@]}" "${sources[@]}" standalone_main.cpp -o "$out/fuzz_ctf"
  "$out/fuzz_ctf" --seconds "$seconds" seeds/*
fi
