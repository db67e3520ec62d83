#!/usr/bin/env bash
# Builds the fuzz targets (CTF parser, CBF reader, record framing, minibatch assembly, key join, MLF and SCP
# parsers, HTK frame reader, Kaldi matrix reader and scp parser, image map scanner, image pixel kernel) with AddressSanitizer and
# UndefinedBehaviorSanitizer and runs them for a short while on the seeds (libFuzzer with clang when available; the
# standalone driver with g++ otherwise).
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-20}
out=$(mktemp -d)
flags=(-std=c++17 -O1 -g -pthread -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all)

# run NAME SECONDS SOURCES...: builds one target and runs it on the seeds for that long
run() {
  local name=$1 time=$2
  shift 2
  if command -v clang++ >/dev/null 2>&1; then
    clang++ "${flags[@]}" -fsanitize=fuzzer "$@" -o "$out/$name"
    "$out/$name" -max_total_time="$time" -max_len=4096 seeds/
  else
    g++ "${flags[@]}" "$@" standalone_main.cpp -o "$out/$name"
    "$out/$name" --seconds "$time" seeds/*
  fi
}

run fuzz_ctf $((seconds * 2 / 5)) ctf_fuzz.cpp ../src/native/ctf_index.cpp ../src/native/ctf_parse.cpp
run fuzz_cbf $((seconds / 5)) cbf_fuzz.cpp ../src/native/cbf.cpp
run fuzz_assemble $((seconds / 10)) assemble_fuzz.cpp ../src/native/assemble.cpp
run fuzz_keys $((seconds / 10)) keys_fuzz.cpp ../src/native/keys.cpp
run fuzz_records $((seconds / 5)) records_fuzz.cpp ../src/native/records.cpp
run fuzz_mlf $((seconds / 10)) mlf_fuzz.cpp ../src/native/mlf.cpp
run fuzz_scp $((seconds / 10)) scp_fuzz.cpp ../src/native/scp.cpp
run fuzz_htk $((seconds / 10)) htk_fuzz.cpp ../src/native/htk.cpp
run fuzz_kaldi $((seconds / 10)) kaldi_fuzz.cpp ../src/native/kaldi.cpp
run fuzz_kaldi_scp $((seconds / 20)) kaldi_scp_fuzz.cpp ../src/native/kaldi_scp.cpp
run fuzz_image_index $((seconds / 10)) image_index_fuzz.cpp ../src/native/image_index.cpp
run fuzz_image_pixels $((seconds / 10)) image_pixels_fuzz.cpp ../src/native/image_pixels.cpp
