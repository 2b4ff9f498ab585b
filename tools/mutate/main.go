// Command mutate breaks lockgen's safety core on purpose, one named mutant at
// a time, and reports whether the tests notice.
//
// Each mutant (mutants.go) names a file of the repository, an exact text
// found once in it, its replacement, the promise it breaks and the tests
// that must fail when it is applied. mutate copies the repository to a
// temporary directory (the working tree is never written), applies one
// mutant at a time there, runs its tests with go test (with CI=true, so
// that a test without its database fails instead of skipping) under a
// deadline, and prints one line per mutant: killed (by which tests),
// survived, timed out, or invalid (it does not build), with totals per
// area. It first runs the same tests without any mutant: a test that fails
// anyway would make every mutant it covers look killed.
//
// Run it from the repository root:
//
//	go run -C tools ./mutate              # every mutant (tens of minutes)
//	go run -C tools ./mutate -run fence   # the mutants whose name matches
//	go run -C tools ./mutate -check       # only check that the list applies
//	go run -C tools ./mutate -list        # print the list
//	go run -C tools ./mutate -gremlins    # gremlins on the packages that test without a database
//
// -check needs no database and runs no test: every mutant's text must be
// found exactly once in its file, a mutant of a migration must target the
// latest definition of its function or view, and its -run pattern must
// select a test. CI runs it, so that the list does not rot when the code
// changes.
//
// -gremlins runs gremlins (pinned in tools/go.mod) instead, on
// GremlinsPackages, in the scratch copy: each package's test efficacy must
// reach GremlinsThreshold, and every mutant of gremlins' that lived must be
// listed in GremlinsEquivalents with the reason no test can kill it.
//
// The exit status is 0 when every mutant is killed (or survives and is
// marked equivalent, with the reason), 1 otherwise, 2 for bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("mutate", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", "", "the repository root (default: the git work tree containing the current directory)")
	check := fl.Bool("check", false, "only check that every mutant still applies; run no test")
	list := fl.Bool("list", false, "print the mutants and exit")
	sel := fl.String("run", "", "only the mutants whose name or area matches this regular expression")
	timeout := fl.Duration("timeout", 4*time.Minute, "deadline for one mutant's tests")
	baseline := fl.Bool("baseline", true, "first run the selected mutants' tests without any mutant")
	verbose := fl.Bool("v", false, "print go test's output for every mutant that is not killed")
	gremlins := fl.Bool("gremlins", false, "instead of the named mutants, run gremlins on the packages that test without a database (-run selects packages)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "mutate: unexpected arguments %q\n", fl.Args())
		return 2
	}
	mutants := Mutants
	gremlinsPkgs := GremlinsPackages
	if *gremlins && *sel != "" {
		re, err := regexp.Compile(*sel)
		if err != nil {
			fmt.Fprintf(stderr, "mutate: -run: %v\n", err)
			return 2
		}
		gremlinsPkgs = nil
		for _, p := range GremlinsPackages {
			if re.MatchString(p) {
				gremlinsPkgs = append(gremlinsPkgs, p)
			}
		}
		if len(gremlinsPkgs) == 0 {
			fmt.Fprintf(stderr, "mutate: -run %q selects no package of %v\n", *sel, GremlinsPackages)
			return 2
		}
	} else if *sel != "" {
		re, err := regexp.Compile(*sel)
		if err != nil {
			fmt.Fprintf(stderr, "mutate: -run: %v\n", err)
			return 2
		}
		mutants = nil
		for _, m := range Mutants {
			if re.MatchString(m.Name) || re.MatchString(m.Area) {
				mutants = append(mutants, m)
			}
		}
		if len(mutants) == 0 {
			fmt.Fprintf(stderr, "mutate: -run %q selects no mutant\n", *sel)
			return 2
		}
	}
	if *list {
		printList(stdout, mutants)
		return 0
	}
	dir := *root
	if dir == "" {
		var err error
		if dir, err = findRoot(); err != nil {
			fmt.Fprintf(stderr, "mutate: %v\n", err)
			return 2
		}
	}
	if err := checkList(dir, mutants); err != nil {
		fmt.Fprintf(stderr, "mutate: the list does not apply to %s:\n%v\n", dir, err)
		return 1
	}
	if *check {
		fmt.Fprintf(stdout, "mutate: all %d mutants apply\n", len(mutants))
		return 0
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(stderr, "mutate: %v\n", err)
		return 2
	}
	os.Setenv("CI", "true") // a test without its database fails, never skips
	s, err := newScratch(dir)
	if err != nil {
		fmt.Fprintf(stderr, "mutate: copying the repository: %v\n", err)
		return 1
	}
	defer s.remove()
	// An interrupt stops the test under way and removes the scratch copy.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &runner{ctx: ctx, s: s, timeout: *timeout, goBin: goBin}
	if *gremlins {
		clean, err := runGremlins(ctx, r, gremlinsPkgs, stdout, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "mutate: %v\n", err)
			return 1
		}
		if !clean {
			return 1
		}
		return 0
	}
	if *baseline {
		fmt.Fprintf(stderr, "mutate: running the tests without mutants first\n")
		err := r.baseline(mutants)
		if err == nil && ctx.Err() != nil {
			err = errors.New("interrupted")
		}
		if err != nil {
			fmt.Fprintf(stderr, "mutate: %v\n", err)
			return 1
		}
	}
	var results []Result
	for i, m := range mutants {
		res, err := r.try(m)
		if err == nil && ctx.Err() != nil {
			err = errors.New("interrupted")
		}
		if err != nil {
			fmt.Fprintf(stderr, "mutate: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "mutate: [%d/%d] %s: %s %s (%v)\n", i+1, len(mutants), m.Name, res.Outcome, strings.Join(res.By, " "), res.Elapsed.Round(time.Second))
		if *verbose && res.Outcome != Killed {
			fmt.Fprintln(stderr, res.Output)
		}
		results = append(results, res)
	}
	if !report(stdout, results) {
		return 1
	}
	return 0
}

// findRoot is the git work tree around the current directory.
func findRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", errors.New("cannot find the repository root (git rev-parse --show-toplevel); use -root")
	}
	return filepath.Clean(strings.TrimSpace(string(out))), nil
}

func printList(w io.Writer, mutants []Mutant) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTANT\tAREA\tFILE\tTESTS\tPROMISE")
	for _, m := range mutants {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s -run %s\t%s\n", m.Name, m.Area, m.File, strings.Join(m.Pkgs, " "), m.Run, m.Promise)
	}
	tw.Flush()
}

// report prints the table and the totals per area, and says whether the
// run is clean: every mutant killed, or survived and marked equivalent.
func report(w io.Writer, results []Result) bool {
	clean := true
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTANT\tAREA\tOUTCOME\tBY\tTIME")
	type totals struct{ n, killed, survived, equivalent, timedOut, invalid int }
	per := map[string]*totals{}
	var areas []string
	for _, r := range results {
		m := r.Mutant
		t := per[m.Area]
		if t == nil {
			t = &totals{}
			per[m.Area] = t
			areas = append(areas, m.Area)
		}
		t.n++
		outcome := string(r.Outcome)
		by := strings.Join(r.By, " ")
		switch {
		case r.Outcome == Killed && m.Equivalent != "":
			outcome = "killed, but marked equivalent"
			clean = false
			t.killed++
		case r.Outcome == Killed:
			t.killed++
		case r.Outcome == Survived && m.Equivalent != "":
			outcome = "survived (equivalent)"
			by = m.Equivalent
			t.equivalent++
		case r.Outcome == Survived:
			by = m.Promise
			t.survived++
			clean = false
		case r.Outcome == TimedOut:
			t.timedOut++
			clean = false
		default:
			t.invalid++
			clean = false
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", m.Name, m.Area, outcome, by, r.Elapsed.Round(time.Second))
	}
	tw.Flush()
	fmt.Fprintln(w)
	sort.Strings(areas)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "AREA\tMUTANTS\tKILLED\tSURVIVED\tEQUIVALENT\tTIMED OUT\tINVALID\t")
	var all totals
	for _, a := range areas {
		t := per[a]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", a, t.n, t.killed, t.survived, t.equivalent, t.timedOut, t.invalid)
		all.n += t.n
		all.killed += t.killed
		all.survived += t.survived
		all.equivalent += t.equivalent
		all.timedOut += t.timedOut
		all.invalid += t.invalid
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t\n", all.n, all.killed, all.survived, all.equivalent, all.timedOut, all.invalid)
	tw.Flush()
	return clean
}
