package frontdoor

import (
	"context"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Lead is Locker.Lead with lockID as the lock.
func (d Door) Lead(ctx context.Context, lockID int64, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error {
	return d.LeadLock(ctx, pgadvisory.ID(lockID), fn, opts...)
}

// LeadLock is Locker.Lead.
func (d Door) LeadLock(ctx context.Context, l pgadvisory.Lock, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return d.pgxL.Lead(ctx, l, fn, opts...)
	}
	return d.sqlL.Lead(ctx, l, fn, opts...)
}

// Campaign is Locker.Campaign with lockID as the lock.
func (d Door) Campaign(ctx context.Context, lockID int64, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return d.pgxL.Campaign(ctx, pgadvisory.ID(lockID), fn, opts...)
	}
	return d.sqlL.Campaign(ctx, pgadvisory.ID(lockID), fn, opts...)
}

// CurrentLeader is Locker.CurrentLeader with lockID as the lock.
func (d Door) CurrentLeader(ctx context.Context, lockID int64) (pgadvisory.Leader, error) {
	if d.Driver == Pgx {
		return d.pgxL.CurrentLeader(ctx, pgadvisory.ID(lockID))
	}
	return d.sqlL.CurrentLeader(ctx, pgadvisory.ID(lockID))
}
