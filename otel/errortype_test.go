package lockgenotel_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	lockgenotel "github.com/lockgen/lockgen/otel"
	"github.com/lockgen/lockgen/pgadvisory"
)

// sentinels are pgadvisory's sentinel errors with the error.type each must
// get. TestErrorTypeCoversEverySentinel holds this list to pgadvisory's
// source, so a new sentinel fails here until it has a name.
var sentinels = map[string]struct {
	err  error
	name string
}{
	"ErrLocked":            {pgadvisory.ErrLocked, "locked"},
	"ErrLockTimeout":       {pgadvisory.ErrLockTimeout, "lock_timeout"},
	"ErrDeadlock":          {pgadvisory.ErrDeadlock, "deadlock"},
	"ErrLockTableFull":     {pgadvisory.ErrLockTableFull, "lock_table_full"},
	"ErrConnLost":          {pgadvisory.ErrConnLost, "conn_lost"},
	"ErrConnect":           {pgadvisory.ErrConnect, "connect"},
	"ErrCommitUnknown":     {pgadvisory.ErrCommitUnknown, "commit_unknown"},
	"ErrTxEnded":           {pgadvisory.ErrTxEnded, "tx_ended"},
	"ErrStandby":           {pgadvisory.ErrStandby, "standby"},
	"ErrIsolationLevel":    {pgadvisory.ErrIsolationLevel, "isolation_level"},
	"ErrLockLost":          {pgadvisory.ErrLockLost, "lock_lost"},
	"ErrTransactionPooler": {pgadvisory.ErrTransactionPooler, "transaction_pooler"},
	"ErrStatementPooler":   {pgadvisory.ErrStatementPooler, "statement_pooler"},
	"ErrStaleToken":        {pgadvisory.ErrStaleToken, "stale_token"},
	"ErrMissingToken":      {pgadvisory.ErrMissingToken, "missing_token"},
	"ErrTruncateRefused":   {pgadvisory.ErrTruncateRefused, "truncate_refused"},
	"ErrNullParameter":     {pgadvisory.ErrNullParameter, "null_parameter"},
	"ErrAlreadyDone":       {pgadvisory.ErrAlreadyDone, "already_done"},
	"ErrNotMigrated":       {pgadvisory.ErrNotMigrated, "not_migrated"},
	"ErrNoLeader":          {pgadvisory.ErrNoLeader, "no_leader"},
	"ErrInvalidArgument":   {pgadvisory.ErrInvalidArgument, "invalid_argument"},
	"ErrClosed":            {pgadvisory.ErrClosed, "closed"},
}

// TestErrorType: every sentinel, bare or as the Kind of a *pgadvisory.Error,
// has its own error.type; a more specific kind wins over the cause inside
// it; other errors are _OTHER, and nil has none.
func TestErrorType(t *testing.T) {
	for name, s := range sentinels {
		require.Equal(t, s.name, lockgenotel.ErrorType(s.err), name)
		wrapped := &pgadvisory.Error{Op: "lock", LockIDs: []int64{1}, Kind: s.err, Err: errors.New("cause")}
		require.Equal(t, s.name, lockgenotel.ErrorType(wrapped), name)
		require.Equal(t, s.name, lockgenotel.ErrorType(fmt.Errorf("fn: %w", wrapped)), name)
	}
	lost := &pgadvisory.Error{Op: "watch", Kind: pgadvisory.ErrLockLost, Err: &pgadvisory.Error{Kind: pgadvisory.ErrConnLost}}
	require.Equal(t, "lock_lost", lockgenotel.ErrorType(lost))
	require.Equal(t, "canceled", lockgenotel.ErrorType(&pgadvisory.Error{Op: "begin", Err: context.Canceled}))
	require.Equal(t, "deadline_exceeded", lockgenotel.ErrorType(context.DeadlineExceeded))
	require.Equal(t, "_OTHER", lockgenotel.ErrorType(errors.New("fn's own")))
	require.Empty(t, lockgenotel.ErrorType(nil))
}

// TestErrorTypeCoversEverySentinel reads pgadvisory's source: every
// exported Err variable is in sentinels (and so has an error.type).
func TestErrorTypeCoversEverySentinel(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "pgadvisory", "*.go"))
	require.NoError(t, err)
	declared := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") {
						declared[id.Name] = true
					}
				}
			}
		}
	}
	require.NotEmpty(t, declared)
	require.Equal(t, slices.Sorted(maps.Keys(declared)), slices.Sorted(maps.Keys(sentinels)),
		"a pgadvisory sentinel without an error.type: add it to errorTypes (attributes.go) and to sentinels here")
}
