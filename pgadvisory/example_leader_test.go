package pgadvisory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Examples of leader election: Lead, LeadPgx, the Lock methods, Campaign
// and CurrentLeader. The shared example helpers are in example_test.go and
// example_fencing_test.go.

func ExampleLead() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("lead")
	invoices, drop := exampleFencedTable(ctx, db, "lead", lockID)
	defer drop()

	err := pgadvisory.Lead(ctx, db, lockID, func(ctx context.Context, term int64) error {
		// Only the leader runs here; ctx is canceled if leadership is lost.
		// The term is the lock's fencing token: writes carry it.
		return pgadvisory.RunFenced(ctx, db, term, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+invoices+" (id, total) VALUES (1, 100)")
			return err
		})
	}, pgadvisory.WithHolder("scheduler-a"))
	fmt.Println("led:", err == nil)

	// A later leader has a higher term; the first term is stale now.
	var stale int64
	_ = db.QueryRowContext(ctx, "SELECT term FROM pgadvisory.leader WHERE lock_id = $1", lockID).Scan(&stale)
	_ = pgadvisory.Lead(ctx, db, lockID, func(context.Context, int64) error { return nil })
	err = pgadvisory.RunFenced(ctx, db, stale, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE "+invoices+" SET total = 0")
		return err
	})
	fmt.Println("deposed leader's write rejected:", errors.Is(err, pgadvisory.ErrStaleToken))
	// Output:
	// led: true
	// deposed leader's write rejected: true
}

func ExampleLeadPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	exampleMigrate(ctx, stdlib.OpenDBFromPool(pool))
	lockID := exampleLockID("lead_pgx")

	err := pgadvisory.LeadPgx(ctx, pool, lockID, func(ctx context.Context, term int64) error {
		for round := 1; round <= 2; round++ {
			select {
			case <-ctx.Done():
				return context.Cause(ctx) // wraps pgadvisory.ErrLockLost: stop leading
			default:
			}
			fmt.Println("leading round", round, "with a term:", term > 0)
		}
		return nil
	}, pgadvisory.WithCheckInterval(500*time.Millisecond))
	fmt.Println("err:", err)
	// Output:
	// leading round 1 with a term: true
	// leading round 2 with a term: true
	// err: <nil>
}

func ExampleLock_Lead() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	relay := pgadvisory.Lock{Name: "outbox.relay", ID: exampleLockID("lock_lead")}

	err := relay.Lead(ctx, db, func(ctx context.Context, term int64) error {
		// Another replica waits in the queue; bounded here, it gives up.
		err := relay.Lead(ctx, db, func(context.Context, int64) error { return nil }, pgadvisory.WithWait(50*time.Millisecond))
		fmt.Println("second replica timed out:", errors.Is(err, pgadvisory.ErrLockTimeout))
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// second replica timed out: true
	// err: <nil>
}

func ExampleLock_LeadPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	exampleMigrate(ctx, stdlib.OpenDBFromPool(pool))
	relay := pgadvisory.Lock{Name: "outbox.relay", ID: exampleLockID("lock_lead_pgx")}

	err := relay.LeadPgx(ctx, pool, func(ctx context.Context, term int64) error {
		leader, err := relay.CurrentLeaderPgx(ctx, pool)
		fmt.Println("current leader:", leader.Holder, leader.Term == term, err)
		return nil
	}, pgadvisory.WithHolder("relay-1"))
	fmt.Println("err:", err)
	// Output:
	// current leader: relay-1 true <nil>
	// err: <nil>
}

func ExampleCampaign() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("campaign")

	// Campaign again after each leadership ends, until ctx ends. Here the
	// leader resigns twice (returns nil), and stops the campaign the third
	// time by canceling ctx.
	terms := 0
	err := pgadvisory.Campaign(ctx, db, lockID, func(ctx context.Context, term int64) error {
		terms++
		fmt.Println("elected, leadership", terms)
		if terms == 3 {
			cancel()
		}
		return nil
	})
	fmt.Println("campaign ended:", err)
	// Output:
	// elected, leadership 1
	// elected, leadership 2
	// elected, leadership 3
	// campaign ended: <nil>
}

func ExampleCampaignPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	exampleMigrate(ctx, stdlib.OpenDBFromPool(pool))
	lockID := exampleLockID("campaign_pgx")

	// fn's error ends the campaign: the caller decides what to do.
	errFatal := errors.New("configuration missing")
	err := pgadvisory.CampaignPgx(ctx, pool, lockID, func(ctx context.Context, term int64) error {
		return errFatal
	})
	fmt.Println("campaign ended:", errors.Is(err, errFatal))
	// Output:
	// campaign ended: true
}

func ExampleCurrentLeader() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	lockID := exampleLockID("current_leader")

	_, err := pgadvisory.CurrentLeader(ctx, db, lockID)
	fmt.Println("before:", errors.Is(err, pgadvisory.ErrNoLeader))
	_ = pgadvisory.Lead(ctx, db, lockID, func(ctx context.Context, term int64) error {
		leader, err := pgadvisory.CurrentLeader(ctx, db, lockID)
		fmt.Println("during:", leader.Holder, leader.Term == term, err)
		return nil
	}, pgadvisory.WithHolder("scheduler-a"))
	_, err = pgadvisory.CurrentLeader(ctx, db, lockID)
	fmt.Println("after resigning:", errors.Is(err, pgadvisory.ErrNoLeader))
	// Output:
	// before: true
	// during: scheduler-a true <nil>
	// after resigning: true
}

func ExampleCurrentLeaderPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	exampleMigrate(ctx, stdlib.OpenDBFromPool(pool))
	lockID := exampleLockID("current_leader_pgx")

	_ = pgadvisory.LeadPgx(ctx, pool, lockID, func(ctx context.Context, term int64) error {
		leader, err := pgadvisory.CurrentLeaderPgx(ctx, pool, lockID)
		fmt.Println("leader:", leader.Holder, "since a moment ago:", time.Since(leader.Since) < time.Minute, err)
		return nil
	}, pgadvisory.WithHolder("relay-2"))
	// Output:
	// leader: relay-2 since a moment ago: true <nil>
}

func ExampleLock_CurrentLeader() {
	ctx := context.Background()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	scheduler := pgadvisory.Lock{Name: "jobs.scheduler", ID: exampleLockID("lock_current_leader")}

	_, err := scheduler.CurrentLeader(ctx, db)
	fmt.Println("no leader:", errors.Is(err, pgadvisory.ErrNoLeader))
	var e *pgadvisory.Error
	if errors.As(err, &e) {
		fmt.Println("op:", e.Op, "lock:", e.Name)
	}
	// Output:
	// no leader: true
	// op: current leader lock: jobs.scheduler
}

func ExampleLock_Campaign() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := exampleDB()
	defer db.Close()
	exampleMigrate(ctx, db)
	scheduler := pgadvisory.Lock{Name: "jobs.scheduler", ID: exampleLockID("lock_campaign")}

	err := scheduler.Campaign(ctx, db, func(ctx context.Context, term int64) error {
		fmt.Println("elected")
		cancel() // the replica shuts down
		<-ctx.Done()
		return nil
	})
	fmt.Println("campaign ended:", err)
	// Output:
	// elected
	// campaign ended: <nil>
}

func ExampleLock_CampaignPgx() {
	pool := examplePool()
	defer pool.Close()
	exampleMigrate(context.Background(), stdlib.OpenDBFromPool(pool))
	scheduler := pgadvisory.Lock{Name: "jobs.scheduler", ID: exampleLockID("lock_campaign_pgx")}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leaderships := 0
	err := scheduler.CampaignPgx(ctx, pool, func(ctx context.Context, term int64) error {
		leaderships++
		cancel()     // the replica shuts down
		<-ctx.Done() // leads until the campaign's ctx ends
		return nil
	}, pgadvisory.WithHolder("scheduler-b"))
	fmt.Println("leaderships:", leaderships, "err:", err)
	// Output:
	// leaderships: 1 err: <nil>
}

func ExampleLock_CurrentLeaderPgx() {
	ctx := context.Background()
	pool := examplePool()
	defer pool.Close()
	exampleMigrate(ctx, stdlib.OpenDBFromPool(pool))
	consumer := pgadvisory.Lock{Name: "tenants.consumer", ID: exampleLockID("lock_current_leader_pgx")}

	_ = consumer.LeadPgx(ctx, pool, func(ctx context.Context, term int64) error {
		leader, err := consumer.CurrentLeaderPgx(ctx, pool)
		fmt.Println("leader:", leader.Holder, "term matches:", leader.Term == term, err)
		return nil
	}, pgadvisory.WithHolder("consumer-7"))
	_, err := consumer.CurrentLeaderPgx(ctx, pool)
	fmt.Println("after:", errors.Is(err, pgadvisory.ErrNoLeader))
	// Output:
	// leader: consumer-7 term matches: true <nil>
	// after: true
}
