package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of fencing: WithFencing, the token inside fn, RunFenced and
// SetFencingToken for writes on other connections, Lock.With. The shared
// example helpers are in example_test.go.

func ExampleWithFencing() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("with_fencing")

	var first, second int64
	err := pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		first, _ = pgadvisory.FencingToken(tx)

		// The token is published durably before fn runs...
		var published int64
		err := db.QueryRowContext(ctx, "SELECT token FROM pgadvisory.fence WHERE lock_id = $1", lockID).Scan(&published)
		fmt.Println("published before fn runs:", published == first)

		// ...and fn's transaction carries it: its writes to fenced tables pass.
		var carried int64
		if err == nil {
			err = tx.QueryRowContext(ctx, "SELECT current_setting('pgadvisory.fencing_token')::bigint").Scan(&carried)
		}
		fmt.Println("fn's transaction carries it:", carried == first)
		return err
	}, pgadvisory.WithFencing())
	fmt.Println("err:", err)

	// Every tenure gets a larger token than the ones before.
	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		second, _ = pgadvisory.FencingToken(tx)
		return nil
	}, pgadvisory.WithFencing())
	fmt.Println("next holder's token is larger:", second > first)
	// Output:
	// published before fn runs: true
	// fn's transaction carries it: true
	// err: <nil>
	// next holder's token is larger: true
}

func ExampleFencingToken() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("fencing_token")

	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		// Pass the token with every write made outside tx: to RunFenced on
		// another connection, to another process, to an external store.
		token, ok := pgadvisory.FencingToken(tx)
		fmt.Println("fenced call:", ok, token > 0)
		return nil
	}, pgadvisory.WithFencing())

	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		_, ok := pgadvisory.FencingToken(tx)
		fmt.Println("call without WithFencing:", ok)
		return nil
	})
	// Output:
	// fenced call: true true
	// call without WithFencing: false
}

func ExampleFencingTokenPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("fencing_token_pgx")
	store := &exampleStore{}

	// Holder A takes the lock, then pauses before writing to the store.
	var tokenA int64
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		tokenA, _ = pgadvisory.FencingTokenPgx(tx)
		return nil
	}, pgadvisory.WithFencing())

	// Holder B takes the lock after A and writes.
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		tokenB, _ := pgadvisory.FencingTokenPgx(tx)
		fmt.Println("B writes:", store.Put(tokenB, "from B"))
		return nil
	}, pgadvisory.WithFencing())

	// A wakes up: the store refuses its older token.
	fmt.Println("A rejected:", store.Put(tokenA, "from A") != nil)
	fmt.Println("store holds:", store.body)
	// Output:
	// B writes: <nil>
	// A rejected: true
	// store holds: from B
}

func ExampleRunFenced() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("run_fenced")

	// A table fenced by the lock (lockgen fence generates this migration;
	// see exampleFencedTable).
	invoices, drop := exampleFencedTable(ctx, db, "run_fenced", lockID)
	defer drop()

	// A worker writes invoices on behalf of a lock holder, with its token.
	writeInvoice := func(token int64, id, total int) error {
		return pgadvisory.RunFenced(ctx, db, token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES ($1, $2)", id, total)
			return err
		})
	}

	// Holder A takes the lock and hands its token to the worker.
	var tokenA int64
	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		tokenA, _ = pgadvisory.FencingToken(tx)
		return nil
	}, pgadvisory.WithFencing())
	fmt.Println("A's worker writes:", writeInvoice(tokenA, 1, 100))

	// A's worker pauses (GC, network). Holder B takes the lock; its token is
	// published before its fn runs, and its writes through tx carry it.
	err := pgadvisory.RunExclusive(ctx, db, lockID, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE "+invoices+" SET total = 120 WHERE id = 1")
		return err
	}, pgadvisory.WithFencing())
	fmt.Println("B writes:", err)

	// A's worker wakes up: the database rejects its stale token.
	err = writeInvoice(tokenA, 2, 200)
	fmt.Println("A's worker rejected:", errors.Is(err, pgadvisory.ErrStaleToken))

	var rows, total int
	_ = db.QueryRowContext(ctx, "SELECT count(*), sum(total) FROM "+invoices).Scan(&rows, &total)
	fmt.Println("invoices:", rows, "total:", total)
	// Output:
	// A's worker writes: <nil>
	// B writes: <nil>
	// A's worker rejected: true
	// invoices: 1 total: 120
}

func ExampleRunFencedPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("run_fenced_pgx")
	invoices, drop := exampleFencedTable(ctx, db, "run_fenced_pgx", lockID)
	defer drop()

	var token int64
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		token, _ = pgadvisory.FencingTokenPgx(tx)
		return nil
	}, pgadvisory.WithFencing())
	write := func(id int) error {
		return pgadvisory.RunFencedPgx(ctx, pool, token, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+invoices+" (id, total) VALUES ($1, 100)", id)
			return err
		})
	}
	fmt.Println("write with the published token:", write(1))

	// A newer holder publishes its token: the old one is stale from now on.
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(pgx.Tx) error { return nil }, pgadvisory.WithFencing())
	err := write(2)
	fmt.Println("write with the old token is stale:", errors.Is(err, pgadvisory.ErrStaleToken))
	// Output:
	// write with the published token: <nil>
	// write with the old token is stale: true
}

func ExampleSetFencingToken() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("set_fencing_token")
	invoices, drop := exampleFencedTable(ctx, db, "set_fencing_token", lockID)
	defer drop()

	err := pgadvisory.RunExclusive(ctx, db, lockID, func(lockTx *sql.Tx) error {
		token, _ := pgadvisory.FencingToken(lockTx)

		// A write on another connection, in a transaction of its own.
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := pgadvisory.SetFencingToken(ctx, tx, token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES (1, 100)"); err != nil {
			return err
		}
		return tx.Commit()
	}, pgadvisory.WithFencing())
	fmt.Println("write carrying the token:", err)

	// The table is fenced in strict mode: a write without a token fails.
	_, err = db.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES (2, 200)")
	fmt.Println("write without a token:", pgadvisory.SQLState(err))
	// Output:
	// write carrying the token: <nil>
	// write without a token: LF002
}

func ExampleSetFencingTokenPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // Migrate takes a *sql.DB
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("set_fencing_token_pgx")
	invoices, drop := exampleFencedTable(ctx, db, "set_fencing_token_pgx", lockID)
	defer drop()

	var token int64
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(tx pgx.Tx) error {
		token, _ = pgadvisory.FencingTokenPgx(tx)
		return nil
	}, pgadvisory.WithFencing())

	// Any pgx transaction can carry the token, e.g. one of pgx.BeginFunc.
	write := func(id int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := pgadvisory.SetFencingTokenPgx(ctx, tx, token); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+invoices+" (id, total) VALUES ($1, 100)", id)
			return err
		})
	}
	fmt.Println("write:", write(1))

	// After a newer holder publishes, the write fails with SQLSTATE LF001
	// (RunFencedPgx would also classify it as ErrStaleToken).
	_ = pgadvisory.RunExclusivePgx(ctx, pool, lockID, func(pgx.Tx) error { return nil }, pgadvisory.WithFencing())
	fmt.Println("write after a newer holder:", pgadvisory.SQLState(write(2)))
	// Output:
	// write: <nil>
	// write after a newer holder: LF001
}

func ExampleLock_With() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)

	// cmd/lockgen generates this for a lock declared with fencing: true.
	invoiceRun := pgadvisory.Lock{Name: "billing.invoice_run", ID: exampleLockID("lock_with")}.With(pgadvisory.WithFencing())

	err := invoiceRun.RunExclusive(ctx, db, func(tx *sql.Tx) error {
		_, fenced := pgadvisory.FencingToken(tx)
		fmt.Println("fenced:", fenced)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// fenced: true
	// err: <nil>
}

// exampleSchemaName names a private schema for one run of an example.
func exampleSchemaName(name string) string {
	return fmt.Sprintf("example_%s_%d", name, rand.Uint32())
}

// exampleFencedTable creates the table invoices (id, total) in a private
// schema, fenced by lockID as the migration of "lockgen fence -lock … -table
// <schema>.invoices" fences it (without its checks that lockgen's schema
// exists and that the table is no partition), and returns its qualified name
// and a func that drops the schema.
func exampleFencedTable(ctx context.Context, db *sql.DB, name string, lockID int64) (string, func()) {
	schema := exampleSchemaName(name)
	_, err := db.ExecContext(ctx, fmt.Sprintf(`
		CREATE SCHEMA %[1]s;
		CREATE TABLE %[1]s.invoices (id int PRIMARY KEY, total int NOT NULL);
		-- The column stamps each row with its writer's token; it is never a token.
		ALTER TABLE %[1]s.invoices ADD COLUMN fencing_token bigint
			DEFAULT NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint;
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE ON %[1]s.invoices FOR EACH ROW
			WHEN (NEW.fencing_token IS DISTINCT FROM NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint)
			EXECUTE FUNCTION pgadvisory.fence_stamp('%[2]d', 'strict');
		-- Each write is checked once per statement, on the rows as written.
		CREATE TRIGGER zz_pgadvisory_fence_insert AFTER INSERT ON %[1]s.invoices REFERENCING NEW TABLE AS fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement('%[2]d', 'strict');
		CREATE TRIGGER zz_pgadvisory_fence_update AFTER UPDATE ON %[1]s.invoices REFERENCING OLD TABLE AS fence_old NEW TABLE AS fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement('%[2]d', 'strict');
		CREATE TRIGGER zz_pgadvisory_fence_delete AFTER DELETE ON %[1]s.invoices REFERENCING OLD TABLE AS fence_old
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement('%[2]d', 'strict');
		CREATE TRIGGER zz_pgadvisory_fence_truncate BEFORE TRUNCATE ON %[1]s.invoices
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard('%[2]d', 'strict');
		-- Listed as fenced by the lock: the checks run on listed tables.
		SELECT pgadvisory.fence_register('%[1]s.invoices', '%[2]d', 'strict', '{}')`, schema, lockID))
	if err != nil {
		log.Fatal(err)
	}
	return schema + ".invoices", func() {
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			log.Fatal(err)
		}
	}
}

// exampleStore is an external store (an object store, another database, an
// HTTP service) that applies Kleppmann's rule: it keeps the highest token
// seen and rejects requests with a lower one, comparing and storing
// atomically.
type exampleStore struct {
	mu      sync.Mutex
	highest int64
	body    string
}

func (s *exampleStore) Put(token int64, body string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return fmt.Errorf("store: token %d is older than %d", token, s.highest)
	}
	s.highest, s.body = token, body
	return nil
}
