package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/fencing"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/sqlstate"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/migrations"
	"github.com/lockgen/lockgen/pgadvisory"
)

// The statements pgadvisory's WithLease sends, each its own transaction.
const (
	leaseAcquireSQL = `SELECT pgadvisory.lease_acquire($1, $2, $3::uuid, $4::interval, '5s')`
	leaseRenewSQL   = `SELECT pgadvisory.lease_renew($1::bigint[], $2::uuid, $3::interval)`
	leaseReleaseSQL = `SELECT pgadvisory.lease_release($1, $2::uuid)`
)

// newSecret is a random owner secret in uuid's text form.
func newSecret(t *testing.T) string {
	t.Helper()
	var b [16]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// acquire calls lease_acquire and returns the term (0: NULL, not taken).
func acquire(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, lock int64, holder, secret, ttl string) int64 {
	t.Helper()
	var term sql.NullInt64
	require.NoError(t, q.QueryRowContext(context.Background(), leaseAcquireSQL, lock, holder, secret, ttl).Scan(&term))
	return term.Int64
}

// renew calls lease_renew and returns the IDs it renewed.
func renew(t *testing.T, db *sql.DB, secret, ttl string, locks ...int64) []int64 {
	t.Helper()
	var held pgtype.FlatArray[int64]
	m := pgtype.NewMap()
	require.NoError(t, db.QueryRow(leaseRenewSQL, locks, secret, ttl).Scan(m.SQLScanner(&held)))
	return []int64(held)
}

// release calls lease_release.
func release(t *testing.T, db *sql.DB, lock int64, secret string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(leaseReleaseSQL, lock, secret).Scan(&ok))
	return ok
}

// leaseRow is the row of pgadvisory.lease for lock.
type leaseRow struct {
	holder  sql.NullString
	term    sql.NullInt64
	expires sql.NullTime
}

func readLease(t *testing.T, db *sql.DB, lock int64) leaseRow {
	t.Helper()
	var r leaseRow
	require.NoError(t, db.QueryRow(`SELECT holder, term, expires_at FROM pgadvisory.lease WHERE lock_id = $1`, lock).
		Scan(&r.holder, &r.term, &r.expires))
	return r
}

// TestLeaseAcquireRenewRelease: a vacant lease is taken with a term that is
// the lock's published token; while it runs nobody else takes it; renew
// extends it for its owner only; release vacates it at once, and the next
// holder's term is greater.
func TestLeaseAcquireRenewRelease(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	a, b := newSecret(t), newSecret(t)

	before := fencing.LastToken(t, db)
	t1 := acquire(t, db, lock, "a", a, "1 minute")
	require.Greater(t, t1, before, "a term drawn from the fencing sequence")
	require.Equal(t, t1, fencing.Published(t, db, lock), "the term is the published token")
	r := readLease(t, db, lock)
	require.Equal(t, "a", r.holder.String)
	require.Equal(t, t1, r.term.Int64)

	require.Zero(t, acquire(t, db, lock, "b", b, "1 minute"), "a held lease is not taken")
	require.Zero(t, acquire(t, db, lock, "a", a, "1 minute"), "not even by its holder: a second acquisition is refused")
	require.Equal(t, t1, fencing.Published(t, db, lock), "a refused acquisition publishes nothing")

	other := testdb.Key(t)
	require.Equal(t, []int64{lock}, renew(t, db, a, "1 minute", lock, other), "only the held lease is renewed")
	require.Empty(t, renew(t, db, b, "1 minute", lock), "a wrong owner secret renews nothing")
	require.False(t, release(t, db, lock, b), "a wrong owner secret releases nothing")
	require.Equal(t, "a", readLease(t, db, lock).holder.String)

	require.True(t, release(t, db, lock, a))
	r = readLease(t, db, lock)
	require.False(t, r.holder.Valid, "released: vacant")
	require.Empty(t, renew(t, db, a, "1 minute", lock), "a released lease is not renewed")
	require.False(t, release(t, db, lock, a), "a second release finds nothing")

	t2 := acquire(t, db, lock, "b", b, "1 minute")
	require.Greater(t, t2, t1, "terms strictly increase")
	require.Equal(t, t2, fencing.Published(t, db, lock))
	require.Equal(t, "b", readLease(t, db, lock).holder.String)
}

// TestLeaseExpiry: a lease expires on the database's clock; an expired
// lease is neither renewed nor kept, and another holder takes it with a
// newer term; the old holder's renewal finds it gone.
func TestLeaseExpiry(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	a, b := newSecret(t), newSecret(t)

	t1 := acquire(t, db, lock, "a", a, "300 milliseconds")
	require.NotZero(t, t1)
	require.Equal(t, []int64{lock}, renew(t, db, a, "300 milliseconds", lock), "renewed before it expired")
	require.Zero(t, acquire(t, db, lock, "b", b, "1 minute"), "not yet expired")
	time.Sleep(400 * time.Millisecond)
	require.Empty(t, renew(t, db, a, "1 minute", lock), "an expired lease is not renewed, even though nobody took it")

	t2 := acquire(t, db, lock, "b", b, "1 minute")
	require.Greater(t, t2, t1)
	require.Equal(t, t2, fencing.Published(t, db, lock))
	require.Empty(t, renew(t, db, a, "1 minute", lock), "the old holder's renewal finds the lease taken")
	require.False(t, release(t, db, lock, a), "the old holder's release leaves the new holder's lease")
	require.Equal(t, []int64{lock}, renew(t, db, b, "1 minute", lock))
}

// TestLeaseRenewBatch: one statement renews all the leases of one owner
// secret, and only those still held.
func TestLeaseRenewBatch(t *testing.T) {
	db := migrated.DB(t)
	a, b := newSecret(t), newSecret(t)
	var locks []int64
	for i := 0; i < 5; i++ {
		lock := testdb.Key(t)
		locks = append(locks, lock)
		require.NotZero(t, acquire(t, db, lock, "a", a, "1 minute"))
	}
	theirs := testdb.Key(t)
	require.NotZero(t, acquire(t, db, theirs, "b", b, "1 minute"))
	require.True(t, release(t, db, locks[2], a))

	want := []int64{locks[0], locks[1], locks[3], locks[4]}
	require.ElementsMatch(t, want, renew(t, db, a, "1 minute", append(locks, theirs)...))
	var expiresA, expiresB time.Time
	require.NoError(t, db.QueryRow(`SELECT expires_at FROM pgadvisory.lease WHERE lock_id = $1`, theirs).Scan(&expiresB))
	require.NoError(t, db.QueryRow(`SELECT expires_at FROM pgadvisory.lease WHERE lock_id = $1`, locks[0]).Scan(&expiresA))
	require.True(t, expiresA.After(expiresB), "the owner's leases were renewed, the other's was not")
}

// TestLeaseSupersededIsNotRenewed: a lease whose term is no longer the
// lock's published token (a session-lock leader or a fenced acquisition of
// the same lock published a newer one) is lost: not renewed.
func TestLeaseSupersededIsNotRenewed(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	a := newSecret(t)
	t1 := acquire(t, db, lock, "a", a, "1 minute")
	require.NotZero(t, t1)
	require.Equal(t, []int64{lock}, renew(t, db, a, "1 minute", lock), "control: renewed while its term is published")
	newer := fencing.Publish(t, db, lock)
	require.Greater(t, newer, t1)
	require.Empty(t, renew(t, db, a, "1 minute", lock), "superseded: not renewed")
}

// TestLeaseTakeoverFencesOldTerm: after a takeover, a fenced table rejects
// the old term's writes (LF001) and accepts the new term's; the control,
// an unfenced table, takes the old term's write.
func TestLeaseTakeoverFencesOldTerm(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	fenced := fencing.Table(t, db, schema, "accounts", lock, "strict")
	control := fencing.Table(t, db, schema, "control", lock, "")
	a, b := newSecret(t), newSecret(t)

	t1 := acquire(t, db, lock, "a", a, "200 milliseconds")
	require.NoError(t, fencing.Write(db, t1, `INSERT INTO `+fenced+` (id, balance) VALUES (1, 10)`))
	time.Sleep(300 * time.Millisecond)
	t2 := acquire(t, db, lock, "b", b, "1 minute")
	require.Greater(t, t2, t1)

	sqlstate.Require(t, fencing.Write(db, t1, `UPDATE `+fenced+` SET balance = 99 WHERE id = 1`), "LF001")
	require.NoError(t, fencing.Write(db, t1, `INSERT INTO `+control+` (id, balance, fencing_token) VALUES (1, 99, `+fmt.Sprint(t1)+`)`),
		"control: an unfenced table takes the old term's write")
	require.NoError(t, fencing.Write(db, t2, `UPDATE `+fenced+` SET balance = 20 WHERE id = 1`))
	require.Equal(t, fencing.Row{Balance: 20, Token: t2}, fencing.Rows(t, db, fenced)[1])
}

// TestLeaseAcquireWaitsForOldTermWriter: the publish of a lease's term is
// ordered after a writer of the previous token that is still in flight
// (leader_elect's rule): the acquisition waits for it, up to the publish
// timeout, then fails with 55P03 and leaves the lease vacant.
func TestLeaseAcquireWaitsForOldTermWriter(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	schema := testdb.Schema(t)
	fenced := fencing.Table(t, db, schema, "accounts", lock, "strict")
	a, b := newSecret(t), newSecret(t)
	t1 := acquire(t, db, lock, "a", a, "100 milliseconds")

	ctx := context.Background()
	w, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = w.Rollback() }()
	_, err = w.Exec(`SELECT set_config('pgadvisory.fencing_token', $1, true)`, fmt.Sprint(t1))
	require.NoError(t, err)
	_, err = w.Exec(`INSERT INTO ` + fenced + ` (id, balance) VALUES (1, 10)`)
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)

	var term sql.NullInt64
	err = db.QueryRow(`SELECT pgadvisory.lease_acquire($1, 'b', $2::uuid, '1 minute', '300ms')`, lock, b).Scan(&term)
	sqlstate.Require(t, err, "55P03")
	require.Equal(t, t1, fencing.Published(t, db, lock), "nothing published while the writer is in flight")
	require.Equal(t, "a", readLease(t, db, lock).holder.String, "the lease was not taken")
	var held bool
	require.NoError(t, db.QueryRow(`SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objid = ($1::bigint & 4294967295)::oid AND classid = ($1::bigint >> 32)::oid)`, lock).Scan(&held))
	require.False(t, held, "the failed acquisition left no advisory lock behind")

	require.NoError(t, w.Commit(), "the old term's writer commits: it was ordered before")
	t2 := acquire(t, db, lock, "b", b, "1 minute")
	require.Greater(t, t2, t1)
	sqlstate.Require(t, fencing.Write(db, t1, `UPDATE `+fenced+` SET balance = 99 WHERE id = 1`), "LF001")
}

// TestLeaseSessionHolderExcludes: while a session holds the lock (a
// session-lock leader), lease_acquire returns NULL and publishes nothing.
func TestLeaseSessionHolderExcludes(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	c := conn(t, db)
	ctx := context.Background()
	_, err := c.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lock)
	require.NoError(t, err)
	before := fencing.Published(t, db, lock)
	require.Zero(t, acquire(t, db, lock, "b", newSecret(t), "1 minute"))
	require.Equal(t, before, fencing.Published(t, db, lock))
	_, err = c.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, lock)
	require.NoError(t, err)
	require.NotZero(t, acquire(t, db, lock, "b", newSecret(t), "1 minute"), "control: taken once the session let go")
}

// TestLeaseAcquireIsDurable: the transaction of lease_acquire commits with
// synchronous_commit on whatever the session says (local, remote_write and
// off would not wait for a synchronous standby), and leaves no session-level
// advisory lock behind; current_leader reports the lease with pid 0, never
// the backend that took it.
func TestLeaseAcquireIsDurable(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	ctx := context.Background()
	for _, setting := range []string{"off", "local", "remote_write"} {
		c := conn(t, db)
		tx, err := c.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.Exec(`SET LOCAL synchronous_commit = ` + setting)
		require.NoError(t, err)
		secret := newSecret(t)
		term := acquire(t, tx, lock, "a", secret, "1 minute")
		require.NotZero(t, term, setting)
		var sc string
		require.NoError(t, tx.QueryRow(`SHOW synchronous_commit`).Scan(&sc))
		require.Equal(t, "on", sc, "with %s", setting)
		require.NoError(t, tx.Commit())
		var locks int
		require.NoError(t, c.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks))
		require.Zero(t, locks, "no advisory lock left on the backend")
		leaders := func() []string {
			rows, err := db.Query(`SELECT format('%s/%s/%s', holder, term, pid) FROM pgadvisory.current_leader($1)`, lock)
			require.NoError(t, err)
			defer rows.Close()
			var out []string
			for rows.Next() {
				var s string
				require.NoError(t, rows.Scan(&s))
				out = append(out, s)
			}
			require.NoError(t, rows.Err())
			return out
		}
		lease := fmt.Sprintf("a/%d/0", term)
		require.Equal(t, []string{lease}, leaders(), "current_leader reports the lease, with pid 0: no backend")
		_, err = c.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, lock)
		require.NoError(t, err)
		require.Equal(t, []string{lease}, leaders(), "not the backend that took the lease, while it holds the lock for something else")
		_, err = c.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, lock)
		require.NoError(t, err)
		require.True(t, release(t, db, lock, secret))
		require.Empty(t, leaders(), "released: no leader")
	}
}

// TestLeaseArguments: NULLs and a ttl that is not positive are refused
// with 22023.
func TestLeaseArguments(t *testing.T) {
	db := migrated.DB(t)
	lock := testdb.Key(t)
	s := newSecret(t)
	var x any
	sqlstate.Require(t, db.QueryRow(leaseAcquireSQL, lock, nil, s, "1 minute").Scan(&x), "22023")
	sqlstate.Require(t, db.QueryRow(leaseAcquireSQL, lock, "a", nil, "1 minute").Scan(&x), "22023")
	sqlstate.Require(t, db.QueryRow(leaseAcquireSQL, lock, "a", s, "0").Scan(&x), "22023")
	sqlstate.Require(t, db.QueryRow(leaseAcquireSQL, lock, "a", s, "-1 second").Scan(&x), "22023")
	sqlstate.Require(t, db.QueryRow(leaseRenewSQL, nil, s, "1 minute").Scan(&x), "22023")
	sqlstate.Require(t, db.QueryRow(leaseRenewSQL, []int64{lock}, s, "0").Scan(&x), "22023")
	sqlstate.Require(t, db.QueryRow(leaseReleaseSQL, lock, nil).Scan(&x), "22023")
	require.Zero(t, fencing.Published(t, db, lock), "nothing published")
}

// TestLeaseMigrationDownUp: 00009's Down restores version 8's functions
// exactly and drops the lease table; Up brings 00009's back.
func TestLeaseMigrationDownUp(t *testing.T) {
	ctx := context.Background()
	db := migrated.UpTo(t, 8)
	want8 := schemaFunctions(t, db, "%")
	viewdef := func() string {
		var def string
		require.NoError(t, db.QueryRow(`SELECT pg_get_viewdef('pgadvisory.status'::regclass) || obj_description('pgadvisory.status'::regclass)`).Scan(&def))
		return def
	}
	view8 := viewdef()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(pgadvisory.MigrationTable), goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 9)
	require.NoError(t, err)
	want9 := schemaFunctions(t, db, "%")
	require.Contains(t, want9, "pgadvisory.lease_renew(bigint[],uuid,interval)")
	_, err = p.DownTo(ctx, 8)
	require.NoError(t, err)
	require.Equal(t, want8, schemaFunctions(t, db, "%"), "Down restores version 8 exactly")
	var reg sql.NullString
	require.NoError(t, db.QueryRow(`SELECT to_regclass('pgadvisory.lease')::text`).Scan(&reg))
	require.False(t, reg.Valid, "Down drops the lease table")
	require.NoError(t, db.QueryRow(`SELECT to_regclass('pgadvisory.leader_resigned')::text`).Scan(&reg))
	require.False(t, reg.Valid, "Down drops the table of resigned terms")
	require.Equal(t, view8, viewdef(), "Down restores version 8's status view")
	_, err = p.UpTo(ctx, 9)
	require.NoError(t, err)
	require.Equal(t, want9, schemaFunctions(t, db, "%"), "and Up brings back the same")
}

// TestLeaseHostileRole: a login role with its own schema of look-alike
// functions and operators first on its search_path gains nothing through
// the lease functions: none of its code runs inside them (the control
// shows its operators do run in its own statements), it cannot read or
// write pgadvisory.lease, cannot renew or release a lease without its
// owner secret, and cannot take a held lease.
func TestLeaseHostileRole(t *testing.T) {
	h := newHostile(t, 1<<30)
	lock := testdb.Key(t)
	owner := newSecret(t)
	term := acquire(t, h.admin, lock, "owner", owner, "1 minute")
	require.NotZero(t, term)

	h.must(t,
		`CREATE TABLE wsch.fired (who text)`,
		`CREATE FUNCTION wsch.spy_bytea(a bytea, b bytea) RETURNS boolean LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO wsch.fired VALUES (current_user); PERFORM wsch.escalate(); RETURN true; END $$`,
		`CREATE FUNCTION wsch.spy_int8(a bigint, b bigint) RETURNS boolean LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO wsch.fired VALUES (current_user); PERFORM wsch.escalate(); RETURN true; END $$`,
		`CREATE FUNCTION wsch.spy_ts(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO wsch.fired VALUES (current_user); PERFORM wsch.escalate(); RETURN true; END $$`,
		`CREATE OPERATOR wsch.= (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = wsch.spy_bytea)`,
		`CREATE OPERATOR wsch.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = wsch.spy_int8)`,
		`CREATE OPERATOR wsch.> (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = wsch.spy_ts)`,
		`CREATE FUNCTION wsch.sha256(bytea) RETURNS bytea LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO wsch.fired VALUES (current_user); PERFORM wsch.escalate(); RETURN $1; END $$`,
		`CREATE FUNCTION wsch.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO wsch.fired VALUES (current_user); PERFORM wsch.escalate(); RETURN 'infinity'; END $$`,
		`GRANT INSERT ON wsch.fired TO PUBLIC`,
		`SET search_path = wsch, pg_catalog, pg_temp`)

	// Control: the role's operators resolve in its own statements.
	h.must(t, `SELECT '\x01'::bytea = '\x02'::bytea`)
	var fired int
	require.NoError(t, h.admin.QueryRow(`SELECT count(*) FROM wsch.fired`).Scan(&fired))
	require.Equal(t, 1, fired, "control: the look-alike operator ran in the role's own statement")

	guess := newSecret(t)
	errs := h.run(t,
		`SELECT * FROM pgadvisory.lease`,
		`UPDATE pgadvisory.lease SET expires_at = now()`,
		fmt.Sprintf(`SELECT pgadvisory.lease_renew(ARRAY[%d]::bigint[], '%s', '1 hour')`, lock, guess),
		fmt.Sprintf(`SELECT pgadvisory.lease_release(%d, '%s')`, lock, guess),
		fmt.Sprintf(`SELECT pgadvisory.lease_acquire(%d, 'thief', '%s', '1 hour', '1s')`, lock, guess))
	require.Len(t, errs, 2, "reading and writing the lease table are refused; the functions run")
	require.Equal(t, "42501", code(errs))

	require.False(t, h.superuser(t), "the role became a superuser")
	require.NoError(t, h.admin.QueryRow(`SELECT count(*) FROM wsch.fired`).Scan(&fired))
	require.Equal(t, 1, fired, "none of the role's code ran inside lockgen's functions")
	require.Equal(t, term, fencing.Published(t, h.admin, lock), "no term published")
	r := readLease(t, h.admin, lock)
	require.Equal(t, "owner", r.holder.String)
	require.Equal(t, term, r.term.Int64)
	require.Equal(t, []int64{lock}, renew(t, h.admin, owner, "1 minute", lock), "the owner still holds it")

	// Once vacant, the role may take a lease (as it may elect a leader),
	// with a term published like any other.
	require.True(t, release(t, h.admin, lock, owner))
	var got sql.NullInt64
	require.NoError(t, h.conn.QueryRowContext(context.Background(),
		fmt.Sprintf(`SELECT pgadvisory.lease_acquire(%d, 'role', '%s', '1 minute', '1s')`, lock, guess)).Scan(&got))
	require.Greater(t, got.Int64, term)
	require.False(t, h.superuser(t))
	require.NoError(t, h.admin.QueryRow(`SELECT count(*) FROM wsch.fired`).Scan(&fired))
	require.Equal(t, 1, fired)
}

// TestLeaseAcquireOnHeldWritesNothing: a try on a held, unexpired lease (a
// campaign's poll) is answered by a read: its transaction gets no
// transaction ID (no row lock, nothing to flush at commit). A try on an
// expired lease takes it.
func TestLeaseAcquireOnHeldWritesNothing(t *testing.T) {
	db := migrated.DB(t)
	ctx := testdb.Context(t)
	lock := testdb.Key(t)
	require.NotZero(t, acquire(t, db, lock, "a", newSecret(t), "1 second"))

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var term sql.NullInt64
	require.NoError(t, tx.QueryRowContext(ctx, leaseAcquireSQL, lock, "b", newSecret(t), "1 second").Scan(&term))
	require.False(t, term.Valid, "held: not taken")
	var xid sql.NullString
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid))
	require.False(t, xid.Valid, "no write: got transaction ID %s", xid.String)
	require.NoError(t, tx.Rollback())

	time.Sleep(1100 * time.Millisecond)
	require.NotZero(t, acquire(t, db, lock, "b", newSecret(t), "1 second"), "expired: taken")
}
