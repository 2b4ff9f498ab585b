// Package decl is lockgen's declarations model: it parses a locks.yaml file
// into a [File], keeping the line and column of every value, and checks it.
//
// Checking happens in two steps so that every mistake in a file is reported
// in one run. [Parse] checks each value on its own (keys, types, names,
// durations); [Check] checks the locks against each other (duplicate names,
// ID collisions, Go identifier clashes) and against the [History] of what
// lockgen emitted last time, which is how renames and removals are caught.
// Both return an [ErrorList] whose entries read "locks.yaml:LINE:COL: message".
//
// [Load] is what every lockgen command starts with: it reads the
// declarations file and the output file it names, reads that output's
// manifest (the lines lockgen wrote at its end, see [ReadManifest]) as the
// History, or, when the output is missing, the manifest of the output
// committed at git HEAD, and runs Parse and Check. The emitters (packages
// gogen and fencegen) take the checked [File] from there.
//
// The format, version "1":
//
//	version: "1"
//	package: locks              # Go package of the output
//	output: locks_gen.go        # relative to this file; default <base>_gen.go
//	locks:
//	  - name: reports.daily_email
//	    doc: Sends the end-of-day report e-mail once per day.
//	  - name: billing.invoice
//	    params:
//	      - name: tenant_id
//	        type: int64         # int64, string, uuid or bool
//	  - name: reports.rebuild
//	    shared: true            # pgadvisory.WithShared()
//	    wait: 5s                # pgadvisory.WithWait(5 * time.Second)
//	  - name: ledger.post
//	    fencing: true           # pgadvisory.WithFencing(); not with shared
//	  - name: exports.run
//	    limit: 5                # pgadvisory.WithLimit(5): RunLimited, RunSessionLimited only; not with shared or fencing
//	  - name: legacy.cleanup
//	    id: 72707               # pin: adopt a hard-coded legacy ID
//	  - name: reports.weekly
//	    renamed_from: reports.week
//	    on_rename: keep_id      # or new_id
//	retired:
//	  - reports.old             # emitted before, removed on purpose
package decl
