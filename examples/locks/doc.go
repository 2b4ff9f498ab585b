// Package locks is the lockgen example: locks.yaml declares the locks of a
// service, and lockgen generates locks_gen.go from it.
//
// Regenerate after editing locks.yaml:
//
//	go generate ./examples/locks
//
// CI checks that the committed file is fresh:
//
//	go run ./cmd/lockgen check -f examples/locks/locks.yaml
//
// In your own module, install lockgen as a tool (go get -tool
// github.com/lockgen/lockgen/cmd/lockgen) and write
// //go:generate go tool lockgen generate instead.
package locks

//go:generate go run github.com/lockgen/lockgen/cmd/lockgen generate
