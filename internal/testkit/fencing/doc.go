// Package fencing is the vocabulary of lockgen's fencing tests: fenced
// tables, the published token of a lock, the fencing sequence, and the
// holders and writers that the tests set against each other, both in raw
// SQL (the contract of lockgen's fencing migrations, as migrations' tests
// drive it) and through pgadvisory's front doors (frontdoor).
//
// Fenced tables are fenced by the Up of the very migration lockgen fence
// writes (internal/fencegen), so the tests exercise the generated layout;
// [LegacyTable] builds the first layout, which tables fenced before
// lockgen's migration 00006 still have. Tokens are published only the way
// a holder publishes them ([Publish]: a fenced pgadvisory.RunExclusive), so
// no test carries its own copy of the publish.
//
// Every table has the columns (id int PRIMARY KEY, balance int NOT NULL,
// fencing_token bigint); [Rows] reads them back.
package fencing
