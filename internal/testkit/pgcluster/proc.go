package pgcluster

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// commandTimeout bounds one initdb, pg_ctl or pg_basebackup run.
const commandTimeout = 2 * time.Minute

// osUser is the account server processes run as.
type osUser struct {
	name     string
	uid, gid uint32
	home     string
}

// runner runs server-side commands: as the postgres OS user when the test
// binary is root (PostgreSQL and PgBouncer refuse to run as root), as the
// current user otherwise.
type runner struct {
	as  *osUser // nil: the current user
	env []string
}

func newRunner() (*runner, error) {
	if err := platformSupported(); err != nil {
		return nil, err
	}
	r := &runner{}
	if os.Geteuid() == 0 {
		u, err := lookupUser("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: the tests run as root, which PostgreSQL refuses, and there is no OS user to run it as: %w", errUnavailable, err)
		}
		r.as = u
	}
	r.env = serverEnv(r.as)
	return r, nil
}

func lookupUser(name string) (*osUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: uid of %s: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: gid of %s: %w", name, err)
	}
	return &osUser{name: name, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}, nil
}

// serverEnv is the environment of server-side commands: the test binary's,
// without libpq variables (PGHOST, PGPORT, PGDATA… must not redirect initdb
// or pg_basebackup) and locale settings (messages are parsed in English),
// and with the identity of the user they run as.
func serverEnv(as *osUser) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "PG"), name == "LANG", name == "LANGUAGE", strings.HasPrefix(name, "LC_"):
			continue
		case as != nil && (name == "HOME" || name == "USER" || name == "LOGNAME"):
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LC_ALL=C")
	if as != nil {
		env = append(env, "HOME="+as.home, "USER="+as.name, "LOGNAME="+as.name)
	}
	return env
}

// command prepares name to run as r's user in dir, in its own process group
// (so that a Ctrl-C meant for go test does not reach it).
func (r *runner) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = r.env
	cmd.SysProcAttr = sysProcAttr(r.as, false)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// run runs a command to completion; its output is returned in the error.
func (r *runner) run(dir, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := r.command(ctx, dir, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgcluster: %s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// mkdirRoot creates a private temporary directory owned by r's user.
func (r *runner) mkdirRoot(kind string) (string, error) {
	dir, err := os.MkdirTemp("", "lockgen-"+kind+"-*")
	if err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	if err := r.chown(dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// writeFile writes a file readable by r's user.
func (r *runner) writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return r.chown(path)
}

func (r *runner) chown(path string) error {
	if r.as == nil {
		return nil
	}
	if err := os.Chown(path, int(r.as.uid), int(r.as.gid)); err != nil {
		return fmt.Errorf("pgcluster: giving %s to user %s: %w", path, r.as.name, err)
	}
	return nil
}

// child is a process started by startTiedToParent.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, set before done is closed
}

// startTiedToParent starts cmd so that the kernel sends it SIGTERM if the
// test binary dies (PR_SET_PDEATHSIG).
//
// The parent-death signal fires when the OS thread that forked the child
// exits, not the process. The goroutine that starts the child is locked to
// its thread and stays in cmd.Wait until the child is gone, so that thread
// lives exactly as long as it must.
func startTiedToParent(cmd *exec.Cmd) (*child, error) {
	started := make(chan error, 1)
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ch, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Callers retry with another port if a server then fails to bind it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portTaken reports whether a log written since offset says the listen port
// was in use.
func portTaken(logFile string, offset int64) bool {
	b, err := os.ReadFile(logFile)
	if err != nil || int64(len(b)) < offset {
		return false
	}
	return bytes.Contains(b[offset:], []byte("Address already in use"))
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tail returns the last n lines of a log file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
