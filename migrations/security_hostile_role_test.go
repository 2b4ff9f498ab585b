package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// Attacks on lockgen's schema by a hostile login role: no superuser, owner
// of neither pgadvisory nor the fenced tables, with the table rights a
// writer has, a schema of its own (types, casts, operators, functions), its
// own search_path and temporary tables. The schema's owner is the role that
// ran the migrations, a superuser here (as it often is).
//
// Each attack runs twice: against lockgen's schema as 00007 left it (the
// control: the attack succeeds, so the test can fail) and against every
// migration (it gains nothing: the role stays what it was, no token moves,
// no row changes).

// schemaVersions are the schemas each attack runs against.
var schemaVersions = []struct {
	name    string
	version int64
	open    bool // the attack succeeds against this schema
}{
	{"before 00008 (control)", 7, true},
	{"all migrations", 1 << 30, false},
}

// hostile is the attacking role and its session.
type hostile struct {
	admin *sql.DB   // the database, as the migrating role (a superuser)
	role  string    // the hostile role
	conn  *sql.Conn // one session of the hostile role (its temp tables live here)
	lock  int64     // a lock ID of the test's own
}

// newHostile migrates a new database to version, creates the hostile role
// with a schema wsch of its own, and opens its session.
func newHostile(t *testing.T, version int64) *hostile {
	t.Helper()
	admin := migrated.UpTo(t, version)
	role := fencing.AppRole(t, admin)
	_, err := admin.Exec(`CREATE SCHEMA wsch AUTHORIZATION ` + role)
	require.NoError(t, err)
	conn, err := fencing.OpenAs(t, admin, role).Conn(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	h := &hostile{admin: admin, role: role, conn: conn, lock: testdb.Key(t)}
	// escalate makes the session's login role a superuser when it runs as
	// one that may (and does nothing otherwise): the payload of every
	// attack.
	h.must(t, `CREATE FUNCTION wsch.escalate() RETURNS boolean LANGUAGE plpgsql AS $$
		BEGIN
			EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
			RETURN true;
		EXCEPTION WHEN insufficient_privilege THEN
			RETURN true;
		END $$`)
	return h
}

// run runs stmts in order in the hostile session, each whatever the
// previous did, and returns the errors.
func (h *hostile) run(t *testing.T, stmts ...string) []error {
	t.Helper()
	var errs []error
	for _, s := range stmts {
		if _, err := h.conn.ExecContext(context.Background(), s); err != nil {
			t.Logf("hostile: %s: %v", strings.Join(strings.Fields(s), " "), err)
			errs = append(errs, err)
		}
	}
	return errs
}

// must runs stmts in the hostile session and fails on any error.
func (h *hostile) must(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		_, err := h.conn.ExecContext(context.Background(), s)
		require.NoError(t, err, s)
	}
}

// superuser reports whether the role became a superuser or a member of the
// schema's owner.
func (h *hostile) superuser(t *testing.T) bool {
	t.Helper()
	var super, member bool
	require.NoError(t, h.admin.QueryRow(`SELECT r.rolsuper, pg_has_role(r.oid, (SELECT nspowner FROM pg_namespace WHERE nspname = 'pgadvisory'), 'MEMBER')
		FROM pg_roles AS r WHERE r.rolname = $1`, h.role).Scan(&super, &member))
	return super || member
}

// code is the SQLSTATE of the first error in errs ("" for none).
func code(errs []error) string {
	for _, err := range errs {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return pgErr.Code
		}
		return "?"
	}
	return ""
}

// fenceByHand fences table (owned by the migrating role) in the current
// layout with the trigger arguments args, as lockgen fence's migrations
// before 00008 did (no fence_register), so that the same table exists
// against every schema version, and lists it as 00008 lists the tables
// fenced before it.
func fenceByHand(t *testing.T, db *sql.DB, table, args string) {
	t.Helper()
	fenceTriggersByHand(t, db, table, args)
	fencing.ListAsFencedBefore(t, db, table, args)
}

// fenceTriggersByHand is fenceByHand without the listing: the table has
// lockgen's fence triggers, and pgadvisory.fenced_table does not list it.
func fenceTriggersByHand(t *testing.T, db *sql.DB, table, args string) {
	t.Helper()
	_, err := db.Exec(`ALTER TABLE ` + table + ` ADD COLUMN fencing_token bigint
			DEFAULT NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint;
		CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE ON ` + table + ` FOR EACH ROW
			WHEN (NEW.fencing_token IS DISTINCT FROM NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint)
			EXECUTE FUNCTION pgadvisory.fence_stamp(` + args + `);
		CREATE TRIGGER zz_pgadvisory_fence_insert AFTER INSERT ON ` + table + ` REFERENCING NEW TABLE AS fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement(` + args + `);
		CREATE TRIGGER zz_pgadvisory_fence_update AFTER UPDATE ON ` + table + ` REFERENCING OLD TABLE AS fence_old NEW TABLE AS fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement(` + args + `);
		CREATE TRIGGER zz_pgadvisory_fence_delete AFTER DELETE ON ` + table + ` REFERENCING OLD TABLE AS fence_old
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement(` + args + `);
		CREATE TRIGGER zz_pgadvisory_fence_truncate BEFORE TRUNCATE ON ` + table + `
			FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_truncate_guard(` + args + `)`)
	require.NoError(t, err)
}

// count is the number of rows of table.
func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// publish takes lock as the migrating role with a fenced acquisition (the
// statements the runtime sends), commits at once and returns the published
// token.
func publish(t *testing.T, db *sql.DB, lock int64) int64 {
	t.Helper()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	var tok int64
	for _, s := range []string{`BEGIN`, fmt.Sprintf(`SELECT token FROM pgadvisory.fence_acquire(ARRAY[%d]::bigint[], false, NULL, '5s')`, lock),
		`COMMIT AND CHAIN`, `SELECT pgadvisory.fence_handover()`, `COMMIT`} {
		if strings.HasPrefix(s, "SELECT token") {
			require.NoError(t, conn.QueryRowContext(context.Background(), s).Scan(&tok))
			continue
		}
		_, err := conn.ExecContext(context.Background(), s)
		require.NoError(t, err, s)
	}
	return tok
}

// Any role became superuser through fence_acquire: its SET CONSTRAINTS ALL
// IMMEDIATE fired the caller's pending deferred trigger as its owner.
func TestHostileFenceAcquireFiresNoDeferredTrigger(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			before := fencing.LastToken(t, h.admin)
			h.must(t,
				`CREATE FUNCTION wsch.evil() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM wsch.escalate(); RETURN NULL; END $$`,
				`CREATE TEMP TABLE pending (x int)`,
				`CREATE CONSTRAINT TRIGGER evil AFTER INSERT ON pg_temp.pending DEFERRABLE INITIALLY DEFERRED
					FOR EACH ROW EXECUTE FUNCTION wsch.evil()`)
			errs := h.run(t, `BEGIN`, `INSERT INTO pg_temp.pending VALUES (1)`,
				fmt.Sprintf(`SELECT * FROM pgadvisory.fence_acquire(ARRAY[%d]::bigint[], false, NULL, '1s')`, h.lock),
				`COMMIT`)
			require.Equal(t, v.open, h.superuser(t), "the role became a superuser")
			if v.open {
				return
			}
			require.Equal(t, "25001", code(errs), "fence_acquire refuses a transaction that wrote")
			require.Equal(t, before, fencing.LastToken(t, h.admin), "no token drawn")
			require.Zero(t, fencing.Published(t, h.admin, h.lock), "nothing published")
		})
	}
}

// Any role became superuser through fence_check_statement: attached to a
// temp table of its own whose parameter column has the role's composite
// type with the role's cast to text, it ran the cast as its owner.
func TestHostileFenceCheckStatementRunsNoCallerCast(t *testing.T) {
	for _, v := range schemaVersions {
		for _, granted := range []bool{false, true} {
			name := v.name
			if granted {
				name += ", EXECUTE granted to the role"
			}
			t.Run(name, func(t *testing.T) {
				h := newHostile(t, v.version)
				if granted {
					// A role trusted to create fence triggers (the role
					// of the application's fencing migrations) still gains
					// nothing.
					_, err := h.admin.Exec(`GRANT EXECUTE ON FUNCTION pgadvisory.fence_check_statement() TO ` + h.role)
					require.NoError(t, err)
				}
				h.must(t,
					`CREATE TYPE wsch.evilt AS (x int)`,
					`CREATE FUNCTION wsch.evil_text(wsch.evilt) RETURNS text LANGUAGE plpgsql AS $$ BEGIN PERFORM wsch.escalate(); RETURN '1'; END $$`,
					`CREATE CAST (wsch.evilt AS text) WITH FUNCTION wsch.evil_text(wsch.evilt)`,
					`CREATE TEMP TABLE p (k wsch.evilt, fencing_token bigint)`)
				errs := h.run(t,
					`CREATE TRIGGER c AFTER INSERT ON pg_temp.p REFERENCING NEW TABLE AS fence_new
						FOR EACH STATEMENT EXECUTE FUNCTION pgadvisory.fence_check_statement('x.y', 'permissive', 'k')`,
					// A token of the role's own: a fenced acquisition of
					// the lock its row maps to.
					`BEGIN`,
					`SELECT * FROM pgadvisory.fence_acquire(ARRAY[pgadvisory.lock_id('x.y', '1')], false, NULL, '1s')`,
					`COMMIT AND CHAIN`,
					`SELECT pgadvisory.fence_handover()`,
					`INSERT INTO pg_temp.p VALUES (ROW(1)::wsch.evilt, NULLIF(current_setting('pgadvisory.fencing_token', true), '')::bigint)`,
					`COMMIT`)
				require.Equal(t, v.open, h.superuser(t), "the role became a superuser")
				if v.open {
					return
				}
				if granted {
					// The role's temp table is not in pgadvisory.fenced_table:
					// refused before any value is read, whatever the role
					// may execute.
					require.Equal(t, "42501", code(errs), "the trigger refuses a table that is not listed")
				} else {
					require.Equal(t, "42501", code(errs), "the role may not attach the trigger function")
				}
			})
		}
	}
}

// operatorTrick is the role's = on text, true for anything, first on its
// search_path: any comparison with 'permissive' that resolves = through
// the caller's search_path finds it.
var operatorTrick = []string{
	`CREATE FUNCTION wsch.anything_goes(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT true'`,
	`CREATE OPERATOR wsch.= (LEFTARG = text, RIGHTARG = text, FUNCTION = wsch.anything_goes)`,
	`SET search_path = wsch, pg_catalog`,
}

// A writer emptied a strict table without a token: fence_truncate_guard
// resolved = through the caller's search_path.
func TestHostileTruncateGuardIgnoresCallerOperators(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			table := "public.accounts"
			_, err := h.admin.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, balance int NOT NULL)`)
			require.NoError(t, err)
			fenceByHand(t, h.admin, table, fmt.Sprintf("'%d', 'strict'", h.lock))
			tok := publish(t, h.admin, h.lock)
			require.NoError(t, fencing.Write(h.admin, tok, `INSERT INTO `+table+` (id, balance) VALUES (1, 10), (2, 20)`))
			_, err = h.admin.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ` + table + ` TO ` + h.role)
			require.NoError(t, err)

			h.must(t, operatorTrick...)
			errs := h.run(t, `TRUNCATE public.accounts`)
			if v.open {
				require.Empty(t, errs)
				require.Zero(t, count(t, h.admin, table), "the control: the table was emptied without a token")
				return
			}
			require.Equal(t, "LF002", code(errs))
			require.Equal(t, 2, count(t, h.admin, table), "no row changed")
		})
	}
}

// Tables in the first fencing layout accepted token-less writes by the
// same trick: fence_check and fence_check_param pinned no search_path.
func TestHostileLegacyTriggersIgnoreCallerOperators(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			plain := fencing.LegacyTable(t, h.admin, "public", "legacy_plain", h.lock, "strict")
			_, err := h.admin.Exec(`CREATE TABLE public.legacy_param (id int PRIMARY KEY, tenant_id bigint NOT NULL, fencing_token bigint);
				CREATE TRIGGER zz_pgadvisory_fence BEFORE INSERT OR UPDATE OR DELETE ON public.legacy_param
					FOR EACH ROW EXECUTE FUNCTION pgadvisory.fence_check_param('billing.invoice', 'strict', 'tenant_id')`)
			require.NoError(t, err)
			fencing.ListAsFencedBefore(t, h.admin, "public.legacy_param", `'billing.invoice', 'strict', 'tenant_id'`)
			tok := publish(t, h.admin, h.lock)
			require.NoError(t, fencing.Write(h.admin, tok, `INSERT INTO `+plain+` (id, balance) VALUES (1, 10)`))
			_, err = h.admin.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON public.legacy_plain, public.legacy_param TO ` + h.role)
			require.NoError(t, err)

			h.must(t, operatorTrick...)
			for _, stmt := range []string{
				`INSERT INTO public.legacy_plain (id, balance) VALUES (2, 20)`,
				`UPDATE public.legacy_plain SET balance = 0`,
				`DELETE FROM public.legacy_plain WHERE id = 1`,
				`INSERT INTO public.legacy_param (id, tenant_id) VALUES (1, 7)`,
			} {
				errs := h.run(t, stmt)
				if v.open {
					require.Empty(t, errs, "the control: %s passes without a token", stmt)
					continue
				}
				require.Equal(t, "LF002", code(errs), stmt)
			}
			if v.open {
				return
			}
			require.Equal(t, map[int64]fencing.Row{1: {Balance: 10, Token: tok}}, fencing.Rows(t, h.admin, plain), "no row changed")
			require.Zero(t, count(t, h.admin, "public.legacy_param"))
		})
	}
}

// LF001's message disclosed the current token to a writer with a stale
// one, who could then write with it while the holder still held the lock.
func TestHostileStaleTokenErrorNamesNoCurrentToken(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			table := "public.accounts"
			_, err := h.admin.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, balance int NOT NULL)`)
			require.NoError(t, err)
			fenceByHand(t, h.admin, table, fmt.Sprintf("'%d', 'strict'", h.lock))
			_, err = h.admin.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + table + ` TO ` + h.role)
			require.NoError(t, err)
			stale := publish(t, h.admin, h.lock)
			current := publish(t, h.admin, h.lock)

			errs := h.run(t, `BEGIN`, fmt.Sprintf(`SELECT set_config('pgadvisory.fencing_token', '%d', true)`, stale),
				`INSERT INTO public.accounts (id, balance) VALUES (1, 1)`, `ROLLBACK`)
			require.Equal(t, "LF001", code(errs))
			var pgErr *pgconn.PgError
			require.ErrorAs(t, errs[0], &pgErr)
			text := strings.Join([]string{pgErr.Message, pgErr.Detail, pgErr.Hint}, "\n")
			names := regexp.MustCompile(fmt.Sprintf(`\btoken %d\b`, current)).MatchString(text)
			require.Equal(t, v.open, names, "the error names the current token: %s", text)
		})
	}
}

// A role without any table right called the PUBLIC fence_require_current
// (once to read the token, once in an open transaction) and blocked every
// fenced acquisition of the lock until it let go.
func TestHostileCannotHoldAFenceRow(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			current := publish(t, h.admin, h.lock)
			errs := h.run(t, `BEGIN`,
				fmt.Sprintf(`SELECT pgadvisory.fence_require_current(%d, %d, NULL, NULL)`, h.lock, current))
			defer h.run(t, `ROLLBACK`)
			// The holder's publish, with a short publish timeout.
			conn, err := h.admin.Conn(context.Background())
			require.NoError(t, err)
			defer func() { _ = conn.Close() }()
			_, err = conn.ExecContext(context.Background(), `BEGIN`)
			require.NoError(t, err)
			start := time.Now()
			_, err = conn.ExecContext(context.Background(),
				fmt.Sprintf(`SELECT * FROM pgadvisory.fence_acquire(ARRAY[%d]::bigint[], false, NULL, '300ms')`, h.lock))
			t.Logf("publish: %v after %v", err, time.Since(start))
			_, _ = conn.ExecContext(context.Background(), `ROLLBACK`)
			_, _ = conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock_all()`)
			if v.open {
				require.Empty(t, errs)
				require.Error(t, err, "the control: the publish timed out behind the role's FOR SHARE")
				return
			}
			require.Equal(t, "42501", code(errs), "fence_require_current is not PUBLIC")
			require.NoError(t, err, "the publish does not wait for the role")
		})
	}
}

// A never-issued token deleted rows: a parameterized lock over a column
// that allows NULL skipped the old rows whose parameter was NULL.
func TestHostileNullParameterRowsNeedALock(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			table := "public.invoice"
			_, err := h.admin.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, tenant_id bigint, amount int NOT NULL)`)
			require.NoError(t, err)
			_, err = h.admin.Exec(`INSERT INTO ` + table + ` (id, tenant_id, amount) VALUES (1, NULL, 1), (2, NULL, 2)`)
			require.NoError(t, err)
			fenceByHand(t, h.admin, table, `'billing.invoice', 'strict', 'tenant_id'`)
			_, err = h.admin.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + table + ` TO ` + h.role)
			require.NoError(t, err)
			errs := h.run(t, `BEGIN`, `SELECT set_config('pgadvisory.fencing_token', '1', true)`,
				`DELETE FROM public.invoice WHERE tenant_id IS NULL`, `COMMIT`)
			if v.open {
				require.Empty(t, errs)
				require.Zero(t, count(t, h.admin, table), "the control: a never-issued token deleted the rows")
				return
			}
			require.Equal(t, "LF005", code(errs))
			require.Equal(t, 2, count(t, h.admin, table), "no row changed")
		})
	}
}

// A parameter column of a type whose text depends on session settings
// (timestamptz under TimeZone) gave rows a lock ID the writer chose.
func TestHostileSettingDependentParameterColumn(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			table := "public.daily"
			_, err := h.admin.Exec(`CREATE TABLE ` + table + ` (id int PRIMARY KEY, day timestamptz NOT NULL)`)
			require.NoError(t, err)
			fenceByHand(t, h.admin, table, `'reports.daily', 'strict', 'day'`)
			_, err = h.admin.Exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + table + ` TO ` + h.role)
			require.NoError(t, err)
			// The role publishes the lock of the row's day as it reads in
			// a time zone of its choosing, then writes under it.
			errs := h.run(t, `SET TimeZone = 'Pacific/Kiritimati'`, `BEGIN`,
				`SELECT * FROM pgadvisory.fence_acquire(ARRAY[pgadvisory.lock_id('reports.daily', '2026-01-01 00:00:00+00'::timestamptz::text)], false, NULL, '1s')`,
				`COMMIT AND CHAIN`, `SELECT pgadvisory.fence_handover()`,
				`INSERT INTO public.daily VALUES (1, '2026-01-01 00:00:00+00')`, `COMMIT`)
			if v.open {
				require.Empty(t, errs)
				require.Equal(t, 1, count(t, h.admin, table), "the control: the row was written under the role's time zone")
				return
			}
			require.Equal(t, "42804", code(errs), "a timestamptz parameter column is refused")
			require.Zero(t, count(t, h.admin, table))
			_, err = h.admin.Exec(`SELECT pgadvisory.fence_register('public.daily', 'reports.daily', 'strict', ARRAY['day'])`)
			require.Error(t, err, "fence_register refuses it too")
		})
	}
}

// A failed fence_acquire released a session lock it never took: the
// caller's own hold on an ID it asked for.
func TestHostileFenceAcquireReleasesOnlyWhatItTook(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			first, mine := h.lock, h.lock+1
			// Another session holds first, so the call times out on it.
			other, err := h.admin.Conn(context.Background())
			require.NoError(t, err)
			defer func() { _ = other.Close() }()
			_, err = other.ExecContext(context.Background(), fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, first))
			require.NoError(t, err)
			h.must(t, fmt.Sprintf(`SELECT pg_advisory_lock(%d)`, mine))
			errs := h.run(t, `BEGIN`,
				fmt.Sprintf(`SELECT * FROM pgadvisory.fence_acquire(ARRAY[%d, %d]::bigint[], true, '100ms', '1s')`, first, mine),
				`ROLLBACK`)
			require.Equal(t, "55P03", code(errs))
			var free bool
			require.NoError(t, other.QueryRowContext(context.Background(), fmt.Sprintf(`SELECT pg_try_advisory_lock(%d)`, mine)).Scan(&free))
			require.Equal(t, v.open, free, "the caller's own lock was released")
		})
	}
}

// The publish's commit waited for no synchronous standby when the role or
// session said synchronous_commit = local.
func TestHostilePublishIsDurableUnderSynchronousCommitLocal(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			h.must(t, `SET synchronous_commit = local`, `BEGIN`,
				fmt.Sprintf(`SELECT * FROM pgadvisory.fence_acquire(ARRAY[%d]::bigint[], false, NULL, '1s')`, h.lock))
			var setting string
			require.NoError(t, h.conn.QueryRowContext(context.Background(), `SHOW synchronous_commit`).Scan(&setting))
			h.must(t, `ROLLBACK`, `SELECT pg_advisory_unlock_all()`)
			require.Equal(t, v.open, setting == "local", "the publish's commit runs under %s", setting)
		})
	}
}

// A table's owner who is not lockgen's owner changed fencing_token to a
// type of its own with an implicit cast to bigint: fence_check_statement
// compared the stamp with the token as its owner, through the role's cast.
func TestHostileFencingTokenTypeIsChecked(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			table := "wsch.accounts"
			h.must(t, `CREATE TABLE wsch.accounts (id int PRIMARY KEY, balance int NOT NULL)`)
			// The owner of lockgen's schema fences the role's table (a plain
			// lock), as lockgen fence's migration run by it does.
			fenceByHand(t, h.admin, table, fmt.Sprintf("'%d', 'strict'", h.lock))
			if !v.open {
				_, err := h.admin.Exec(fmt.Sprintf(`SELECT pgadvisory.fence_register('wsch.accounts', '%d', 'strict', '{}')`, h.lock))
				require.NoError(t, err)
			}
			h.must(t,
				`CREATE TYPE wsch.tok AS (x bigint)`,
				`CREATE FUNCTION wsch.tok_int(wsch.tok) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN PERFORM wsch.escalate(); RETURN ($1).x; END $$`,
				`CREATE FUNCTION wsch.int_tok(bigint) RETURNS wsch.tok LANGUAGE sql AS 'SELECT ROW($1)::wsch.tok'`,
				`CREATE CAST (wsch.tok AS bigint) WITH FUNCTION wsch.tok_int(wsch.tok) AS IMPLICIT`,
				`CREATE CAST (bigint AS wsch.tok) WITH FUNCTION wsch.int_tok(bigint) AS ASSIGNMENT`,
				// The row trigger's WHEN names the column: the owner of the
				// table drops it first (the statement triggers stay).
				`DROP TRIGGER zz_pgadvisory_fence ON wsch.accounts`,
				`ALTER TABLE wsch.accounts ALTER COLUMN fencing_token DROP DEFAULT`,
				`ALTER TABLE wsch.accounts ALTER COLUMN fencing_token TYPE wsch.tok USING ROW(fencing_token)::wsch.tok`)
			before := fencing.LastToken(t, h.admin)
			errs := h.run(t, `BEGIN`,
				fmt.Sprintf(`SELECT * FROM pgadvisory.fence_acquire(ARRAY[%d]::bigint[], false, NULL, '1s')`, h.lock),
				`COMMIT AND CHAIN`, `SELECT pgadvisory.fence_handover()`,
				`INSERT INTO wsch.accounts VALUES (1, 1, ROW(current_setting('pgadvisory.fencing_token')::bigint)::wsch.tok)`, `COMMIT`)
			require.Equal(t, v.open, h.superuser(t), "the role became a superuser")
			if v.open {
				return
			}
			require.Equal(t, "42804", code(errs), "a fencing_token of the role's type is refused")
			require.Equal(t, before+1, fencing.LastToken(t, h.admin), "only the role's own acquisition drew a token")
			require.Zero(t, count(t, h.admin, table))
		})
	}
}

// The same attack through fence_wait_try, the lock statement of a waiting
// fenced call, which runs fence_acquire as its owner for the head of a
// queue and writes the queue: it refuses a transaction that wrote before
// it does either, so the caller's pending deferred trigger never fires as
// its owner. The control is the attack on 00007's fence_acquire (before
// 00011 there is no fence_wait_try).
func TestHostileFenceWaitTryFiresNoDeferredTrigger(t *testing.T) {
	for _, v := range schemaVersions {
		t.Run(v.name, func(t *testing.T) {
			h := newHostile(t, v.version)
			before := fencing.LastToken(t, h.admin)
			h.must(t,
				`CREATE FUNCTION wsch.evil() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM wsch.escalate(); RETURN NULL; END $$`,
				`CREATE TEMP TABLE pending (x int)`,
				`CREATE CONSTRAINT TRIGGER evil AFTER INSERT ON pg_temp.pending DEFERRABLE INITIALLY DEFERRED
					FOR EACH ROW EXECUTE FUNCTION wsch.evil()`)
			call := fmt.Sprintf(`SELECT * FROM pgadvisory.fence_wait_try(ARRAY[%d]::bigint[], NULL, 60000, 0, '1s')`, h.lock)
			if v.open {
				call = fmt.Sprintf(`SELECT * FROM pgadvisory.fence_acquire(ARRAY[%d]::bigint[], false, NULL, '1s')`, h.lock)
			}
			errs := h.run(t, `BEGIN`, `INSERT INTO pg_temp.pending VALUES (1)`, call, `COMMIT`)
			require.Equal(t, v.open, h.superuser(t), "the role became a superuser")
			if v.open {
				return
			}
			require.Equal(t, "25001", code(errs), "fence_wait_try refuses a transaction that wrote")
			require.Equal(t, before, fencing.LastToken(t, h.admin), "no token drawn")
			require.Zero(t, fencing.Published(t, h.admin, h.lock), "nothing published")
			var rows int
			require.NoError(t, h.admin.QueryRow(`SELECT count(*) FROM pgadvisory.waiter WHERE lock_id = $1`, h.lock).Scan(&rows))
			require.Zero(t, rows, "nothing queued")
			// The same call in a transaction that wrote nothing is granted,
			// as the hostile role: it publishes for a lock it holds.
			var granted bool
			var tok int64
			h.must(t, `BEGIN`)
			require.NoError(t, h.conn.QueryRowContext(context.Background(), fmt.Sprintf(
				`SELECT granted, token FROM pgadvisory.fence_wait_try(ARRAY[%d]::bigint[], NULL, 60000, 0, '1s')`, h.lock)).Scan(&granted, &tok))
			h.must(t, `COMMIT AND CHAIN`, `SELECT pgadvisory.fence_handover()`, `COMMIT`)
			require.True(t, granted)
			require.Equal(t, tok, fencing.Published(t, h.admin, h.lock))
			require.False(t, h.superuser(t))
		})
	}
}
