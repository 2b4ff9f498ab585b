#!/usr/bin/env bash
# Anchor benchmarks: lockgen against a bare transaction, the design source's
# RunExclusive and Redis lock, goose's session locker; and the ratios of
# every row to the bare transaction of the same kind.
#
#   bench/anchors/run.sh                          # 6 interleaved passes, -benchtime 1s
#   COUNT=3 BENCHTIME=300x bench/anchors/run.sh   # a short run
#
# The test binary is built once and run COUNT times with -count 1 (the whole
# suite per pass), i.e. `go test -run '^$' -bench . -count COUNT` interleaved:
# the i-th sample of every row comes from pass i, and the ratios printed by
# the root module's internal/testkit/benchratio are paired per pass (median of per-pass ratios).
#
# Ratios: uncontended rows ÷ Anchors/uncontended/bare_tx; contended rows ÷
# Anchors/contended/bare_tx/key=none (bare transactions from 16 goroutines);
# KeysPerTx rows ÷ the bare transaction on the same front door. key=same rows
# time attempts: wins/op is the share that got the lock, and time per win
# (µs/op ÷ wins/op) is printed separately.
#
# Environment: COUNT (6), BENCHTIME (1s), BENCH (regexp, '.'), OUT (raw
# output; default a temp file, path printed), LOCKGEN_DATABASE_URL (default
# postgres://localhost:5432/test), LOCKGEN_REDIS_ADDR (default 127.0.0.1:6379;
# the Redis rows are skipped, with the reason, when it is unreachable).
set -euo pipefail
cd "$(dirname "$0")"

COUNT="${COUNT:-6}"
BENCHTIME="${BENCHTIME:-1s}"
BENCH="${BENCH:-.}"
OUT="${OUT:-$(mktemp -t lockgen-anchors.XXXXXX)}"
REDIS_ADDR="${LOCKGEN_REDIS_ADDR:-127.0.0.1:6379}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bin="$work/anchors.test"
go test -c -o "$bin" .

{
  echo "# bench/anchors/run.sh $(date -u +%FT%TZ) $(go version | cut -d' ' -f3-) nproc=$(nproc) count=$COUNT benchtime=$BENCHTIME interleaved"
  echo "# postgres: $(psql "${LOCKGEN_DATABASE_URL:-postgres://localhost:5432/test}" -Atc 'SELECT version()' 2>/dev/null || echo unknown)"
  echo "# redis: $(redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" INFO server 2>/dev/null | tr -d '\r' | grep '^redis_version' || echo unknown)"
} >"$OUT"
for i in $(seq 1 "$COUNT"); do
  echo "pass $i/$COUNT" >&2
  "$bin" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.count 1 -test.v=false >>"$OUT" 2>&1 || {
    echo "pass $i failed; raw output: $OUT" >&2
    exit 1
  }
done
grep -h -- '--- SKIP\|anchors:' "$OUT" | sort -u >&2 || true
echo "raw results: $OUT" >&2

# One ratio flag per row, against the bare transaction of its kind.
names=$(awk '/^Benchmark/ { n = $1; sub(/^Benchmark/, "", n); sub(/-[0-9]+$/, "", n); if (!seen[n]++) print n }' "$OUT")
ratios=()
for n in $names; do
  case "$n" in
    Anchors/uncontended/bare_tx) ;;
    Anchors/contended/bare_tx/key=none) ;;
    KeysPerTx/bare_tx | KeysPerTx/bare_tx_pgx) ;;
    Anchors/uncontended/*) ratios+=(-ratio "$n : Anchors/uncontended/bare_tx") ;;
    Anchors/contended/*) ratios+=(-ratio "$n : Anchors/contended/bare_tx/key=none") ;;
    KeysPerTx/lockgen_pgx/*) ratios+=(-ratio "$n : KeysPerTx/bare_tx_pgx") ;;
    KeysPerTx/*) ratios+=(-ratio "$n : KeysPerTx/bare_tx") ;;
  esac
done
go run ../../internal/testkit/benchratio "${ratios[@]}" "$OUT"

# wins/op and time per win of the contended rows (medians over passes).
echo
awk '
  /^BenchmarkAnchors\/contended\// {
    n = $1; sub(/^Benchmark/, "", n); sub(/-[0-9]+$/, "", n)
    ns = ""; w = ""
    for (i = 3; i < NF; i += 2) { if ($(i+1) == "ns/op") ns = $i; if ($(i+1) == "wins/op") w = $i }
    if (w == "") next
    if (!(n in cnt)) order[++k] = n
    cnt[n]++; wins[n, cnt[n]] = w; tpw[n, cnt[n]] = (w > 0 ? ns / w / 1000 : -1)
  }
  function med(arr, n, c,   i, j, t, v) {
    for (i = 1; i <= c; i++) v[i] = arr[n, i]
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return (c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2)
  }
  END {
    printf "%-48s %10s %14s\n", "contended row", "wins/op", "µs per win"
    for (i = 1; i <= k; i++) { n = order[i]; printf "%-48s %10.3f %14.1f\n", n, med(wins, n, cnt[n]), med(tpw, n, cnt[n]) }
  }' "$OUT"
