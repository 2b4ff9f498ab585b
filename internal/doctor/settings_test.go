package doctor_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/doctor"
	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// Each setting check against a database left at the server's defaults and
// one configured to pass (ALTER DATABASE ... SET, as an operator would).

func TestIdleInTransactionSessionTimeout(t *testing.T) {
	requireStatus(t, run(t, emptyDatabase(t, nil), doctor.IdleInTransactionSessionTimeout), doctor.Warn,
		"= 0 (off", "still held after 3 s", "released after 506–512 ms")
	set := emptyDatabase(t, map[string]string{"idle_in_transaction_session_timeout": "90s"})
	requireStatus(t, run(t, set, doctor.IdleInTransactionSessionTimeout), doctor.Pass, "= 1m30s (source: database)")
}

// TestEvidenceIsDocumented: the hold times doctor cites are those the
// operations page (docs/operations.md, "Replicas and failover") states.
func TestEvidenceIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	for _, measured := range []string{"still held after 3 s", "released after 506–512 ms", "idle_in_transaction_session_timeout = 500ms"} {
		require.Contains(t, string(readme), measured)
	}
}

func TestKeepalives(t *testing.T) {
	// The defaults over TCP: the OS's keepalive timing (Linux: 2h11m15s).
	requireStatus(t, run(t, emptyDatabase(t, nil), doctor.Keepalives), doctor.Warn,
		"tcp_keepalives_idle = ", "longer than 5m0s", "client_connection_check_interval = 0 (off)")
	set := emptyDatabase(t, map[string]string{
		"tcp_keepalives_idle": "60", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3",
		"client_connection_check_interval": "10s",
	})
	requireStatus(t, run(t, set, doctor.Keepalives), doctor.Pass, "after about 1m30s", "client_connection_check_interval = 10s")
	// Short keepalives alone are not enough: a long statement goes unchecked.
	half := emptyDatabase(t, map[string]string{"tcp_keepalives_idle": "60", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3"})
	requireStatus(t, run(t, half, doctor.Keepalives), doctor.Warn, "after about 1m30s", "client_connection_check_interval = 0 (off)")
}

func TestSynchronousCommit(t *testing.T) {
	requireStatus(t, run(t, testdb.URL(t), doctor.SynchronousCommit), doctor.Pass, "synchronous_commit = on", "fencing forces synchronous_commit = on")
	off := emptyDatabase(t, map[string]string{"synchronous_commit": "off"})
	requireStatus(t, run(t, off, doctor.SynchronousCommit), doctor.Warn,
		"synchronous_commit = off (source: database)", "3 × wal_writer_delay = 200ms", "run-once window", "fenced write", "fencing forces synchronous_commit = on")
}
