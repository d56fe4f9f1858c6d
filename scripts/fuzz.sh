#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/) for SECONDS each (default
# 60), one after the other, under AddressSanitizer, and prints one line of
# figures per target. The corpus each grows is kept in fuzz/corpus/TARGET
# (starting from fuzz/seeds/TARGET where there is one) and used again by
# the next run. An input that fails is saved in fuzz/artifacts/TARGET/;
# the script then prints the failure and how to run it again, and fails.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export PATH="$HOME/.cargo/bin:$PATH"

seconds=${1:-60}
targets=(memory_map plugin_args page_walk engine_ops btf)

say() { printf '[fuzz] %s\n' "$*"; }

mkdir -p target
if ! cargo +nightly fuzz build >target/build.log 2>&1; then
    cat target/build.log
    exit 1
fi
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    dirs=("corpus/$t")
    [ -d "seeds/$t" ] && dirs+=("seeds/$t")
    options=(-max_total_time="$seconds" -timeout=20 -print_final_stats=1)
    [ -f "dicts/$t.dict" ] && options+=(-dict="dicts/$t.dict")
    # Inputs that build tables or batches: full length from the start,
    # rather than libFuzzer's slow growth from a few bytes.
    case $t in page_walk | engine_ops) options+=(-len_control=0) ;; esac
    log=target/$t.log
    if ! cargo +nightly fuzz run "$t" "${dirs[@]}" -- "${options[@]}" >"$log" 2>&1; then
        grep -v '^#[0-9]' "$log" | tail -n 80
        say "$t FAILED: the input is in fuzz/artifacts/$t/ (cd fuzz && cargo +nightly fuzz run $t INPUT)"
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    time=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
    last=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
    say "$t: $runs runs in ${time} s, $cov edges covered ($ft features), corpus $corp inputs; nothing found"
done
