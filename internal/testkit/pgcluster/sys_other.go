//go:build !linux

package pgcluster

import (
	"fmt"
	"runtime"
	"syscall"
)

func platformSupported() error {
	return fmt.Errorf("%w: only implemented on Linux, not %s", errUnavailable, runtime.GOOS)
}

func sysProcAttr(*osUser, bool) *syscall.SysProcAttr { return nil }
