package pgadvisory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// setLead makes c a leadership: it waits for the lock unless WithWait
// bounds the wait, and names its holder.
func (c *callState) setLead() error {
	c.lead = true
	if c.given&optWait == 0 {
		c.wait, c.timeout = true, 0
	}
	switch {
	case c.holder == "":
		c.holder = defaultHolder()
	case !utf8.ValidString(c.holder) || strings.IndexByte(c.holder, 0) >= 0:
		return c.invalid("options", fmt.Errorf("WithHolder: %q is not valid UTF-8 text without NUL bytes", c.holder))
	}
	return nil
}

// leadership is the session lock's fn for a leadership: the hook that
// publishes the term once the lock is granted, and fn with that term.
func (c *callState) leadership(fn func(context.Context, int64) error) func(context.Context) error {
	var term int64
	c.onLocked = func(ctx context.Context, q sessionQuerier) error {
		if c.term != 0 {
			// Elected by the try statement that took the lock
			// (sessionQueueLeadSQL).
			term = c.term
			return nil
		}
		t, err := c.elect(ctx, q)
		if err != nil {
			return err
		}
		term, c.term = t, t
		return nil
	}
	return func(ctx context.Context) error {
		if term == 0 {
			return errors.New("pgadvisory: internal error: leadership without a term")
		}
		return fn(ctx, term)
	}
}
