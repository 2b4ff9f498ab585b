package pgadvisory_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/testkit/frontdoor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
	"github.com/lockgen/lockgen/pgadvisory"
)

// TestScenarioDailyReport is the design source's opening scenario: three
// instances of a service, each with its own connection pool, fire the daily
// report at the same moment. Inside the lock each sends (inserts) the report
// unless it exists for the day. Exactly one report row per day; the other two
// instances get ErrLocked without running fn. The winner keeps the lock until
// both others have returned (sending takes a while), so the outcome is
// deterministic: were the lock broken, a second winner would time out waiting
// for its losers and fail the round.
func TestScenarioDailyReport(t *testing.T) {
	dbDoor, poolDoor := frontdoor.SQL, frontdoor.Pgx
	mixes := []struct {
		name    string
		drivers [3]frontdoor.Driver
	}{
		{string(dbDoor), [3]frontdoor.Driver{dbDoor, dbDoor, dbDoor}},
		{string(poolDoor), [3]frontdoor.Driver{poolDoor, poolDoor, poolDoor}},
		{"mixed", [3]frontdoor.Driver{dbDoor, poolDoor, dbDoor}},
	}
	for _, mix := range mixes {
		t.Run(mix.name, func(t *testing.T) {
			ctx := testdb.Context(t)
			check := testdb.DB(t)
			reports := pgx.Identifier{testdb.Schema(t), "reports"}.Sanitize()
			// No unique constraint: a second report must show up as a row,
			// not be hidden behind a constraint violation.
			_, err := check.ExecContext(ctx, "CREATE TABLE "+reports+" (day date NOT NULL, instance int NOT NULL)")
			require.NoError(t, err)

			var instances [3]frontdoor.Door
			for i, drv := range mix.drivers {
				instances[i] = frontdoor.Open(t, drv)
			}
			key := testdb.Key(t) // the daily report's lock
			firstDay := time.Date(2025, time.March, 1, 0, 0, 0, 0, time.UTC)

			const rounds = 5
			for round := range rounds {
				day := firstDay.AddDate(0, 0, round)
				var (
					wg     sync.WaitGroup
					calls  atomic.Int32
					start  = make(chan struct{})
					losers = make(chan struct{}, len(instances))
					errs   [3]error
				)
				for i, inst := range instances {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						err := inst.RunExclusive(ctx, key, func(tx frontdoor.Tx) error {
							calls.Add(1)
							var exists bool
							if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+reports+" WHERE day = $1)", day).Scan(&exists); err != nil {
								return err
							}
							if !exists {
								if err := tx.Exec(ctx, "INSERT INTO "+reports+" (day, instance) VALUES ($1, $2)", day, i); err != nil {
									return err
								}
							}
							// Sending takes a while: the others fire meanwhile.
							for range len(instances) - 1 {
								select {
								case <-losers:
								case <-time.After(10 * time.Second):
									return errors.New("the other instances did not return while the report was being sent")
								}
							}
							return nil
						})
						errs[i] = err
						if errors.Is(err, pgadvisory.ErrLocked) {
							losers <- struct{}{}
						}
					}()
				}
				close(start)
				wg.Wait()

				sent, locked := 0, 0
				for i, err := range errs {
					switch {
					case err == nil:
						sent++
					case errors.Is(err, pgadvisory.ErrLocked):
						require.ErrorIs(t, err, pgadvisory.ErrLocked, "ErrLocked is returned bare")
						locked++
					default:
						t.Fatalf("round %d, instance %d: unexpected error: %v", round, i, err)
					}
				}
				require.Equal(t, 1, sent, "round %d: exactly one instance sends the report", round)
				require.Equal(t, 2, locked, "round %d: the other two get ErrLocked", round)
				require.EqualValues(t, 1, calls.Load(), "round %d: fn runs only for the winner", round)

				var rows int
				require.NoError(t, check.QueryRowContext(ctx, "SELECT count(*) FROM "+reports+" WHERE day = $1", day).Scan(&rows))
				require.Equal(t, 1, rows, "round %d: exactly one report row for the day", round)
			}
			var total int
			require.NoError(t, check.QueryRowContext(ctx, "SELECT count(*) FROM "+reports).Scan(&total))
			require.Equal(t, rounds, total)
		})
	}
}
