#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every fuzz target (or those named) for SECONDS each, one after another:
#   fuzz/run.sh SECONDS [TARGET...]
# The corpora grow in $FUZZ_OUT/corpus/<target>/ (seeded by fuzz/seeds.py; FUZZ_OUT is
# target/fuzz unless set), crashes land in $FUZZ_OUT/artifacts/<target>/, and
# $FUZZ_OUT/summary.tsv gets one line per run:
# target, seconds it ran, executions, coverage (libFuzzer's cov: edges, ft: features), corpus size.
# Exits non-zero when a target finds a crash; an input it saved reproduces it with
#   cargo +nightly fuzz run --fuzz-dir fuzz --target-dir target/fuzz/build TARGET FILE
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?seconds per target}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir fuzz)
fi
out=${FUZZ_OUT:-target/fuzz}
build=target/fuzz/build
mkdir -p "$out"
# Debug assertions on: an arithmetic overflow is a finding too.
fuzz=(cargo +nightly fuzz)
"${fuzz[@]}" build --fuzz-dir fuzz --target-dir "$build" --debug-assertions
fuzz/seeds.py "$out/corpus"
failed=()
for target in "${targets[@]}"; do
    mkdir -p "$out/artifacts/$target"
    log="$out/$target.log"
    status=0
    started=$(date +%s)
    "${fuzz[@]}" run --fuzz-dir fuzz --target-dir "$build" --debug-assertions "$target" "$out/corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$out/artifacts/$target/" >"$log" 2>&1 || status=$?
    elapsed=$(( $(date +%s) - started ))
    runs=$(grep -oP 'stat::number_of_executed_units:\s*\K\d+' "$log" | tail -1 || true)
    cov=$(grep -oP 'cov: \K\d+' "$log" | tail -1 || true)
    ft=$(grep -oP 'ft: \K\d+' "$log" | tail -1 || true)
    corpus=$(find "$out/corpus/$target" -type f | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$elapsed" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$corpus" >>"$out/summary.tsv"
    printf 'fuzz %-17s %4ss  %10s runs  cov %5s  ft %6s  corpus %5s\n' "$target" "$elapsed" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$corpus"
    if [ "$status" -ne 0 ]; then
        grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written' "$log" | head -20 >&2 || true
        failed+=("$target")
    fi
done
if [ ${#failed[@]} -ne 0 ]; then
    echo "fuzz: crashes in ${failed[*]} (logs in $out/<target>.log, inputs in $out/artifacts/)" >&2
    exit 1
fi
