package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// GremlinsPackages are the packages whose tests need no database, which
// gremlins (a mutation tool that makes its own mutants: every comparison,
// arithmetic operator and increment) tries with -gremlins. The others are
// left out because each of gremlins' mutants reruns the package's whole
// test suite: cmd/lockgen's scripts and database tests take about half a
// minute a run on a busy machine (hours for its mutants), and
// internal/doctor, internal/status and pgadvisory test against a server.
var GremlinsPackages = []string{"./keyspace", "./internal/decl", "./internal/fencegen", "./internal/gogen"}

// gremlinsGoFlags are the go command's flags for gremlins' test runs:
// -short skips the tests that only run the go command on fixed files
// (internal/gogen's TestGoldenCompiles builds the golden files, which no
// mutant of the package changes), which would multiply every run's time
// and every mutant's timeout.
const gremlinsGoFlags = "-short"

// GremlinsThreshold is the test efficacy (killed / (killed + lived), in
// percent) each package must reach.
const GremlinsThreshold = 95.0

// GremlinsEquivalents are gremlins' mutants that no test can kill, by
// position ("keyspace/params.go:85:60 CONDITIONALS_BOUNDARY"), each with
// the reason it changes nothing observable.
var GremlinsEquivalents = map[string]string{
	"internal/decl/manifest.go:86:8 CONDITIONALS_BOUNDARY": "at < 0 → at <= 0: at is the index of \"\\n\" before the manifest marker, " +
		"and ReadManifest has already required the file to begin with GeneratedHeader, so at is never 0",
	"internal/decl/parse.go:164:49 ARITHMETIC_BASE": "len(n.Content)/2 → *2 is the size hint of a map: " +
		"it changes how much memory the map reserves, nothing the parser returns",
	"internal/decl/parse.go:165:18 CONDITIONALS_BOUNDARY": "i+1 < len → i+1 <= len: a YAML mapping node's Content holds key and value " +
		"pairs, so its length is even; i is even, i+1 odd, and i+1 == len never holds",
	"internal/decl/parse.go:465:8 CONDITIONALS_BOUNDARY": "i >= len(line) → i > len(line) inside the column walk: col is the column " +
		"of the scalar's first character (after its opening quote), which is on that line, so the walk never reaches the line's end before col",
	"internal/decl/parse.go:471:7 CONDITIONALS_BOUNDARY": "i > len(line) → i >= len(line) after the column walk: i is the byte of the " +
		"scalar's first character, or of its closing quote when it is empty, both on the line, so i < len(line)",
	"internal/gogen/diff.go:129:16 CONDITIONALS_BOUNDARY": "d <= maxD → d < maxD in myers: the search reaches d == n+m only when a and b " +
		"have no line in common; Myers' script is then every removal before every addition (a removal wins a tie), which is the " +
		"replaceAll that the mutant returns instead",
	"internal/gogen/diff.go:157:29 CONDITIONALS_BOUNDARY": "d >= 0 → d > 0 in walkBack: step 0 only adds the common lines at the start " +
		"of the region, and diffLines has taken the common prefix off, so a[0] != b[0] (or one side is empty) and there are none",
	"internal/gogen/diff.go:181:31 CONDITIONALS_BOUNDARY": "i < j → i <= j in walkBack's reversal: when i == j the middle element is " +
		"swapped with itself",
}

// gremlinsReport is the part of gremlins' JSON output (--output) read here.
type gremlinsReport struct {
	Files []struct {
		FileName  string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

// gremlinsResult is one package's outcome.
type gremlinsResult struct {
	pkg                                     string
	killed, lived, notCovered, timedOut, nv int
	livedAt                                 []string // positions of the mutants that lived
}

// efficacy is gremlins' test efficacy in percent.
func (r gremlinsResult) efficacy() float64 {
	if r.killed+r.lived == 0 {
		return 100
	}
	return 100 * float64(r.killed) / float64(r.killed+r.lived)
}

// readGremlins reads gremlins' JSON report of pkg ("./keyspace").
func readGremlins(pkg string, data []byte) (gremlinsResult, error) {
	var rep gremlinsReport
	if err := json.Unmarshal(data, &rep); err != nil {
		return gremlinsResult{}, fmt.Errorf("reading gremlins' report of %s: %w", pkg, err)
	}
	r := gremlinsResult{pkg: pkg}
	dir := strings.TrimPrefix(pkg, "./")
	for _, f := range rep.Files {
		for _, m := range f.Mutations {
			switch m.Status {
			case "KILLED":
				r.killed++
			case "LIVED":
				r.lived++
				file := f.FileName
				if !strings.HasPrefix(file, dir+"/") {
					file = path.Join(dir, file)
				}
				r.livedAt = append(r.livedAt, fmt.Sprintf("%s:%d:%d %s", file, m.Line, m.Column, m.Type))
			case "NOT COVERED":
				r.notCovered++
			case "TIMED OUT":
				r.timedOut++
			case "NOT VIABLE":
				r.nv++
			}
		}
	}
	sort.Strings(r.livedAt)
	return r, nil
}

// runGremlins runs gremlins on each package in the scratch copy, with the
// gremlins the tools module pins, and prints one line per package and every
// mutant that lived, with its reason when it is listed as equivalent. The
// run is clean when each package reaches GremlinsThreshold and every mutant
// that lived is listed.
func runGremlins(ctx context.Context, r *runner, pkgs []string, stdout, stderr io.Writer) (bool, error) {
	clean := true
	var results []gremlinsResult
	for _, pkg := range pkgs {
		out, err := os.CreateTemp("", "lockgen-gremlins-*.json")
		if err != nil {
			return false, err
		}
		out.Close()
		defer os.Remove(out.Name())
		start := time.Now()
		cmd := exec.CommandContext(ctx, r.goBin, "tool", "-modfile=tools/go.mod", "gremlins", "unleash",
			"--workers", "2", "--timeout-coefficient", "5", "--output", out.Name(), pkg)
		cmd.Dir = r.s.dir
		cmd.Env = append(os.Environ(), "GOFLAGS="+gremlinsGoFlags)
		killGroup(cmd)
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Run(); err != nil {
			return false, fmt.Errorf("gremlins unleash %s: %w\n%s", pkg, err, log.String())
		}
		data, err := os.ReadFile(out.Name())
		if err != nil {
			return false, err
		}
		res, err := readGremlins(pkg, data)
		if err != nil {
			return false, err
		}
		fmt.Fprintf(stderr, "mutate: gremlins %s: efficacy %.2f%% (%v)\n", pkg, res.efficacy(), time.Since(start).Round(time.Second))
		results = append(results, res)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PACKAGE\tKILLED\tLIVED\tNOT COVERED\tTIMED OUT\tNOT VIABLE\tEFFICACY")
	for _, res := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.2f%%\n", res.pkg, res.killed, res.lived, res.notCovered, res.timedOut, res.nv, res.efficacy())
		if res.efficacy() < GremlinsThreshold {
			clean = false
		}
	}
	tw.Flush()
	for _, res := range results {
		for _, at := range res.livedAt {
			reason, ok := GremlinsEquivalents[at]
			if !ok {
				reason = "NOT LISTED: a test should kill it, or list it as equivalent with the reason"
				clean = false
			}
			fmt.Fprintf(stdout, "lived: %s: %s\n", at, reason)
		}
	}
	return clean, nil
}
