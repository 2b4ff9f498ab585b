package pgadvisory

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// watcher checks a session lock's connection until stopped.
type watcher struct {
	c      *config
	conn   sessionConn
	cancel context.CancelCauseFunc
	stop   chan struct{}
	wg     sync.WaitGroup
	lost   error // set before wg.Done, read after wg.Wait
}

// watch checks every interval that the connection answers and holds all
// the call's locks; on the first failure it records the loss and cancels
// the work's context with an *Error of kind ErrLockLost.
func (w *watcher) watch(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.c.interval)
	defer t.Stop()
	query, args := w.c.heldSQL()
	for {
		select {
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The check must not outlive one interval, so that a half-open
		// connection is noticed in bounded time.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.c.interval)
		var held int64
		err := w.conn.queryRow(cctx, query, args, &held)
		cancel()
		if err == nil && held != int64(len(w.c.ids)) {
			err = fmt.Errorf("backend holds %d of %d locks", held, len(w.c.ids))
		}
		if err != nil {
			if kind := classify(err); kind != nil && kind != ErrConnLost {
				err = fmt.Errorf("%w: %w", kind, err)
			}
			w.lost = err
			cause := &Error{Op: "watch", LockIDs: w.c.ids, Name: w.c.name, SQLState: SQLState(err), Kind: ErrLockLost, Err: err}
			w.c.emit(Event{Kind: EventError, Err: cause})
			w.cancel(cause)
			return
		}
	}
}
