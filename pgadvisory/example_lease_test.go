package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// A leadership that works through any pooler (PgBouncer in transaction
// mode, Supavisor, RDS Proxy): the lease is a row renewed every ttl/3, and
// no connection is held while fn runs. The term is the lock's fencing
// token, as for a session-lock leader.
func ExampleWithLease() {
	ctx := context.Background()
	db := exampleDB() // through a transaction pooler, this works the same
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("lease")
	invoices, drop := exampleFencedTable(ctx, db, "lease", lockID)
	defer drop()

	l, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder("scheduler-a"))
	if err != nil {
		panic(err)
	}
	lock := pgadvisory.ID(lockID)
	err = l.Lead(ctx, lock, func(ctx context.Context, term int64) error {
		// ctx is canceled (cause: ErrLockLost) before this holder's own
		// deadline passes without a renewal: stop leading then.
		other := l.Lead(ctx, lock, func(context.Context, int64) error { return nil }, pgadvisory.WithLease(10*time.Second))
		fmt.Println("held:", errors.Is(other, pgadvisory.ErrLocked))
		return l.RunFenced(ctx, term, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES (1, 100)")
			return err
		})
	}, pgadvisory.WithLease(10*time.Second))
	fmt.Println("led:", err == nil)
	// Output:
	// held: true
	// led: true
}

// A router that must reach the leader follows it with WatchLeader: fn is
// called at once with the leader now (the zero Leader: none), then on
// every change it sees, until ctx ends or fn returns an error.
func ExampleLocker_WatchLeader() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lock := pgadvisory.ID(exampleLockID("watch"))
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		panic(err)
	}
	errSeen := errors.New("seen")
	err = l.WatchLeader(ctx, lock, func(leader pgadvisory.Leader) error {
		if leader.Term == 0 {
			fmt.Println("no leader")
		} else {
			fmt.Println("leader:", leader.Holder)
		}
		return errSeen // a router would update its route and return nil
	})
	fmt.Println(errors.Is(err, errSeen))
	// Output:
	// no leader
	// true
}

// Campaign with a lease keeps leading through any pooler: while another
// replica holds the lease it polls for it (ttl/10, holding no connection),
// and after a resign it campaigns again. Each term is greater than the
// last and is the lock's fencing token.
func ExampleLocker_Campaign_lease() {
	ctx := context.Background()
	db := exampleDB() // through a transaction pooler, this works the same
	defer db.Close()
	exampleMigrate(ctx, db)
	lock := pgadvisory.ID(exampleLockID("campaign-lease"))
	l, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithDefaultHolder("relay-a"))
	if err != nil {
		panic(err)
	}
	errDone := errors.New("done")
	var terms []int64
	err = l.Campaign(ctx, lock, func(ctx context.Context, term int64) error {
		terms = append(terms, term)
		if len(terms) < 2 {
			return nil // resign: campaign again
		}
		return errDone // fn's error ends the campaign
	}, pgadvisory.WithLease(5*time.Second))
	fmt.Println(errors.Is(err, errDone), len(terms), terms[1] > terms[0])
	// Output: true 2 true
}

// RunSession with a lease holds a lock for long work without a session of
// its own, so it works through a transaction pooler. ctx is canceled
// (cause: ErrLockLost) before the holder's own deadline passes without a
// renewal; the lease is released when fn returns.
func ExampleLocker_RunSession_lease() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lock := pgadvisory.ID(exampleLockID("session-lease"))
	l, err := pgadvisory.New(pgadvisory.Stdlib(db))
	if err != nil {
		panic(err)
	}
	err = l.RunSession(ctx, lock, func(ctx context.Context) error {
		other := l.RunSession(ctx, lock, func(context.Context) error { return nil }, pgadvisory.WithLease(time.Minute))
		fmt.Println("held elsewhere:", errors.Is(other, pgadvisory.ErrLocked))
		return ctx.Err() // long work, checking ctx
	}, pgadvisory.WithLease(time.Minute))
	fmt.Println("done:", err == nil)
	// Output:
	// held elsewhere: true
	// done: true
}
