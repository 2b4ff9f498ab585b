package pgadvisory_test

// BenchmarkLeaseHandoff: the lease leader hand-off against today's
// session-lock leader hand-off, in the same run. Each op is one hand-off:
// the leader's fn returns (it resigns) while the other candidate waits,
// and the op ends when that candidate's fn starts (benchHandoffWaiting).
//
//   - lead_handoff_pgx: the session-lock leader hand-off (Lead, two
//     Lockers with their own pools), BenchmarkLeader's row: the baseline.
//   - lead_handoff_pgx_settled: the same, the leader resigning only after
//     the connections were idle as long as in the lease rows (3.5 polls).
//   - lease_handoff_pgx, lease_handoff_stdlib: two Lockers campaigning with
//     WithLease(leaseBenchTTL) on a direct connection, where the waiter can
//     be woken by NOTIFY.
//   - lease_handoff_pgbouncer_pgx: the same through a private PgBouncer in
//     transaction mode, where no notification reaches the waiter: it polls
//     every ttl/10 (leaseBenchTTL/10 = 30ms).
//   - roundtrip_pgbouncer: one SELECT 1 through that PgBouncer, the round
//     trip of the pooled path's target (<= the poll interval plus 2 round
//     trips).
//   - commit_pgx, idle_commit_pgx: the floor, one durable commit (a
//     single-row INSERT, one WAL flush) back to back, and after its
//     connection idled as long as the lease rows' connections idle between
//     ops (3.5 polls). A lease hand-off cannot follow the previous one
//     sooner than that (the candidate that resigned is deaf for two polls),
//     so its connections are as idle as idle_commit_pgx's; on a small
//     virtual machine an idle backend answers its next statement several
//     times more slowly. The target, a lease hand-off <= 1.5 x the
//     session-lock leader hand-off, is therefore claimed against
//     lead_handoff_pgx_settled, the session-lock hand-off after the same
//     idle time; lead_handoff_pgx (no idle time) is shown beside it.
//
// Between ops, with the timer stopped, the lease candidate that just
// resigned waits two polls before trying again (so the one already waiting
// takes the lease first); the next op starts once it tried and waits,
// three polls later. On a loaded machine the resigned candidate may take
// the lease again, the other having been delayed past those two polls:
// the op then lasts until the resigned one's fn starts, and such ops are
// reported as retakes/op (the session-lock case fails instead). Each lease
// op thus costs about 100ms of wall time: run it with a count, -benchtime
// 60x.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// leaseBenchTTL is the lease hand-off benchmark's ttl: polls every 30ms.
const leaseBenchTTL = 300 * time.Millisecond

func BenchmarkLeaseHandoff(b *testing.B) {
	admin := migrated.DB(b)
	w := witness.Of(admin)
	poll := leaseTestPoll(leaseBenchTTL)
	lease := func(name string, drv frontdoor.Driver, url func() string) benchCase {
		return benchCase{name, func(b *testing.B) {
			key := testdb.Key(b)
			var doors [2]frontdoor.Door
			for i := range doors {
				opts := []frontdoor.Option{frontdoor.MaxConns(2)}
				if url != nil {
					opts = append(opts, frontdoor.URL(url()))
				}
				doors[i] = frontdoor.Open(b, drv, opts...)
			}
			// The candidate that resigned waits two polls, then tries
			// once and waits again.
			queued := func() { time.Sleep(3*poll + poll/2) }
			retakes := 0
			ops := benchHandoffWaiting(b, &retakes, queued, func(ctx context.Context, i int, hold func()) error {
				return doors[i].Campaign(ctx, pgadvisory.ID(key), func(context.Context, int64) error {
					hold()
					return nil
				}, pgadvisory.WithLease(leaseBenchTTL))
			})
			reportMedian(b, ops)
			if len(ops) > 0 {
				b.ReportMetric(float64(retakes)/float64(len(ops)), "retakes/op")
			}
		}}
	}
	var bouncer string
	pooled := func() string {
		if bouncer == "" {
			bouncer = pgcluster.StartPgBouncer(b, testdb.URL(b), "transaction") + "&default_query_exec_mode=exec"
		}
		return bouncer
	}
	lead := func(name string, settle time.Duration) benchCase {
		return benchCase{name, func(b *testing.B) {
			key := testdb.Key(b)
			var doors [2]frontdoor.Door
			for i := range doors {
				doors[i] = frontdoor.Open(b, frontdoor.Pgx, frontdoor.MaxConns(2))
			}
			queued := func() {
				for deadline := time.Now().Add(time.Minute); waitingFor(b, w, []int64{key}) != 1; time.Sleep(50 * time.Microsecond) {
					if time.Now().After(deadline) {
						b.Fatal("the next candidate does not wait in the queue")
					}
				}
				time.Sleep(settle)
			}
			reportMedian(b, benchHandoffWaiting(b, nil, queued, func(ctx context.Context, i int, hold func()) error {
				return doors[i].Lead(ctx, pgadvisory.ID(key), func(context.Context, int64) error {
					hold()
					return nil
				})
			}))
		}}
	}
	// lead_handoff_pgx_settled: the leader holds as long as a lease row's
	// leader does between ops (3.5 polls) before it resigns, so that the
	// candidates' connections have been idle as long as in the lease rows
	// (a backend idle that long answers its next statement more slowly
	// on a small machine).
	session, settled := lead("lead_handoff_pgx", 0), lead("lead_handoff_pgx_settled", 3*poll+poll/2)
	roundTrip := benchCase{"roundtrip_pgbouncer", func(b *testing.B) {
		door := frontdoor.Open(b, frontdoor.Pgx, frontdoor.MaxConns(1), frontdoor.URL(pooled()))
		ctx := context.Background()
		var ops []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := door.Pool().Exec(ctx, "SELECT 1"); err != nil {
				b.Fatal(err)
			}
			ops = append(ops, time.Since(start))
		}
		reportMedian(b, ops)
	}}
	// The floor under the lease rows: one durable commit (a single-row
	// INSERT, one WAL flush) on a pgx pool's connection, back to back
	// (commit_pgx) and after the connection idled as long as a lease
	// row's connections do between ops (idle_commit_pgx).
	commit := func(name string, idle time.Duration) benchCase {
		return benchCase{name, func(b *testing.B) {
			door := frontdoor.Open(b, frontdoor.Pgx, frontdoor.MaxConns(1))
			ctx := context.Background()
			if _, err := door.Pool().Exec(ctx, "CREATE TABLE IF NOT EXISTS lease_bench_floor (n int)"); err != nil {
				b.Fatal(err)
			}
			var ops []time.Duration
			for b.Loop() {
				if idle > 0 {
					b.StopTimer()
					time.Sleep(idle)
					b.StartTimer()
				}
				start := time.Now()
				if _, err := door.Pool().Exec(ctx, "INSERT INTO lease_bench_floor VALUES (1)"); err != nil {
					b.Fatal(err)
				}
				ops = append(ops, time.Since(start))
			}
			reportMedian(b, ops)
		}}
	}
	runCases(b, session, settled, commit("commit_pgx", 0), commit("idle_commit_pgx", 3*poll+poll/2), lease("lease_handoff_pgx", frontdoor.Pgx, nil), lease("lease_handoff_stdlib", frontdoor.SQL, nil),
		lease("lease_handoff_pgbouncer_pgx", frontdoor.Pgx, pooled), roundTrip)
}

// reportMedian reports the median of ops as median-ns/op: on a loaded
// machine a few slow ops (a stalled WAL flush, a descheduled process) move
// the mean of a few dozen ops far more than the median.
func reportMedian(b *testing.B, ops []time.Duration) {
	if len(ops) == 0 {
		return
	}
	slices.Sort(ops)
	b.ReportMetric(float64(ops[len(ops)/2].Nanoseconds()), "median-ns/op")
}
