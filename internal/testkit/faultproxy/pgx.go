package faultproxy

import (
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lockgen/lockgen/internal/testkit/testdb"
)

// ToTestDB starts a proxy (see [New]) to the server of the package
// database (testdb). Connect through it with [Proxy.Route].
func ToTestDB(t testing.TB) *Proxy {
	t.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	return New(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
}

// Route points a pgx connection configuration at the proxy, in clear text
// (no TLS, no fallbacks) so that hooks can read the protocol. It fits
// frontdoor.Configure.
func (p *Proxy) Route(cfg *pgx.ConnConfig) {
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		panic("faultproxy: " + err.Error()) // Addr is always host:port
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		panic("faultproxy: " + err.Error())
	}
	cfg.Host, cfg.Port, cfg.TLSConfig, cfg.Fallbacks = host, uint16(n), nil, nil
}
