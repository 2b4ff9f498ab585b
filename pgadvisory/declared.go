package pgadvisory

import (
	"time"

	"github.com/lockgen/lockgen/keyspace"
)

// Declared describes one lock declared in a locks.yaml file. Next to the
// lock values it generates, cmd/lockgen emits a registry of every declared
// lock, sorted by name:
//
//	var Declared = []pgadvisory.Declared{…}
//
// so that admin commands, dashboards and tests can list the locks a service
// may take. The runtime does not read it.
type Declared struct {
	Name string // declared name, e.g. "billing.invoice"
	Doc  string // the declaration's doc text; "" when it has none

	// Params are a parameterized lock's parameters in declaration order;
	// nil for a plain lock.
	Params []DeclaredParam

	// ID is a plain lock's ID. A parameterized lock has one ID per parameter
	// value (see keyspace.ParamID) and leaves ID zero.
	ID int64
	// Pinned reports that ID is not keyspace.ID(Name): it is a legacy ID
	// adopted with id:, or an ID kept across a rename (on_rename: keep_id).
	Pinned bool

	Shared      bool          // declared shared: true, taken as WithShared()
	Wait        bool          // declared wait:, taken as WithWait(WaitTimeout)
	WaitTimeout time.Duration // with Wait: 0 waits until the context is done
	Fencing     bool          // declared fencing: true, taken as WithFencing()
	// Limit is the declared limit: N (at most N holders at once), taken
	// with WithLimit(N) by Locker.RunLimited or Locker.RunSessionLimited;
	// 0 for a lock that is not limited.
	Limit int
}

// DeclaredParam is one parameter of a declared parameterized lock.
type DeclaredParam struct {
	Name string             // lower_snake name from locks.yaml, e.g. "tenant_id"
	Type keyspace.ParamType // how its values become canonical key text
}
