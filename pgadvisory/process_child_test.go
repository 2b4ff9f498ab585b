package pgadvisory_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// childProcess is this test binary started again to run one test function
// as a separate process of a multi-process test: the test finds its
// instructions in the environment, reads the parent's commands on stdin
// and reports on stdout, one line at a time.
type childProcess struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string // its stdout lines, closed when it ends
}

// startChild starts the test function test (its exact name) in a child
// process, with env ("NAME=value") added to the parent's environment. The
// child is killed when t ends, if it has not exited. Its stderr is the
// parent's; its stdout lines go to lines, buffered (up to 16,384 lines) so
// that a parent that does not read them all never blocks the child.
func startChild(t *testing.T, test string, env ...string) *childProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := &childProcess{cmd: cmd, in: in, lines: make(chan string, 1<<14)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	return c
}
