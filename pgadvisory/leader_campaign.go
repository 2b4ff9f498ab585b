package pgadvisory

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Campaign keeps campaigning for the leadership lockID until ctx ends: it
// calls [Lead] with fn and opts, and when a leadership ends, or an attempt
// fails in a way that a retry can cure, it campaigns again.
//
//   - fn returns nil: the leader resigned; Campaign queues again at once,
//     behind the candidates already waiting, who are elected first.
//   - the leadership was lost ([ErrLockLost]), or the attempt failed
//     (connection lost or refused, a hot standby during a failover, a lock
//     or publish timeout): Campaign waits a backoff, from 100ms doubling to
//     5s, with jitter, and campaigns again. A leadership that ran resets it.
//   - fn returns an error while still the leader, or the call is refused
//     for good (a bad option, a transaction pooler, lockgen's schema
//     missing): Campaign returns that error.
//
// Campaign returns nil once ctx ends (the end of a campaign is the
// caller's decision).
func Campaign(ctx context.Context, db *sql.DB, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	return campaign(ctx, fn, func(ctx context.Context, fn func(context.Context, int64) error) error {
		return Lead(ctx, db, lockID, fn, opts...)
	})
}

// CampaignPgx is [Campaign] for a pgx pool.
func CampaignPgx(ctx context.Context, pool *pgxpool.Pool, lockID int64, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	return campaign(ctx, fn, func(ctx context.Context, fn func(context.Context, int64) error) error {
		return LeadPgx(ctx, pool, lockID, fn, opts...)
	})
}

// Campaign is [Campaign] on l.
func (l Lock) Campaign(ctx context.Context, db *sql.DB, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	return Campaign(ctx, db, l.ID, fn, l.named(opts)...)
}

// CampaignPgx is [CampaignPgx] on l.
func (l Lock) CampaignPgx(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, term int64) error, opts ...Option) error {
	return CampaignPgx(ctx, pool, l.ID, fn, l.named(opts)...)
}

// Campaign's backoff between failed attempts.
const (
	campaignMinBackoff = 100 * time.Millisecond
	campaignMaxBackoff = 5 * time.Second
)

// campaign is Campaign's loop around lead (Lead or LeadPgx).
func campaign(ctx context.Context, fn func(context.Context, int64) error, lead func(context.Context, func(context.Context, int64) error) error) error {
	if fn == nil {
		// Lead refuses it too; refuse before the first attempt all the same.
		return lead(ctx, nil)
	}
	backoff := campaignMinBackoff
	for ctx.Err() == nil {
		var led bool
		var fnErr error
		err := lead(ctx, func(lctx context.Context, term int64) error {
			led = true
			fnErr = fn(lctx, term)
			return fnErr
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			backoff = campaignMinBackoff
			continue // resigned: queue again
		case permanent(err):
			return err
		case led && fnErr != nil && !errors.Is(err, ErrLockLost):
			return err
		}
		if led {
			backoff = campaignMinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, campaignMaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	return nil
}

// permanent reports a refusal that campaigning again cannot cure.
func permanent(err error) bool {
	for _, kind := range []error{ErrInvalidArgument, ErrIsolationLevel, ErrTransactionPooler, ErrStatementPooler, ErrNotMigrated} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}
