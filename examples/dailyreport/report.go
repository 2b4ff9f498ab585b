package main

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// The report job's timing: how long building the report holds the lock (so
// the other replicas arrive while it runs), when the cron fires again and
// how far apart the replicas' clocks fire then.
const (
	buildTime   = 300 * time.Millisecond
	refireAfter = time.Second
	refireSkew  = 200 * time.Millisecond
)

// outcome is what one replica's report job returned.
type outcome struct {
	replica string
	err     error
}

// fireReport is the cron job of one replica: send the day's report once.
func fireReport(ctx context.Context, r replica, s *store, build time.Duration) error {
	return ReportsDailyEmail.RunOnce(ctx, r.db, s.day, func(tx *sql.Tx) error {
		if err := s.sendReport(ctx, tx, r.name); err != nil {
			return err
		}
		time.Sleep(build)
		return nil
	}, pgadvisory.WithHolder(r.name))
}

// fireAtOnce is act 1: every replica's cron fires at the same moment.
func fireAtOnce(ctx context.Context, replicas []replica, s *store) []outcome {
	out := make([]outcome, len(replicas))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = outcome{r.name, fireReport(ctx, r, s, buildTime)}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// fireAgain is act 2: the cron fires again a second later, the replicas a
// little apart, each after the first run committed.
func fireAgain(ctx context.Context, replicas []replica, s *store) []outcome {
	out := make([]outcome, len(replicas))
	time.Sleep(refireAfter)
	for i, r := range replicas {
		if i > 0 {
			time.Sleep(refireSkew)
		}
		out[i] = outcome{r.name, fireReport(ctx, r, s, 0)}
	}
	return out
}
