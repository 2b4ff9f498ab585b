//go:build linux

package pgcluster

import "syscall"

func platformSupported() error { return nil }

// sysProcAttr makes a process run as the given user (nil: unchanged) in its
// own process group; tied makes the kernel send it SIGTERM when the thread
// that started it exits.
func sysProcAttr(as *osUser, tied bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if as != nil {
		// Groups is empty: root's supplementary groups are dropped.
		a.Credential = &syscall.Credential{Uid: as.uid, Gid: as.gid}
	}
	if tied {
		a.Pdeathsig = syscall.SIGTERM
	}
	return a
}
