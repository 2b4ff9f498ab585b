package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// watcher checks a session lock's connection until stopped.
type watcher struct {
	c      *callState
	conn   sessionConn
	cancel context.CancelCauseFunc
	stop   chan struct{}
	wg     sync.WaitGroup
	lost   error // set before wg.Done, read after wg.Wait
}

// watch checks, one interval after the previous check ended, that the
// connection answers and holds all the call's locks; on the first failure
// it records the loss and cancels the work's context with an *Error of kind
// ErrLockLost.
func (w *watcher) watch(ctx context.Context) {
	defer w.wg.Done()
	query, args := w.c.heldSQL()
	timer := time.NewTimer(w.c.interval)
	defer timer.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if err := w.check(ctx, query, args); err != nil {
			if kind := classify(err); kind != nil && kind != ErrConnLost {
				err = fmt.Errorf("%w: %w", kind, err)
			}
			w.lost = err
			cause := &Error{Op: "watch", LockIDs: w.c.ids, Name: w.c.name, SQLState: SQLState(err), Kind: ErrLockLost, Err: err}
			w.c.emit(Event{Kind: EventError, Err: cause})
			w.cancel(cause)
			return
		}
		timer.Reset(w.c.interval)
	}
}

// check runs one check, bounded by the check timeout and not by the
// interval: a check that is merely slow (a busy machine) is no loss, while
// one that never answers (a half-open link) is noticed within the timeout.
func (w *watcher) check(ctx context.Context, query string, args []any) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.c.checkTimeout)
	defer cancel()
	var held int64
	err := w.conn.queryRow(cctx, query, args, &held)
	switch {
	case err != nil && errors.Is(cctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the check did not answer within %v (WithCheckTimeout), "+
			"as on a half-open link; the connection was closed: %w", w.c.checkTimeout, err)
	case err != nil:
		return err
	case held != int64(len(w.c.ids)):
		return fmt.Errorf("backend holds %d of %d locks", held, len(w.c.ids))
	}
	return nil
}
