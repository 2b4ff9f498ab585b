// Package generatedlocks is lockgen's output for a locks.yaml that
// declares a lock of every shape: plain, parameterized (int64, uuid, string
// and bool parameters), pinned to a legacy ID, and with options. Tests of
// lockgen register and pgadvisory.Register use it as the generated code an
// application would have; it is test data, independent of examples/.
//
// Regenerate after editing locks.yaml:
//
//	go generate ./internal/testkit/generatedlocks
package generatedlocks

//go:generate go run github.com/lockgen/lockgen/cmd/lockgen generate
