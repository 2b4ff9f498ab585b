package pgcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Superuser is the name of the superuser of every cluster (trust
// authentication, no password).
const Superuser = "postgres"

// host is the only address clusters listen on.
const host = "127.0.0.1"

// defaultSettings keep a throwaway cluster fast and small. Durability is
// not wanted: the cluster is deleted at the end of the test.
var defaultSettings = []setting{
	{"autovacuum", "off"},
	{"fsync", "off"},
	{"full_page_writes", "off"},
	{"max_connections", "20"},
	{"shared_buffers", "16MB"},
	{"synchronous_commit", "off"},
}

// reservedSettings are chosen by this package for every cluster.
var reservedSettings = []string{"listen_addresses", "port", "unix_socket_directories"}

// confFile is the configuration file this package writes into the data
// directory and includes from postgresql.conf.
const confFile = "pgcluster.conf"

// startAttempts bounds retries when another process takes the chosen port.
const startAttempts = 5

// Cluster is a running throwaway PostgreSQL cluster.
type Cluster struct {
	bin      string // directory of the PostgreSQL binaries
	run      *runner
	settings []setting
	root     string // private directory: data directory, socket, log
	port     int
	primary  *Cluster // for a standby
	reaper   *reaper
}

// Start creates and starts a throwaway cluster for t, stopped and deleted
// when t ends. It skips t (fails it under CI) when PostgreSQL's binaries
// are missing.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := create(opts, t.Logf)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { c.cleanup(t) })
	return c
}

// shared holds the clusters of Shared, by name.
var shared struct {
	sync.Mutex
	clusters map[string]*sharedCluster
}

type sharedCluster struct {
	once     sync.Once
	settings string
	c        *Cluster
	err      error
}

// Shared returns the cluster called name, which the first call in the test
// binary starts with opts and later calls reuse. Tests sharing a cluster
// must leave it as they found it (release locks, drop what they created)
// and must not use it concurrently in ways that interfere. Every call must
// pass the same settings; a mismatch fails t.
//
// A shared cluster lives until the test binary exits; its reaper then stops
// it and deletes its directory (see the package documentation), so no
// TestMain hook is needed.
func Shared(t testing.TB, name string, opts ...Option) *Cluster {
	t.Helper()
	settings, err := resolve(defaultSettings, reservedSettings, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := describe(settings)
	shared.Lock()
	if shared.clusters == nil {
		shared.clusters = map[string]*sharedCluster{}
	}
	s := shared.clusters[name]
	if s == nil {
		s = &sharedCluster{settings: want}
		shared.clusters[name] = s
	}
	shared.Unlock()
	if s.settings != want {
		t.Fatalf("pgcluster: shared cluster %q was started with settings [%s], this call asks for [%s]", name, s.settings, want)
	}
	s.once.Do(func() { s.c, s.err = create(opts, t.Logf) })
	if s.err != nil {
		fail(t, s.err)
	}
	return s.c
}

// create makes and starts a new cluster. On error nothing is left behind.
func create(opts []Option, logf func(string, ...any)) (_ *Cluster, err error) {
	began := time.Now()
	settings, err := resolve(defaultSettings, reservedSettings, opts)
	if err != nil {
		return nil, err
	}
	bin, err := findPostgres("initdb", "pg_ctl", "postgres")
	if err != nil {
		return nil, err
	}
	r, err := newRunner()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, run: r, settings: settings}
	if err := c.makeRoot(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.reaper.release()
		}
	}()

	err = r.run(c.root, filepath.Join(bin, "initdb"), "-D", c.DataDir(), "-A", "trust", "-U", Superuser,
		"-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		return nil, err
	}
	if err := c.includeConf(); err != nil {
		return nil, err
	}
	initdbDone := time.Now()
	if err := c.startServer(); err != nil {
		return nil, err
	}
	logf("pgcluster: cluster on port %d ready in %v (initdb %v, start %v)", c.port,
		time.Since(began).Round(time.Millisecond), initdbDone.Sub(began).Round(time.Millisecond),
		time.Since(initdbDone).Round(time.Millisecond))
	return c, nil
}

// makeRoot creates the cluster's private directory and its reaper.
func (c *Cluster) makeRoot() error {
	root, err := c.run.mkdirRoot("pgcluster")
	if err != nil {
		return err
	}
	rp, err := c.run.startReaper(root, c.pgCtl(), filepath.Join(root, "data"))
	if err != nil {
		_ = os.RemoveAll(root)
		return err
	}
	c.root, c.reaper = root, rp
	return nil
}

// includeConf makes postgresql.conf include this package's settings file.
// A standby's copy of postgresql.conf already does.
func (c *Cluster) includeConf() error {
	f, err := os.OpenFile(filepath.Join(c.DataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = fmt.Fprintf(f, "\n# Added by lockgen's internal/testkit/pgcluster.\ninclude '%s'\n", confFile)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// writeConf writes the settings file for the current port.
func (c *Cluster) writeConf() error {
	var b strings.Builder
	b.WriteString("# Written by lockgen's internal/testkit/pgcluster at every start.\n")
	fmt.Fprintf(&b, "listen_addresses = '%s'\nport = %d\nunix_socket_directories = %s\n", host, c.port, quoteConf(c.root))
	for _, s := range c.settings {
		fmt.Fprintf(&b, "%s = %s\n", s.name, quoteConf(s.value))
	}
	return c.run.writeFile(filepath.Join(c.DataDir(), confFile), []byte(b.String()))
}

// quoteConf quotes a postgresql.conf value; any parameter accepts a quoted
// value.
func quoteConf(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }

// startServer starts the server on a free port, retrying with another port
// if the chosen one was taken in the meantime.
func (c *Cluster) startServer() error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		c.port = port
		if err := c.writeConf(); err != nil {
			return err
		}
		offset := fileSize(c.LogFile())
		err = c.run.run(c.root, c.pgCtl(), "start", "-D", c.DataDir(), "-l", c.LogFile(), "-w", "-t", "60")
		if err == nil {
			return nil
		}
		if attempt < startAttempts && portTaken(c.LogFile(), offset) {
			continue
		}
		return fmt.Errorf("%w\nserver log %s:\n%s", err, c.LogFile(), tail(c.LogFile(), 30))
	}
}

// cleanup stops and deletes the cluster at the end of t.
func (c *Cluster) cleanup(t testing.TB) {
	t.Helper()
	if t.Failed() {
		t.Logf("pgcluster: server log %s (last lines):\n%s", c.LogFile(), tail(c.LogFile(), 30))
	}
	if err := c.reaper.release(); err != nil {
		t.Errorf("pgcluster: cleaning up %s: %v", c.root, err)
	}
}

func (c *Cluster) pgCtl() string { return filepath.Join(c.bin, "pg_ctl") }

// Host returns the address the cluster listens on, 127.0.0.1.
func (c *Cluster) Host() string { return host }

// Port returns the cluster's TCP port.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's private directory (holding the data directory,
// the Unix socket and the server log). It is deleted at cleanup.
func (c *Cluster) Dir() string { return c.root }

// DataDir returns the cluster's data directory.
func (c *Cluster) DataDir() string { return filepath.Join(c.root, "data") }

// LogFile returns the path of the server log.
func (c *Cluster) LogFile() string { return filepath.Join(c.root, "server.log") }

// URL returns the URL of the cluster's postgres database, as [Superuser],
// without TLS.
func (c *Cluster) URL() string { return c.DatabaseURL("postgres") }

// DatabaseURL is [Cluster.URL] for another database.
func (c *Cluster) DatabaseURL(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     net.JoinHostPort(host, strconv.Itoa(c.port)),
		Path:     "/" + name,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// waitForQuery runs query (one boolean column) on connURL until it returns
// true, or fails after timeout or when proc (if not nil) exits. It uses the simple protocol, so it works
// through any pooler.
func waitForQuery(connURL, query string, timeout time.Duration, proc *child) error {
	var exited <-chan struct{}
	if proc != nil {
		exited = proc.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		ok, err := queryBool(ctx, connURL, query)
		if err == nil && ok {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("%s returned false", query)
		}
		select {
		case <-exited:
			return fmt.Errorf("pgcluster: process exited (%v) while waiting for %s: %w", proc.err, query, last)
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: %s did not become true within %v: %w", query, timeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func queryBool(ctx context.Context, connURL, query string) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(cctx, connURL)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(cctx))
	results, err := conn.Exec(cctx, query).ReadAll()
	if err != nil {
		return false, err
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return false, fmt.Errorf("pgcluster: %s: unexpected result shape", query)
	}
	return string(results[0].Rows[0][0]) == "t", nil
}
