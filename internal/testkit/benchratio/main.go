// Command benchratio summarises `go test -bench` output: per-benchmark
// medians, and the ratios between benchmarks that the project claims.
//
// Usage:
//
//	go run ./internal/testkit/benchratio [-strict] [-unit ns/op] [-ratio 'A : B <= 1.05']... FILE...
//
// The i-th result of a benchmark in the input is its i-th sample. When the
// input comes from interleaved passes (the whole suite run N times with
// -count 1), sample i of every benchmark comes from pass i, and the paired
// ratio of A to B is the median over passes of A_i/B_i, which cancels most
// of the drift of a noisy machine. A ratio is given as "A : B OP LIMIT" with
// OP one of <=, >= or ~ (within ±20% of LIMIT), or as "A : B" to show it
// without a claim; A may be a difference "A1 - A2" (paired per pass too:
// the extra cost of A1 over A2, measured in B); A and B are benchmark names
// without the "Benchmark" prefix and the -GOMAXPROCS suffix. Ratios compare
// ns/op, or the metric -unit names (a benchmark's own ReportMetric unit,
// such as median-µs). With -strict the
// exit status is 1 when a paired ratio misses its claim.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// sample is one result line: unit -> value.
type sample map[string]float64

// results keeps benchmarks in first-seen order.
type results struct {
	names   []string
	samples map[string][]sample
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader, res *results) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := procsSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		s := sample{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("benchratio: %q: %w", sc.Text(), err)
			}
			s[f[i+1]] = v
		}
		if _, ok := res.samples[name]; !ok {
			res.names = append(res.names, name)
		}
		res.samples[name] = append(res.samples[name], s)
	}
	return sc.Err()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func values(ss []sample, unit string) []float64 {
	var out []float64
	for _, s := range ss {
		if v, ok := s[unit]; ok {
			out = append(out, v)
		}
	}
	return out
}

// claim is one -ratio flag: (a - minus) ÷ b, or a ÷ b when minus is "".
type claim struct {
	a, minus, b, op string
	limit           float64
}

// name is how the claim's ratio reads in the output.
func (c claim) name() string {
	if c.minus == "" {
		return c.a + " ÷ " + c.b
	}
	return "(" + c.a + " − " + c.minus + ") ÷ " + c.b
}

type claims []claim

func (c *claims) String() string { return fmt.Sprint(*c) }

var claimRE = regexp.MustCompile(`^\s*(\S+)(?:\s+-\s+(\S+))?\s*:\s*(\S+)\s*(?:(<=|>=|~)\s*([0-9.]+))?\s*$`)

func (c *claims) Set(s string) error {
	m := claimRE.FindStringSubmatch(s)
	if m == nil {
		return fmt.Errorf("benchratio: ratio %q is not \"A : B <= LIMIT\" or \"A1 - A2 : B <= LIMIT\"", s)
	}
	var limit float64
	if m[4] != "" {
		var err error
		if limit, err = strconv.ParseFloat(m[5], 64); err != nil {
			return fmt.Errorf("benchratio: ratio %q: %w", s, err)
		}
	}
	*c = append(*c, claim{a: m[1], minus: m[2], b: m[3], op: m[4], limit: limit})
	return nil
}

func (c claim) claimText() string {
	if c.op == "" {
		return "-"
	}
	return fmt.Sprintf("%s %.2f", c.op, c.limit)
}

func (c claim) holds(r float64) bool {
	switch c.op {
	case "<=":
		return r <= c.limit
	case ">=":
		return r >= c.limit
	case "~":
		return math.Abs(r-c.limit) <= 0.2*c.limit
	default: // no claim, shown for information
		return true
	}
}

func main() {
	var cl claims
	flag.Var(&cl, "ratio", `a claimed ratio "A : B <= LIMIT" (repeatable)`)
	strict := flag.Bool("strict", false, "exit 1 when a paired ratio misses its claim")
	unit := flag.String("unit", "ns/op", "the metric the ratios compare (a unit that the benchmarks report, such as median-µs)")
	flag.Parse()
	res := &results{samples: map[string][]sample{}}
	if flag.NArg() == 0 {
		if err := parse(os.Stdin, res); err != nil {
			fatal(err)
		}
	}
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fatal(fmt.Errorf("benchratio: %w", err))
		}
		err = parse(f, res)
		f.Close()
		if err != nil {
			fatal(err)
		}
	}
	if len(res.names) == 0 {
		fatal(fmt.Errorf("benchratio: no benchmark results in the input"))
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "benchmark\tn\tmedian µs/op\tmin\tmax\trt/op\tB/op\tallocs/op\t")
	for _, name := range res.names {
		ss := res.samples[name]
		ns := values(ss, "ns/op")
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t\n", name, len(ss),
			median(ns)/1e3, slices.Min(ns)/1e3, slices.Max(ns)/1e3,
			format(median(values(ss, "rt/op")), 2), format(median(values(ss, "B/op")), 0),
			format(median(values(ss, "allocs/op")), 0))
	}
	tw.Flush()

	if len(cl) == 0 {
		return
	}
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	if *unit != "ns/op" {
		fmt.Printf("ratios of %s\n", *unit)
	}
	fmt.Fprintln(tw, "ratio\tclaim\tpaired median\tpaired min–max\tof medians\tverdict\t")
	missed := false
	for _, c := range cl {
		a, b := values(res.samples[c.a], *unit), values(res.samples[c.b], *unit)
		n := min(len(a), len(b))
		var minus []float64
		if c.minus != "" {
			minus = values(res.samples[c.minus], *unit)
			n = min(n, len(minus))
		}
		if n == 0 {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\tno data\t\n", c.name(), c.claimText())
			missed = true
			continue
		}
		var paired []float64
		for i := range n {
			top := a[i]
			if minus != nil {
				top -= minus[i]
			}
			paired = append(paired, top/b[i])
		}
		p := median(paired)
		verdict := "holds"
		if c.op == "" {
			verdict = "(info)"
		} else if !c.holds(p) {
			verdict, missed = "MISSED", true
		}
		ofMedians := median(a) / median(b)
		if minus != nil {
			ofMedians = (median(a) - median(minus)) / median(b)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.2f–%.2f\t%.3f\t%s\t\n", c.name(), c.claimText(),
			p, slices.Min(paired), slices.Max(paired), ofMedians, verdict)
	}
	tw.Flush()
	if missed && *strict {
		os.Exit(1)
	}
}

func format(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}
