// Package gogen writes the Go code lockgen generates from a checked
// declarations file (see package decl): a pgadvisory.Lock value for every
// plain lock, a small constructor for every parameterized lock, the
// Declared registry, and a manifest of what it emitted (in the format
// package decl defines and reads back on the next run, so that renamed,
// removed and re-keyed locks are caught).
//
// The generated code is thin: values and constructors only. Behaviour lives
// in pgadvisory, so upgrading the runtime changes it without regenerating.
//
// decl.Load reads and checks the declarations; [Emit] returns the source,
// [WriteFile] writes it atomically and [Diff] explains a stale file.
package gogen
