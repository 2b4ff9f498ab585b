package pgadvisory

import (
	"fmt"
)

func setSessionConnsOf(pool any, n int) error {
	if n < 0 {
		return sessionConnsInvalid(fmt.Errorf("negative number of connections %d", n))
	}
	setSessionConns(pool, n)
	return nil
}

// sessionConnsInvalid is SetSessionConns' refusal.
func sessionConnsInvalid(err error) error {
	return &Error{Op: "options", Kind: ErrInvalidArgument, Err: fmt.Errorf("SetSessionConns: %w", err)}
}
