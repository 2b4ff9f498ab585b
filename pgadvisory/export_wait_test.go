package pgadvisory

import "time"

// ServerQueueForTest makes l's waiting calls wait in the server's lock
// queue, as on a database without migration 00011: the baseline of the
// hand-off benchmark.
func ServerQueueForTest[TTx any](l *Locker[TTx]) { l.s.noQueue.Store(true) }

// ServerWaitBudgetForTest sets how many heads of l's queues may wait on
// the server at once, in place of the one from its pool's size (n <= 0:
// back to that one).
func ServerWaitBudgetForTest[TTx any](l *Locker[TTx], n int32) { l.s.serverWaits.budget.Store(n) }

// PollGapForTest sets the spacing of l's poll slots in place of
// time.Second/pollRate (before l is used; d <= 0: back to that one).
func PollGapForTest[TTx any](l *Locker[TTx], d time.Duration) { l.s.polls.gap = d }

// PollBacklogForTest lets l's next poll slot come only d from now, as if
// other waiters had taken the ones before.
func PollBacklogForTest[TTx any](l *Locker[TTx], d time.Duration) {
	l.s.polls.mu.Lock()
	l.s.polls.last = time.Now().Add(d - l.s.polls.spacing())
	l.s.polls.mu.Unlock()
}

// PollWaitersForTest is the number of l's calls that poll through its
// poll gate now.
func PollWaitersForTest[TTx any](l *Locker[TTx]) int64 { return l.s.polls.waiters.Load() }

// ListeningForTest reports whether l's waiters have a listening
// connection now (they are woken by NOTIFY, not only by their polls).
func ListeningForTest[TTx any](l *Locker[TTx]) bool { return l.s.waits.listening() }

// ReleaseSQLForTest makes l rewrite the release statement of each session
// lock taken through its queue with rewrite (before l is used).
func ReleaseSQLForTest[TTx any](l *Locker[TTx], rewrite func(query string) string) {
	l.s.releaseSQL = rewrite
}
