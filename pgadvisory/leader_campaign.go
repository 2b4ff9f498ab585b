package pgadvisory

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Campaign's backoff between failed attempts.
const (
	campaignMinBackoff = 100 * time.Millisecond
	campaignMaxBackoff = 5 * time.Second
)

// campaign is Campaign's loop around lead (Lead or LeadPgx).
// lead's resigned tells it that the previous attempt's leader resigned.
func campaign(ctx context.Context, fn func(context.Context, int64) error, lead func(context.Context, func(context.Context, int64) error, bool) error) error {
	if fn == nil {
		// Lead refuses it too; refuse before the first attempt all the same.
		return lead(ctx, nil, false)
	}
	backoff := campaignMinBackoff
	resigned := false
	for ctx.Err() == nil {
		var led bool
		var fnErr error
		err := lead(ctx, func(lctx context.Context, term int64) error {
			led = true
			fnErr = fn(lctx, term)
			return fnErr
		}, resigned)
		resigned = false
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			backoff = campaignMinBackoff
			resigned = true
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
	for _, kind := range []error{ErrInvalidArgument, ErrIsolationLevel, ErrTransactionPooler, ErrStatementPooler, ErrNotMigrated, ErrClosed} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}
