package pgcluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// bouncerReadyTimeout bounds the wait for a started PgBouncer to serve a
// query.
const bouncerReadyTimeout = 30 * time.Second

// defaultBouncerSettings are the [pgbouncer] keys StartPgBouncer writes
// unless overridden with WithSetting.
var defaultBouncerSettings = []setting{
	{"admin_users", Superuser},
	{"default_pool_size", "2"},
	// lib/pq and some other clients send it; PgBouncer would refuse them.
	{"ignore_startup_parameters", "extra_float_digits"},
	{"max_client_conn", "100"},
	// The default waits 15 s before retrying a failed server login.
	{"server_login_retry", "1"},
}

// reservedBouncerSettings are chosen by StartPgBouncer.
var reservedBouncerSettings = []string{"auth_file", "auth_type", "listen_addr", "listen_port", "logfile", "pidfile", "pool_mode", "unix_socket_dir"}

// bouncerUsers may connect through PgBouncer (auth_type=trust still needs
// them listed in auth_file), besides the target URL's user.
var bouncerUsers = []string{"root", Superuser}

var plainName = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// StartPgBouncer starts a PgBouncer in front of the database named by target
// (a URL or keyword/value connection string; its host, port, database and
// user are used) and returns the URL clients connect through. mode is the
// pool_mode: "session", "transaction" or "statement".
//
// PgBouncer listens on 127.0.0.1 at a free port, has no Unix socket, trusts
// the users root, postgres and target's user (the server must trust them
// too), keeps default_pool_size=2 server connections per user, and accepts
// postgres (Superuser) on its admin console (database "pgbouncer"). It runs
// in the foreground as a child process (as the postgres OS user when the
// test binary is root), logs to a file in its private directory, and is
// stopped when t ends. opts set other [pgbouncer] keys.
//
// PgBouncer before 1.21 (Debian 12 ships 1.18) does not support
// protocol-level prepared statements in transaction mode: pgx clients need
// default_query_exec_mode=exec or simple_protocol in their URL.
func StartPgBouncer(t testing.TB, target, mode string, opts ...Option) string {
	t.Helper()
	b, err := startBouncer(target, mode, opts, t.Logf)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgcluster: pgbouncer log %s (last lines):\n%s", b.logFile(), tail(b.logFile(), 30))
		}
		if err := b.stop(); err != nil {
			t.Errorf("pgcluster: stopping pgbouncer: %v", err)
		}
	})
	return b.url
}

// bouncer is a running PgBouncer.
type bouncer struct {
	run    *runner
	root   string
	reaper *reaper
	port   int
	url    string
	proc   *child // nil when not running
}

func startBouncer(target, mode string, opts []Option, logf func(string, ...any)) (_ *bouncer, err error) {
	began := time.Now()
	switch mode {
	case "session", "transaction", "statement":
	default:
		return nil, fmt.Errorf("pgcluster: unknown pool mode %q (want session, transaction or statement)", mode)
	}
	settings, err := resolve(defaultBouncerSettings, reservedBouncerSettings, opts)
	if err != nil {
		return nil, err
	}
	cfg, err := pgconn.ParseConfig(target)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: parsing the PgBouncer target: %w", err)
	}
	if !plainName.MatchString(cfg.Database) || !plainName.MatchString(cfg.User) {
		return nil, fmt.Errorf("pgcluster: PgBouncer target database %q and user %q must be plain identifiers", cfg.Database, cfg.User)
	}
	bin, err := findPgBouncer()
	if err != nil {
		return nil, err
	}
	r, err := newRunner()
	if err != nil {
		return nil, err
	}
	b := &bouncer{run: r}
	if b.root, err = r.mkdirRoot("pgbouncer"); err != nil {
		return nil, err
	}
	if b.reaper, err = r.startReaper(b.root, "", ""); err != nil {
		_ = os.RemoveAll(b.root)
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = b.stop()
		}
	}()

	users := bouncerUsers
	if !slices.Contains(users, cfg.User) {
		users = append(slices.Clone(users), cfg.User)
	}
	var auth strings.Builder
	for _, u := range users {
		fmt.Fprintf(&auth, "%q \"\"\n", u)
	}
	if err := r.writeFile(b.authFile(), []byte(auth.String())); err != nil {
		return nil, err
	}

	targetHost := cfg.Host
	if targetHost == "localhost" {
		targetHost = host // the test server listens on IPv4; avoid resolving ::1
	}
	for attempt := 1; ; attempt++ {
		if b.port, err = freePort(); err != nil {
			return nil, err
		}
		ini := bouncerINI(cfg.Database, targetHost, cfg.Port, mode, b.port, b.authFile(), settings)
		if err := r.writeFile(b.iniFile(), []byte(ini)); err != nil {
			return nil, err
		}
		offset := fileSize(b.logFile())
		if err := b.startProcess(bin); err != nil {
			return nil, err
		}
		u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: net.JoinHostPort(host, strconv.Itoa(b.port)),
			Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
		b.url = u.String()
		err = waitForQuery(b.url, "SELECT true", bouncerReadyTimeout, b.proc)
		if err == nil {
			break
		}
		b.stopProcess()
		if attempt < startAttempts && portTaken(b.logFile(), offset) {
			continue
		}
		return nil, fmt.Errorf("pgcluster: pgbouncer did not start: %w\nlog %s:\n%s", err, b.logFile(), tail(b.logFile(), 30))
	}
	logf("pgcluster: pgbouncer (%s pooling) on port %d for %s:%d/%s ready in %v", mode, b.port, targetHost, cfg.Port,
		cfg.Database, time.Since(began).Round(time.Millisecond))
	return b, nil
}

// bouncerINI renders pgbouncer.ini.
func bouncerINI(db, targetHost string, targetPort uint16, mode string, port int, authFile string, settings []setting) string {
	var b strings.Builder
	b.WriteString("; Written by lockgen's internal/testkit/pgcluster.\n[databases]\n")
	fmt.Fprintf(&b, "%s = host=%s port=%d dbname=%s\n\n[pgbouncer]\n", db, targetHost, targetPort, db)
	fmt.Fprintf(&b, "listen_addr = %s\nlisten_port = %d\nunix_socket_dir =\n", host, port)
	fmt.Fprintf(&b, "auth_type = trust\nauth_file = %s\npool_mode = %s\n", authFile, mode)
	for _, s := range settings {
		fmt.Fprintf(&b, "%s = %s\n", s.name, s.value)
	}
	return b.String()
}

// startProcess starts pgbouncer in the foreground, logging to logFile. The
// kernel terminates it if the test binary dies.
func (b *bouncer) startProcess(bin string) error {
	log, err := os.OpenFile(b.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer log.Close() // the child has its own descriptor
	if err := b.run.chown(b.logFile()); err != nil {
		return err
	}
	cmd := b.run.command(context.Background(), b.root, bin, b.iniFile())
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr(b.run.as, true)
	proc, err := startTiedToParent(cmd)
	if err != nil {
		return fmt.Errorf("pgcluster: starting pgbouncer: %w", err)
	}
	b.proc = proc
	return nil
}

// stopProcess terminates pgbouncer (SIGTERM: immediate shutdown) and waits.
func (b *bouncer) stopProcess() {
	if b.proc == nil {
		return
	}
	_ = b.proc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.proc.done:
	case <-time.After(10 * time.Second):
		_ = b.proc.cmd.Process.Kill()
		<-b.proc.done
	}
	b.proc = nil
}

// stop terminates pgbouncer and deletes its directory.
func (b *bouncer) stop() error {
	b.stopProcess()
	return b.reaper.release()
}

func (b *bouncer) iniFile() string  { return filepath.Join(b.root, "pgbouncer.ini") }
func (b *bouncer) authFile() string { return filepath.Join(b.root, "users.txt") }
func (b *bouncer) logFile() string  { return filepath.Join(b.root, "pgbouncer.log") }

// WarmPgBouncer makes the PgBouncer at url (as StartPgBouncer returns it)
// open n server connections, by holding n transactions open at once, and
// then leaves them idle in its pool: the state in which a transaction
// pooler with server_round_robin=1 moves one client's statements between
// server connections.
func WarmPgBouncer(t testing.TB, url string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bouncerReadyTimeout)
	defer cancel()
	conns := make([]*pgconn.PgConn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.Background())
		}
	}()
	for range n {
		c, err := pgconn.Connect(ctx, url)
		if err != nil {
			t.Fatalf("pgcluster: warming pgbouncer: %v", err)
		}
		conns = append(conns, c)
		if _, err := c.Exec(ctx, "BEGIN; SELECT 1").ReadAll(); err != nil {
			t.Fatalf("pgcluster: warming pgbouncer: %v", err)
		}
	}
	for _, c := range conns {
		if _, err := c.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
			t.Fatalf("pgcluster: warming pgbouncer: %v", err)
		}
	}
}
