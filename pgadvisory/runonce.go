package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"unicode/utf8"
)

// WithHolder names the caller: in the run-once ledger's holder column
// ([Locker.RunOnce]), or as the leader ([Locker.Lead]: [Leader].Holder, lockgen status).
// The default is "<hostname>/<pid>".
func WithHolder(holder string) Option {
	return optionFunc(func(c *callState) { c.mark(optHolder); c.holder = holder })
}

// setRunOnce makes c a run-once call of window, keyed in the ledger by
// lockID.
func (c *callState) setRunOnce(lockID int64, window string) error {
	switch {
	case window == "":
		return c.invalid("begin", errors.New("empty run-once window"))
	case !utf8.ValidString(window) || strings.IndexByte(window, 0) >= 0:
		return c.invalid("begin", fmt.Errorf("run-once window %q is not valid UTF-8 text without NUL bytes", window))
	}
	c.runOnce, c.ledgerLockID, c.window = true, lockID, window
	if c.holder == "" {
		c.holder = defaultHolder()
	}
	return nil
}

// runClaim is the claim of a run-once window: the ledger row that RunOnce
// writes before fn (queries/runonce.sql, ClaimRun).
type runClaim struct {
	lockID int64
	window string
	holder string
}

// runClaim is c's claim.
func (c *callState) runClaim() *runClaim {
	return &runClaim{lockID: c.ledgerLockID, window: c.window, holder: c.holder}
}

// claimWindow is the step between the grant and fn that claims the window
// (or reads the claim that came with the grant): txAlreadyDone when the
// window already has a run, txCommitted (the zero outcome) when claimed.
func (c *callState) claimWindow(ctx context.Context, d txDriver, res lockResult) txOutcome {
	claimed := res.claimed
	if res.claimErr != nil {
		return stepFailed(ctx, OpRunOnce, res.claimErr)
	}
	if !res.claimSent {
		var err error
		if claimed, err = d.claim(ctx, c.runClaim()); err != nil {
			return stepFailed(ctx, OpRunOnce, err)
		}
	}
	if !claimed {
		return txOutcome{end: txAlreadyDone}
	}
	return txOutcome{}
}

// defaultHolder is the ledger's holder without WithHolder: "<hostname>/<pid>".
var defaultHolder = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
})
