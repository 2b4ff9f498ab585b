//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// killGroup makes cmd run in a process group of its own, and its
// cancellation kill the whole group: go test's test binary too, which
// outlives a killed go test otherwise.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
