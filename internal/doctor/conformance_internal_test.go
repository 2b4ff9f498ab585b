package doctor

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

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
