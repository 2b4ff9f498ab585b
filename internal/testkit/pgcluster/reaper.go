package pgcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// reaperScript runs as the server's OS user with its stdin a pipe from the
// test binary. `cat` returns when the pipe reaches EOF: at cleanup, or when
// the test binary exits in any way. Then the server in $3 (if any) is
// stopped with $2 (pg_ctl) and the directory $1 removed. Hang-ups and
// Ctrl-C are ignored: they are meant for go test, and the reaper must
// outlive it to clean up.
const reaperScript = `trap '' HUP INT
cat >/dev/null
if [ -n "$2" ] && [ -f "$3/postmaster.pid" ]; then
	"$2" stop -D "$3" -m immediate -w -t 60 >/dev/null 2>&1
fi
rm -rf -- "$1"
`

// reaperTimeout bounds how long cleanup waits for a reaper.
const reaperTimeout = 90 * time.Second

// reaper owns a temporary directory and, optionally, the server in it.
type reaper struct {
	run    *runner
	root   string
	pgCtl  string // "" when there is no server
	data   string
	cmd    *exec.Cmd
	stdin  io.Closer
	exited chan error
}

// startReaper starts the reaper of root; pgCtl and data name the server to
// stop first, if any.
func (r *runner) startReaper(root, pgCtl, data string) (*reaper, error) {
	cmd := exec.Command("/bin/sh", "-c", reaperScript, "lockgen-pgcluster-reaper", root, pgCtl, data)
	cmd.Dir = root
	cmd.Env = r.env
	cmd.SysProcAttr = sysProcAttr(r.as, false)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("pgcluster: reaper: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgcluster: reaper: %w", err)
	}
	rp := &reaper{run: r, root: root, pgCtl: pgCtl, data: data, cmd: cmd, stdin: stdin, exited: make(chan error, 1)}
	go func() { rp.exited <- cmd.Wait() }()
	return rp, nil
}

// release stops the server and removes the directory now. If the reaper
// cannot do it (it was killed, or hangs), release does it itself.
func (rp *reaper) release() error {
	_ = rp.stdin.Close()
	var waitErr error
	select {
	case waitErr = <-rp.exited:
	case <-time.After(reaperTimeout):
		waitErr = fmt.Errorf("pgcluster: reaper of %s still running after %v", rp.root, reaperTimeout)
	}
	if _, err := os.Stat(rp.root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	if waitErr != nil {
		errs = append(errs, waitErr)
	}
	if rp.pgCtl != "" {
		if _, err := os.Stat(rp.data + "/postmaster.pid"); err == nil {
			if err := rp.run.run(rp.root, rp.pgCtl, "stop", "-D", rp.data, "-m", "immediate", "-w"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(rp.root); err != nil {
		errs = append(errs, fmt.Errorf("pgcluster: %w", err))
	}
	return errors.Join(errs...)
}
