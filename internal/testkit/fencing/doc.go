// Package fencing is the vocabulary of lockgen's fencing tests: fenced
// tables, the published token of a lock, the fencing sequence, and the
// holders and writers that the tests set against each other, both in raw
// SQL (the contract of 00002_fencing.sql, as migrations' tests drive it) and
// through pgadvisory's front doors (frontdoor).
//
// Every table has the columns (id int PRIMARY KEY, balance int NOT NULL,
// fencing_token bigint); [Rows] reads them back.
package fencing
