package lockgentest_test

import "testing"

// TestExamples runs the tests that the package's examples show.
func TestExamples(t *testing.T) {
	t.Run("NewDB", testInvoicesOncePerDay)
	t.Run("NewPool", testRebuildWithPgx)
	t.Run("Hold", testCompactSkipsWhileAnotherRuns)
	t.Run("Depose", testSchedulerStepsDown)
	t.Run("Witness", testSettlementsNeverOverlap)
	t.Run("NewWitness", testMailWorkersTakeTurns)
	t.Run("Witness.Enter", testLedgerCloseNeverOverlaps)
}
