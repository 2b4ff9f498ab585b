package pgadvisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/internal/testkit/witness"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestCampaign: Campaign campaigns again after a lost leadership (its
// backend terminated) and after a resign, each time with a higher term;
// fn's error ends the campaign with that error, and so does nothing else
// but ctx, which ends it with nil.
func TestCampaign(t *testing.T) {
	admin := migrated.DB(t)
	w := witness.Of(admin)
	frontdoor.ForEach(t, func(t *testing.T, d frontdoor.Door) {
		ctx := testdb.Context(t)
		key := testdb.Key(t)
		stop := errors.New("stop")
		var terms []int64
		err := d.Campaign(ctx, pgadvisory.ID(key), func(lctx context.Context, term int64) error {
			terms = append(terms, term)
			switch len(terms) {
			case 1: // lost: the backend is terminated
				var ok bool
				require.NoError(t, admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", w.Holder(t, key).PID).Scan(&ok))
				<-lctx.Done()
				return context.Cause(lctx)
			case 2: // resigns
				return nil
			}
			return stop
		}, pgadvisory.WithCheckInterval(20*time.Millisecond))
		require.ErrorIs(t, err, stop)
		require.Len(t, terms, 3)
		require.Less(t, terms[0], terms[1])
		require.Less(t, terms[1], terms[2])
		require.Empty(t, w.Holds(t, key))

		// ctx ends the campaign (here while another candidate leads) with nil.
		require.NoError(t, d.Lead(ctx, pgadvisory.ID(key), func(ctx context.Context, term int64) error {
			cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			return d.Campaign(cctx, pgadvisory.ID(key), notCalledLead(t))
		}))
	})
}
