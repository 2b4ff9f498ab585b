package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgen/lockgen/internal/sqlcpgx"
	"github.com/lockgen/lockgen/internal/sqlcstd"
)

// defaultPublishTimeout bounds how long publishing waits for writes still in
// flight with the previous token.
const defaultPublishTimeout = 5 * time.Second

// WithFencing issues a fencing token for the call and publishes it durably
// before fn runs (see Fencing in the package documentation). fn reads it
// with [Locker.FencingToken]; writes made through fn's
// transaction carry it automatically. It needs lockgen's schema ([Migrate]).
// It is refused with [ErrInvalidArgument] before anything is sent together
// with [WithShared] (shared holders would each publish over the others) or
// a read-only transaction (publishing writes), and for session locks (see
// checkOptions).
func WithFencing() Option {
	return optionFunc(func(c *callState) { c.mark(optFencing); c.fencing = true })
}

// token is the token of s's fenced lock transaction key, if it is one.
func (s *lockerState) token(key any) (int64, bool) {
	if key == nil {
		return 0, false
	}
	v, ok := s.tokens.Load(key)
	if !ok {
		return 0, false
	}
	return v.(int64), true
}

// runFenced is RunFenced's work on database/sql, without the observers.
// Like the lock transaction's protocol (protocol.go), it owns the
// transaction's context (txContext) so that it knows whether COMMIT was
// sent, and reports COMMIT's outcome as the protocol does.
func runFenced(ctx context.Context, db *sql.DB, token int64, fn func(*sql.Tx) error) (err error) {
	if err := ctx.Err(); err != nil {
		return fencedFailure(ctx, token, err)
	}
	txc := newTxContext(ctx)
	defer txc.release()
	stop := txc.link(ctx)
	tx, err := db.BeginTx(txc.or(ctx), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	stop()
	if err != nil {
		return fencedFailure(ctx, token, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	if err := setFencingTokenSQL(ctx, tx, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return fencedFnFailure(ctx, token, err)
	}
	if ctx.Err() != nil {
		return fencedFailure(ctx, token, errCommitNotSent)
	}
	done = true
	stop = txc.link(ctx)
	err = tx.Commit()
	interrupted := stop()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrTxDone) && !interrupted:
		// Ended by fn, not by its context.
		return fencedEnded(ctx, token)
	}
	return fencedCommitFailure(ctx, token, err, commitSent(err))
}

// runFencedPgx is RunFenced's work on pgx, without the observers; see
// runFenced.
func runFencedPgx(ctx context.Context, pool *pgxpool.Pool, token int64, fn func(pgx.Tx) error) (err error) {
	if err := ctx.Err(); err != nil {
		return fencedFailure(ctx, token, err)
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fencedFailure(ctx, token, err)
	}
	done := false
	defer func() {
		if !done {
			rctx, cancel := cleanupContext(ctx)
			_ = tx.Rollback(rctx)
			cancel()
		}
	}()
	if err := setFencingTokenPgx(ctx, tx, token); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return fencedFnFailure(ctx, token, err)
	}
	if ctx.Err() != nil {
		return fencedFailure(ctx, token, errCommitNotSent)
	}
	if c := tx.Conn(); c != nil && c.IsClosed() {
		// fn's last statement broke the connection, and fn returned nil.
		return fencedCommitFailure(ctx, token, &errNotSent{pgconn.ErrConnClosed}, false)
	}
	done = true
	txc := newTxContext(ctx)
	defer txc.release()
	stop := txc.link(ctx)
	err = tx.Commit(txc.or(ctx))
	stop()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrTxClosed):
		return fencedEnded(ctx, token)
	}
	return fencedCommitFailure(ctx, token, err, commitSent(err))
}

// fencedCommitFailure is a fenced write's error for a failed COMMIT, which
// says what the lock transaction's would (see commitFailure): nothing
// committed when COMMIT was not sent or the server answered with an error,
// else ErrCommitUnknown.
func fencedCommitFailure(ctx context.Context, token int64, err error, sent bool) error {
	var kind error
	switch {
	case !sent && ctx.Err() != nil:
		err = errCommitNotSent
	case !sent:
		kind = ErrConnLost
	default:
		kind = commitAnswer(err)
	}
	return &Error{Op: OpFencedWrite, Token: token, SQLState: SQLState(err), Kind: kind, Err: withContext(ctx, err)}
}

// fencedEnded is a fenced write's error when fn ended the transaction
// itself.
func fencedEnded(ctx context.Context, token int64) error {
	return &Error{Op: OpFencedWrite, Token: token, Kind: ErrTxEnded, Err: withContext(ctx, nil)}
}

// fencedFailure is the error of a failed step of a fenced write (not fn's
// own error): its kind is what classify makes of err, and it wraps ctx.Err()
// when ctx is done.
func fencedFailure(ctx context.Context, token int64, err error) error {
	return &Error{Op: "fenced write", Token: token, SQLState: SQLState(err), Kind: classify(err), Err: withContext(ctx, err)}
}

// fencedFnFailure is the error for fn's error in RunFenced: fn's error
// itself when it has no dedicated kind and ctx is not done, else a fenced
// write's *Error that unwraps to it.
func fencedFnFailure(ctx context.Context, token int64, err error) error {
	if classify(err) == nil && ctx.Err() == nil {
		return err
	}
	return fencedFailure(ctx, token, err)
}

// fencedInvalid is the error of a fenced write refused for a nil argument.
func fencedInvalid(token int64, what string) error {
	return &Error{Op: "fenced write", Token: token, Kind: ErrInvalidArgument, Err: errors.New(what)}
}

// The fenced acquisition (migrations/00005_fencing_acquire.sql) is one
// message on the lock's own connection, after BEGIN ISOLATION LEVEL READ
// COMMITTED:
//
//	SELECT granted, standby, token FROM pgadvisory.fence_acquire(ids, wait, lock_timeout, publish_timeout);
//	COMMIT AND CHAIN;
//	SELECT pgadvisory.fence_handover();
//
// fence_acquire takes session-level locks, draws the token, publishes it and
// forces the COMMIT to be durable; COMMIT AND CHAIN commits the publish and
// begins fn's transaction in the same command; fence_handover turns the
// session-level locks into transaction-level ones (never letting go of the
// key) and sets the transaction's token and pgadvisory.granted. The pgx
// front door sends BEGIN (and a waiting call's statement_timeout prelude)
// with it in one batch, and a run-once claim after it; database/sql sends
// it in the round trip after BEGIN. A fenced call costs the round trips of
// an unfenced one. Settings that the prelude or
// fence_acquire make for their transaction end with COMMIT AND CHAIN: fn's
// transaction runs under the session's own.
//
// On any error from the message the connection's state is unknown (session
// locks may be held after a failed COMMIT or hand-over), so the drivers
// close the connection instead of returning it to the pool: the backend
// ends, and its locks with it.
const (
	fencedAcquireSQL = "SELECT granted, standby, token FROM pgadvisory.fence_acquire($1::text::bigint[], $2, $3, $4)"
	fencedChainSQL   = "COMMIT AND CHAIN"
	fencedHandover   = "SELECT pgadvisory.fence_handover()"
)

// queueFenced queues the fenced acquisition st on b, after BEGIN: the
// acquire statement, whose columns go to res (and st.extra), COMMIT AND
// CHAIN, and the hand-over, which sets *locked (when not nil) once it ran.
func (st lockStatement) queueFenced(b *pgx.Batch, res *lockResult, locked *bool) {
	b.Queue(st.sql, st.args...).QueryRow(func(row pgx.Row) error {
		var token *int64
		err := row.Scan(append([]any{&res.granted, &res.standby, &token}, st.extra...)...)
		if token != nil {
			res.token = *token
		}
		return err
	})
	b.Queue(fencedChainSQL)
	handover, args := fencedHandover, []any(nil)
	if st.handover != "" {
		handover, args = st.handover, st.handoverArgs
	}
	b.Queue(handover, args...).QueryRow(func(row pgx.Row) error {
		var token *int64
		err := row.Scan(append([]any{&token}, st.handoverExtra...)...)
		if locked != nil {
			*locked = err == nil
		}
		return err
	})
}

// fencedStatement is the fenced acquisition of c's locks: the acquire call
// with its arguments. A waiting call sets lock_timeout as an unfenced one
// does (0 for WithWait(0)).
func (c *callState) fencedStatement() lockStatement {
	var lockTimeout *string
	if c.wait {
		s := c.lockTimeoutArg()
		lockTimeout = &s
	}
	return lockStatement{
		sql:    fencedAcquireSQL,
		args:   []any{arrayLiteral(c.ids), c.wait, lockTimeout, lockTimeoutSetting(defaultPublishTimeout)},
		fenced: true,
	}
}

// fencedMessage is the whole fenced acquisition of st (from fencedStatement)
// with its arguments inlined, for database/sql drivers other than pgx's,
// which send it as one simple-protocol query: the IDs are integers, the
// timeouts this package's own "NNNms".
func fencedMessage(st lockStatement) string {
	if st.handover != "" {
		return fencedQueueMessage(st)
	}
	lockTimeout := "NULL"
	if t := st.args[2].(*string); t != nil {
		lockTimeout = "'" + *t + "'"
	}
	return "SELECT granted, standby, token FROM pgadvisory.fence_acquire('" + st.args[0].(string) + "'::bigint[], " +
		strconv.FormatBool(st.args[1].(bool)) + ", " + lockTimeout + ", '" + st.args[3].(string) + "');\n" +
		fencedChainSQL + ";\n" + fencedHandover
}

// fencedOp is the step a failed fenced acquisition reports: "publish" when
// the publish itself failed (the sequence is behind, LF004, or writers of
// the previous token outlived the publish timeout), else "lock".
func fencedOp(err error) Op {
	var pgErr *pgconn.PgError
	switch {
	case !errors.As(err, &pgErr):
		return "lock"
	case pgErr.Code == "LF004", pgErr.Code == "55P03" && strings.HasPrefix(pgErr.Message, "pgadvisory: publishing"):
		return "publish"
	}
	return "lock"
}

// fencedWrite is the call of a fenced write under l: its name, its ID and
// the observer declared with it; its other declared options concern its
// lock calls, not the write. s is the state of the pool's package Locker.
func (l Lock) fencedWrite(s *lockerState) (*callState, error) {
	declared, err := newConfig(s, l.ID, l.named(nil))
	if err != nil {
		return nil, err
	}
	return &callState{ids: []int64{l.ID}, name: l.Name, observer: declared.observer, locker: s}, nil
}

// setFencingTokenSQL makes tx carry token (database/sql).
func setFencingTokenSQL(ctx context.Context, tx *sql.Tx, token int64) error {
	if err := sqlcstd.New().SetFencingToken(ctx, tx, token); err != nil {
		return fencedFailure(ctx, token, err)
	}
	return nil
}

// setFencingTokenPgx makes tx carry token (pgx).
func setFencingTokenPgx(ctx context.Context, tx pgx.Tx, token int64) error {
	if err := sqlcpgx.New().SetFencingToken(ctx, tx, token); err != nil {
		return fencedFailure(ctx, token, err)
	}
	return nil
}
