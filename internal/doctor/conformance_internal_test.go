package doctor

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/internal/testkit/pgcluster"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// TestPipelinedHeldSeesAnEndedTransaction: the pipelined part of the
// held-through check fails when the pipeline's implicit transaction ends
// after the lock (a COMMIT sent between, as a path that commits each
// statement would), and passes without it: the control.
func TestPipelinedHeldSeesAnEndedTransaction(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		cfg, err := pgx.ParseConfig(testdb.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		db := stdlib.OpenDB(*cfg)
		defer db.Close()
		ctx := testdb.Context(t)
		conns := func() (*sql.Conn, *sql.Conn) {
			a, b, err := twoConns(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		}
		a, b := conns()
		got, failed := pipelinedHeld(ctx, a, b, "")
		if failed || !strings.Contains(got, "saw it held") {
			t.Errorf("%v, one implicit transaction: failed %v: %s", mode, failed, got)
		}
		a, b = conns()
		got, failed = pipelinedHeld(ctx, a, b, "COMMIT")
		if !failed || !strings.Contains(got, "was seen free by") {
			t.Errorf("%v, a COMMIT after the lock: failed %v: %s", mode, failed, got)
		}
		t.Logf("%v: %s", mode, got)
	}
}

// TestSessionChecksThroughATransactionPoolerTheProbeMissed: the bodies of
// the session-lock checks, run through PgBouncer in transaction mode
// (server_round_robin, two server connections) with the pooler probe's
// verdict withheld, as when a transaction pooler whose other clients are
// idle looks like session pooling to the probe: one client's statements
// land on two backends, and same_backend fails; through PgBouncer in
// session mode (the control) it passes.
func TestSameBackendThroughATransactionPoolerTheProbeMissed(t *testing.T) {
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			bouncer := pgcluster.StartPgBouncer(t, testdb.URL(t), mode, pgcluster.WithSetting("server_round_robin", "1"))
			pgcluster.WarmPgBouncer(t, bouncer, 2)
			cfg, err := pgx.ParseConfig(bouncer)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
			db := stdlib.OpenDB(*cfg)
			defer db.Close()
			db.SetMaxOpenConns(4)
			// A probe that proved nothing: one statement, no setting seen
			// elsewhere.
			e := &env{Config: Config{DB: db}, probe: &probe{pidsA: []int32{1}, pidB: 2}}
			got := runOne(testdb.Context(t), SameBackend, e)
			t.Logf("%s %s: %s | fix: %s", got.Status, SameBackend, got.Detail, got.Fix)
			want, fragment := Fail, "one client's statements run on more than one server session; unsafe on this path: session locks (RunSession)"
			if mode == "session" {
				want, fragment = Pass, "was held there over 5 statements back to back and 5 interleaved"
			}
			if got.Status != want || !strings.Contains(got.Detail, fragment) || (want == Fail && !strings.Contains(got.Fix, "pool_mode=session")) {
				t.Errorf("through PgBouncer in %s mode: %s, want %s with %q", mode, got.Status, want, fragment)
			}
		})
	}
}
