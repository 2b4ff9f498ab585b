package pgadvisory

import (
	"fmt"
)

// setSessionConnsOf is SetSessionConns on the package Locker state s.
func setSessionConnsOf(s *lockerState, n int) error {
	if n < 0 {
		return sessionConnsInvalid(fmt.Errorf("negative number of connections %d", n))
	}
	s.setSessionConns(n)
	return nil
}

// sessionConnsInvalid is SetSessionConns' refusal.
func sessionConnsInvalid(err error) error {
	return &Error{Op: "options", Kind: ErrInvalidArgument, Err: fmt.Errorf("SetSessionConns: %w", err)}
}
