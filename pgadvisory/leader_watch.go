package pgadvisory

import (
	"context"
	"errors"
	"time"
)

// WatchLeader calls fn with the leader of lock now (the zero [Leader] when
// the lock has none), and then again on every change it sees: a new term,
// or a vacancy as the zero Leader. It serves nodes that never lead
// (dashboards, routers that must reach the leader) and works for both
// kinds of leadership, session-lock leaders and leases ([WithLease]).
//
// It reads the leader with [Locker.CurrentLeader], on a connection
// borrowed from the pool for each read, once per check interval of the
// Locker ([WithDefaultCheckInterval], 1s by default), so it never reports
// a leader that CurrentLeader would not, and holds no connection between
// reads. Changes that come and go within one interval are seen as where
// they ended: fn is called when the term differs from the one it was
// last called with, not necessarily for every term the lock had.
//
// It returns nil once ctx ends, fn's error as soon as fn returns one, and
// at once an error of CurrentLeader that waiting cannot cure (the Locker
// closed, lockgen's schema missing, a nil pool); other read failures (a
// lost connection) are retried at the next interval, without calling fn.
func (l *Locker[TTx]) WatchLeader(ctx context.Context, lock Lock, fn func(Leader) error) error {
	if fn == nil {
		return &Error{Op: OpCurrentLeader, LockIDs: []int64{lock.ID}, Name: lock.Name, Kind: ErrInvalidArgument, Err: errors.New("WatchLeader: nil fn")}
	}
	interval := l.s.interval
	var last Leader
	first := true
	for {
		cur, err := l.CurrentLeader(ctx, lock)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNoLeader):
			cur, err = Leader{}, nil
		case errors.Is(err, ErrClosed), errors.Is(err, ErrNotMigrated), errors.Is(err, ErrInvalidArgument):
			return err
		}
		if err == nil && (first || cur.Term != last.Term) {
			first = false
			last = cur
			if err := fn(cur); err != nil {
				return err
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
