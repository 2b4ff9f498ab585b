package pgadvisory_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lockgen/lockgen/pgadvisory"
)

// outcomePrinter is an Observer that prints how each call ended. A real one
// starts a span in StartCall and records metrics in EndCall (see the module
// github.com/lockgen/lockgen/otel).
type outcomePrinter struct{}

func (outcomePrinter) StartCall(ctx context.Context, call pgadvisory.Call) (context.Context, pgadvisory.CallObserver) {
	return ctx, printedCall{call}
}

type printedCall struct{ call pgadvisory.Call }

func (printedCall) Event(pgadvisory.Event) {}

func (p printedCall) EndCall(end pgadvisory.CallEnd) {
	fmt.Printf("%s %s: %s\n", p.call.Kind, p.call.Name, end.Outcome)
}

func ExampleSetObserverFor() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	report := pgadvisory.Lock{Name: "reports.daily_email", ID: exampleLockID("set_observer_for")}
	// What cmd/lockgen generates next to the lock values.
	declared := []pgadvisory.Declared{{Name: report.Name, ID: report.ID}}

	// Once, at start-up: every call on these locks is observed.
	pgadvisory.SetObserverFor(declared, outcomePrinter{})
	defer pgadvisory.SetObserverFor(declared, nil)

	_ = report.RunExclusive(ctx, db, func(*sql.Tx) error {
		return report.RunExclusive(ctx, db, func(*sql.Tx) error { return nil })
	})
	// Output:
	// run_exclusive reports.daily_email: locked
	// run_exclusive reports.daily_email: acquired
}

func ExampleWithLockSetObserver() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	report := pgadvisory.Lock{Name: "reports.daily_summary", ID: exampleLockID("with_lock_set_observer")}
	// What cmd/lockgen generates next to the lock values.
	declared := []pgadvisory.Declared{{Name: report.Name, ID: report.ID}}

	// Once, at start-up: every call of the Locker on these locks is observed.
	locker, err := pgadvisory.New(pgadvisory.Stdlib(db), pgadvisory.WithLockSetObserver(declared, outcomePrinter{}))
	if err != nil {
		panic(err)
	}
	_ = locker.RunExclusive(ctx, report, func(*sql.Tx) error {
		return locker.RunExclusive(ctx, report, func(*sql.Tx) error { return nil })
	})
	_ = locker.RunExclusive(ctx, pgadvisory.ID(report.ID), func(*sql.Tx) error { return nil }) // a raw ID: not in the set
	// Output:
	// run_exclusive reports.daily_summary: locked
	// run_exclusive reports.daily_summary: acquired
}

func ExampleWithCallObserver() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	report := pgadvisory.Lock{Name: "reports.weekly", ID: exampleLockID("with_call_observer")}

	err := report.RunSession(ctx, db, func(context.Context) error { return nil },
		pgadvisory.WithCallObserver(outcomePrinter{}))
	fmt.Println("err:", err)
	// Output:
	// run_session reports.weekly: acquired
	// err: <nil>
}

func ExampleSetObserver() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	lockID := exampleLockID("set_observer")

	// Once, at start-up: every call of the process is observed, with no
	// option at the call sites.
	pgadvisory.SetObserver(outcomePrinter{})
	defer pgadvisory.SetObserver(nil)

	_ = pgadvisory.RunExclusive(ctx, db, lockID, func(*sql.Tx) error { return nil })
	// Output:
	// run_exclusive : acquired
}
