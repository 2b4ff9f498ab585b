package frontdoor

import (
	"context"

	"github.com/lockgen/lockgen/pgadvisory"
)

// Lead is pgadvisory.Lead or LeadPgx.
func (d Door) Lead(ctx context.Context, lockID int64, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return pgadvisory.LeadPgx(ctx, d.pool, lockID, fn, opts...)
	}
	return pgadvisory.Lead(ctx, d.db, lockID, fn, opts...)
}

// LeadLock is l.Lead or l.LeadPgx.
func (d Door) LeadLock(ctx context.Context, l pgadvisory.Lock, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return l.LeadPgx(ctx, d.pool, fn, opts...)
	}
	return l.Lead(ctx, d.db, fn, opts...)
}

// Campaign is pgadvisory.Campaign or CampaignPgx.
func (d Door) Campaign(ctx context.Context, lockID int64, fn func(ctx context.Context, term int64) error, opts ...pgadvisory.Option) error {
	if d.Driver == Pgx {
		return pgadvisory.CampaignPgx(ctx, d.pool, lockID, fn, opts...)
	}
	return pgadvisory.Campaign(ctx, d.db, lockID, fn, opts...)
}

// CurrentLeader is pgadvisory.CurrentLeader or CurrentLeaderPgx.
func (d Door) CurrentLeader(ctx context.Context, lockID int64) (pgadvisory.Leader, error) {
	if d.Driver == Pgx {
		return pgadvisory.CurrentLeaderPgx(ctx, d.pool, lockID)
	}
	return pgadvisory.CurrentLeader(ctx, d.db, lockID)
}
