package pgadvisory_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/migrated"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestFencedLosersKeepThePoolsConnections: a call that finds its lock held
// returns ErrLocked after one round trip and rolls its transaction back
// without making the caller wait. Over database/sql with pgx's driver that
// ROLLBACK runs under the context the transaction began with; the call
// used to end that context as it returned, so the ROLLBACK was at times
// interrupted, pgx closed the connection, and database/sql handed the
// closed connections to the next calls: with 6 goroutines making 100
// losing calls each on a pool of 4, a fenced call failed with "driver: bad
// connection" within the first runs. Every call must get ErrLocked, and the
// lock is taken once it is free. Each front door, fenced and not.
func TestFencedLosersKeepThePoolsConnections(t *testing.T) {
	admin := migrated.DB(t)
	for _, fenced := range []bool{true, false} {
		t.Run(fmt.Sprintf("fenced=%v", fenced), func(t *testing.T) {
			frontdoor.ForEach(t, func(t *testing.T, door frontdoor.Door) {
				ctx := testdb.Context(t)
				key := testdb.Key(t)
				var opts []pgadvisory.Option
				if fenced {
					opts = append(opts, pgadvisory.WithFencing())
				}
				release := holdSession(t, admin, key)
				const goroutines, calls = 6, 100
				errs := make(chan error, goroutines)
				for range goroutines {
					go func() {
						for i := range calls {
							err := door.RunExclusive(ctx, key, func(frontdoor.Tx) error { return errors.New("fn ran") }, opts...)
							if !errors.Is(err, pgadvisory.ErrLocked) {
								errs <- fmt.Errorf("call %d: %w", i, err)
								return
							}
						}
						errs <- nil
					}()
				}
				for range goroutines {
					require.NoError(t, frontdoor.Await(t, errs, "a losing goroutine"))
				}
				release()
				ran := false
				require.NoError(t, door.RunExclusive(ctx, key, func(frontdoor.Tx) error { ran = true; return nil }, opts...))
				require.True(t, ran)
			}, frontdoor.MaxConns(4))
		})
	}
}
