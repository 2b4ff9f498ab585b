// Package stubpg is a test double at the PostgreSQL protocol level: a
// server that speaks enough of the wire protocol for pgx (simple query
// protocol) and whose advisory-lock functions grant every lock to every
// session, the way an implementation whose advisory locks are no-ops does
// (CockroachDB documents its session-level advisory-lock functions as
// no-ops). Each client connection is a backend with its own pid.
//
// It answers a query by what it mentions: pg_try_advisory_lock,
// pg_try_advisory_xact_lock and pg_advisory_unlock return true (with
// pg_backend_pid() when asked too), lockgen's waiting transaction-lock
// statement (pg_advisory_xact_lock with pg_is_in_recovery()) granted and
// no standby, pg_backend_pid() alone the pid, a count over pg_locks 0,
// BEGIN, COMMIT and ROLLBACK their command tags.
// Anything else is an error (SQLSTATE 0A000), so a test sees what it did
// not expect.
package stubpg

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Server is a running stub.
type Server struct {
	ln      net.Listener
	nextPID atomic.Uint32
	wg      sync.WaitGroup
}

// Start listens on 127.0.0.1 at a free port until t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("stubpg: %v", err)
	}
	s := &Server{ln: ln}
	s.nextPID.Store(40000)
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

// URL is a connection URL for pgx; the stub needs the simple protocol.
func (s *Server) URL() string {
	return "postgres://stub@" + s.ln.Addr().String() + "/stub?sslmode=disable&default_query_exec_mode=simple_protocol"
}

func (s *Server) accept() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer c.Close()
			s.serve(c, s.nextPID.Add(1))
		}()
	}
}

func (s *Server) serve(c net.Conn, pid uint32) {
	b := pgproto3.NewBackend(c, c)
	for {
		m, err := b.ReceiveStartupMessage()
		if err != nil {
			return
		}
		if _, ok := m.(*pgproto3.SSLRequest); ok {
			if _, err := c.Write([]byte("N")); err != nil {
				return
			}
			continue
		}
		if _, ok := m.(*pgproto3.StartupMessage); !ok {
			return
		}
		break
	}
	b.Send(&pgproto3.AuthenticationOk{})
	for _, p := range [][2]string{{"server_version", "15.0 (stubpg)"}, {"server_encoding", "UTF8"},
		{"client_encoding", "UTF8"}, {"DateStyle", "ISO, MDY"}, {"standard_conforming_strings", "on"}} {
		b.Send(&pgproto3.ParameterStatus{Name: p[0], Value: p[1]})
	}
	b.Send(&pgproto3.BackendKeyData{ProcessID: pid, SecretKey: []byte{0, 0, 0, 1}})
	tx := byte('I')
	b.Send(&pgproto3.ReadyForQuery{TxStatus: tx})
	if b.Flush() != nil {
		return
	}
	for {
		m, err := b.Receive()
		if err != nil {
			return
		}
		switch q := m.(type) {
		case *pgproto3.Terminate:
			return
		case *pgproto3.Query:
			tx = answer(b, q.String, pid, tx)
			b.Send(&pgproto3.ReadyForQuery{TxStatus: tx})
		default:
			b.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "0A000", Message: "stubpg: only the simple query protocol"})
			b.Send(&pgproto3.ReadyForQuery{TxStatus: tx})
		}
		if b.Flush() != nil {
			return
		}
	}
}

// answer sends the reply to one simple query and returns the transaction
// status after it.
func answer(b *pgproto3.Backend, sql string, pid uint32, tx byte) byte {
	q := strings.ToLower(strings.TrimSpace(sql))
	switch {
	case strings.HasPrefix(q, "begin"):
		b.Send(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")})
		return 'T'
	case strings.HasPrefix(q, "commit"):
		b.Send(&pgproto3.CommandComplete{CommandTag: []byte("COMMIT")})
		return 'I'
	case strings.HasPrefix(q, "rollback"):
		b.Send(&pgproto3.CommandComplete{CommandTag: []byte("ROLLBACK")})
		return 'I'
	case strings.Contains(q, "pg_locks") && strings.Contains(q, "count("):
		row(b, []string{"count"}, []uint32{20}, "0")
	case strings.Contains(q, "pg_try_advisory_lock") || strings.Contains(q, "pg_try_advisory_xact_lock") || strings.Contains(q, "pg_advisory_unlock"):
		if strings.Contains(q, "pg_backend_pid") {
			row(b, []string{"got", "pid"}, []uint32{16, 23}, "t", strconv.FormatUint(uint64(pid), 10))
		} else {
			row(b, []string{"got"}, []uint32{16}, "t")
		}
	case strings.Contains(q, "pg_advisory_xact_lock(") && strings.Contains(q, "pg_is_in_recovery"):
		// lockgen's waiting transaction lock (RunExclusive with WithWait):
		// granted, not a standby.
		row(b, []string{"granted", "standby"}, []uint32{16, 16}, "t", "f")
	case strings.Contains(q, "pg_backend_pid"):
		row(b, []string{"pid"}, []uint32{23}, strconv.FormatUint(uint64(pid), 10))
	default:
		b.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "0A000", Message: "stubpg: unsupported query: " + sql})
		if tx == 'T' {
			return 'E'
		}
	}
	return tx
}

// row sends a one-row result in text format.
func row(b *pgproto3.Backend, names []string, oids []uint32, values ...string) {
	fields := make([]pgproto3.FieldDescription, len(names))
	data := make([][]byte, len(values))
	for i, n := range names {
		fields[i] = pgproto3.FieldDescription{Name: []byte(n), DataTypeOID: oids[i], DataTypeSize: -1, TypeModifier: -1}
		data[i] = []byte(values[i])
	}
	b.Send(&pgproto3.RowDescription{Fields: fields})
	b.Send(&pgproto3.DataRow{Values: data})
	b.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
}
