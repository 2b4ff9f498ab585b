#!/usr/bin/env bash
# The observer's cost, beside a call without an observer, in one run.
#
#   otel/bench.sh                          # 10 interleaved passes, -benchtime 1s
#   PASSES=3 BENCHTIME=200x otel/bench.sh  # a quick check that everything runs
#
# As the root module's .ci/bench does: the test binary is built once and run
# PASSES times with -count 1, every other pass with the rows in reverse order
# (LOCKGEN_BENCH_ORDER=reverse), so that the i-th sample of every row comes
# from the same pass; the root module's internal/testkit/benchratio prints the
# paired ratios (median over passes of the per-pass ratio).
#
# BenchmarkObserverPaired times the rows call by call in one loop (random
# order per round) and reports the ratios of the medians itself: the steadier
# figure on a busy machine; its ratios are summarised last.
#
# Environment: PASSES (10), BENCHTIME (1s), BENCH (regexp, 'Observer'), OUT (raw
# output file; default a temp file, path printed), STRICT=1 (exit 1 when a claim
# misses), LOCKGEN_DATABASE_URL (see docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")"

PASSES="${PASSES:-10}"
BENCHTIME="${BENCHTIME:-1s}"
BENCH="${BENCH:-Observer}"
OUT="${OUT:-$(mktemp -t lockgen-otel-bench.XXXXXX)}"
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bin="$work/otel.test"
go test -c -o "$bin" .

{
  echo "# otel/bench.sh $(date -u +%FT%TZ) $(go version | cut -d' ' -f3-) nproc=$(nproc) passes=$PASSES benchtime=$BENCHTIME"
  echo "# load: $(uptime)"
  echo "# postgres: $(psql "${LOCKGEN_DATABASE_URL:-postgres://localhost:5432/test}" -Atc 'SELECT version()' 2>/dev/null || echo unknown)"
} >"$OUT"

for i in $(seq 1 "$PASSES"); do
  echo "pass $i/$PASSES" >&2
  order=
  [ $((i % 2)) = 0 ] && order=reverse
  LOCKGEN_BENCH_ORDER="$order" "$bin" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.count 1 >>"$OUT"
done
echo "# load after: $(uptime)" >>"$OUT"
echo "raw results: $OUT" >&2

strict=()
[ "${STRICT:-0}" = 1 ] && strict=(-strict)
status=0
(cd .. && go run ./internal/testkit/benchratio "${strict[@]}" \
  -ratio 'Observer/otel : Observer/none <= 1.03' \
  -ratio 'Observer/otel_unsampled : Observer/none' \
  -ratio 'Observer/noop : Observer/none' \
  -ratio 'Observer/sdk_floor : Observer/none' \
  -ratio 'Observer/otel : Observer/sdk_floor' \
  -ratio 'Observer/sdk_floor_unsampled : Observer/none' \
  -ratio 'Observer/otel_unsampled : Observer/sdk_floor_unsampled' \
  "$OUT") || status=$?

# BenchmarkObserverPaired reports, per pass, the ratio of each row's median
# single-call time to none's; print the median over passes and the range.
echo
echo "ObserverPaired: median single-call time ÷ none's (median over passes, min–max)"
for row in noop otel otel_unsampled sdk_floor sdk_floor_unsampled; do
  grep '^BenchmarkObserverPaired' "$OUT" |
    awk -v key="$row/none" '{ for (i = 2; i < NF; i++) if ($(i+1) == key) print $i }' |
    sort -g | awk -v row="$row" '{ v[NR] = $1 } END {
      if (NR == 0) exit
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "  %-20s %.3f  (%.3f–%.3f, %d passes)\n", row, m, v[1], v[NR], NR }'
done
exit "$status"
