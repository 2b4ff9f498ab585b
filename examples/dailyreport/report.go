package main

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/lockgen/lockgen/pgadvisory"
)

// The report job's timing: how long building the report holds the lock (so
// the other replicas arrive while it runs; below replica A's idleTimeout),
// when the cron fires again and how far apart the replicas' clocks fire
// then: seconds apart, yet the whole example runs in a few seconds.
const (
	buildTime   = 300 * time.Millisecond
	refireAfter = time.Second
	refireSkew  = time.Second
)

// refireAt is when replica i fires again, counted from the end of act 1.
func refireAt(i int) time.Duration {
	return refireAfter + time.Duration(i)*refireSkew
}

// outcome is what one replica's report job returned.
type outcome struct {
	replica string
	err     error
}

// fireReport is the cron job of one replica: send the day's report once.
func fireReport(ctx context.Context, r replica, s *store, build time.Duration) error {
	return r.locker.RunOnce(ctx, ReportsDailyEmail, s.day, func(tx *sql.Tx) error {
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

// fireAgain is act 2: the cron fires again seconds apart, replica i at
// refireAt(i) (on a schedule, so the jobs' own durations do not add up),
// each after the first run committed.
func fireAgain(ctx context.Context, replicas []replica, s *store) []outcome {
	out := make([]outcome, len(replicas))
	start := time.Now()
	for i, r := range replicas {
		time.Sleep(time.Until(start.Add(refireAt(i))))
		out[i] = outcome{r.name, fireReport(ctx, r, s, 0)}
	}
	return out
}
