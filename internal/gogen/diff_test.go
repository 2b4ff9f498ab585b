package gogen_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lockgen/lockgen/internal/gogen"
)

func TestDiffExample(t *testing.T) {
	old := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\n"
	new := "a\nb\nc\nD\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn\n"
	require.Equal(t, `--- old
+++ new
@@ -1,7 +1,7 @@
 a
 b
 c
-d
+D
 e
 f
 g
@@ -11,3 +11,4 @@
 k
 l
 m
+n
`, string(gogen.Diff("old", "new", []byte(old), []byte(new))))

	require.Nil(t, gogen.Diff("old", "new", []byte(old), []byte(old)))

	// From nothing, and a missing final newline.
	require.Equal(t, "--- /dev/null\n+++ new\n@@ -0,0 +1,2 @@\n+x\n+y\n", string(gogen.Diff("/dev/null", "new", nil, []byte("x\ny\n"))))
	require.Equal(t, "--- old\n+++ new\n@@ -1 +1 @@\n-x\n\\ No newline at end of file\n+x\n", string(gogen.Diff("old", "new", []byte("x"), []byte("x\n"))))

	// A line moved behind another: one line added before it, one removed
	// after it, as diff -u says it.
	require.Equal(t, "--- old\n+++ new\n@@ -1,2 +1,2 @@\n+a\n c\n-b\n", string(gogen.Diff("old", "new", []byte("c\nb\n"), []byte("a\nc\n"))))
}

// TestDiffApplies checks on random edits that applying the diff to the old
// text gives the new text, that context lines match the old text, and that
// the diff is a shortest one: it changes no more lines than a longest
// common subsequence leaves.
func TestDiffApplies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		old := randomLines(rng, rng.IntN(40))
		new := mutate(rng, old)
		a, b := strings.Join(old, ""), strings.Join(new, "")
		d := gogen.Diff("old", "new", []byte(a), []byte(b))
		if a == b {
			require.Nil(t, d)
			continue
		}
		got, err := apply(a, string(d))
		require.NoError(t, err, "case %d:\n%s", i, d)
		require.Equal(t, b, got, "case %d:\n%s", i, d)
		require.Equal(t, len(old)+len(new)-2*lcs(old, new), changed(string(d)), "case %d: not a shortest diff:\n%s", i, d)
	}
	// Past the edit-distance bound the changed region is one replacement,
	// still a correct diff.
	var big1, big2 strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&big1, "old %d\n", i)
		fmt.Fprintf(&big2, "new %d\n", i)
	}
	d := gogen.Diff("old", "new", []byte("same\n"+big1.String()), []byte("same\n"+big2.String()))
	got, err := apply("same\n"+big1.String(), string(d))
	require.NoError(t, err)
	require.Equal(t, "same\n"+big2.String(), got)

	// Control: apply notices a diff that does not fit.
	_, err = apply("x\n", "--- a\n+++ b\n@@ -1 +1 @@\n-y\n+z\n")
	require.Error(t, err)
}

// lcs is the length of a longest common subsequence of a and b.
func lcs(a, b []string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			if a[i] == b[j] {
				cur[j+1] = prev[j] + 1
			} else {
				cur[j+1] = max(prev[j+1], cur[j])
			}
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// changed counts a diff's removed and added lines.
func changed(diff string) int {
	n := 0
	for _, line := range strings.Split(diff, "\n")[2:] {
		if strings.HasPrefix(line, "-") || strings.HasPrefix(line, "+") {
			n++
		}
	}
	return n
}

func randomLines(rng *rand.Rand, n int) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = string(rune('a'+rng.IntN(4))) + "\n"
	}
	return lines
}

func mutate(rng *rand.Rand, lines []string) []string {
	out := append([]string(nil), lines...)
	for range rng.IntN(6) {
		switch i := rng.IntN(len(out) + 1); rng.IntN(3) {
		case 0:
			out = append(out[:i], append(randomLines(rng, 1+rng.IntN(3)), out[i:]...)...)
		case 1:
			if i < len(out) {
				out = append(out[:i], out[i+1:]...)
			}
		case 2:
			if i < len(out) {
				out[i] = "z\n"
			}
		}
	}
	return out
}

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$`)

// apply is a minimal patch(1) for the diffs above.
func apply(old, diff string) (string, error) {
	src := strings.SplitAfter(old, "\n")
	if src[len(src)-1] == "" {
		src = src[:len(src)-1]
	}
	lines := strings.SplitAfter(diff, "\n")
	var out []string
	next := 0 // next old line to copy
	for i := 2; i < len(lines) && lines[i] != ""; {
		m := hunkHeader.FindStringSubmatch(strings.TrimSuffix(lines[i], "\n"))
		if m == nil {
			return "", fmt.Errorf("bad hunk header %q", lines[i])
		}
		start, _ := strconv.Atoi(m[1])
		if m[2] != "0" {
			start-- // 1-based, except for empty ranges
		}
		if start < next {
			return "", fmt.Errorf("overlapping hunk at %d", start)
		}
		out = append(out, src[next:start]...)
		next = start
		for i++; i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@"); i++ {
			op, text := lines[i][0], lines[i][1:]
			switch op {
			case ' ', '-':
				if next >= len(src) || src[next] != text {
					return "", fmt.Errorf("line %d does not match %q", next+1, text)
				}
				if op == ' ' {
					out = append(out, text)
				}
				next++
			case '+':
				out = append(out, text)
			default:
				return "", fmt.Errorf("bad line %q", lines[i])
			}
		}
	}
	out = append(out, src[next:]...)
	return strings.Join(out, ""), nil
}

// TestDiffHunksMerge: two changes with six unchanged lines between them
// (twice the context) make one hunk, as diff -u makes it; with seven, the
// control, two hunks.
func TestDiffHunksMerge(t *testing.T) {
	six := gogen.Diff("old", "new", []byte("1\n2\nX\n4\n5\n6\n7\n8\n9\nY\n11\n"), []byte("1\n2\nx\n4\n5\n6\n7\n8\n9\ny\n11\n"))
	require.Equal(t, "--- old\n+++ new\n@@ -1,11 +1,11 @@\n 1\n 2\n-X\n+x\n 4\n 5\n 6\n 7\n 8\n 9\n-Y\n+y\n 11\n", string(six))

	seven := gogen.Diff("old", "new", []byte("1\n2\nX\n4\n5\n6\n7\n8\n9\n10\nY\n12\n"), []byte("1\n2\nx\n4\n5\n6\n7\n8\n9\n10\ny\n12\n"))
	require.Equal(t, "--- old\n+++ new\n@@ -1,6 +1,6 @@\n 1\n 2\n-X\n+x\n 4\n 5\n 6\n@@ -8,5 +8,5 @@\n 8\n 9\n 10\n-Y\n+y\n 12\n", string(seven))
}

// TestDiffEditDistanceBound: a changed region that needs exactly
// maxEditDistance (1000) changed lines is still diffed line by line, so the
// one line it keeps stays a context line; with one more change on each
// side (the control), or more new lines than old, the region is shown as
// one replacement, that line removed and added again.
func TestDiffEditDistanceBound(t *testing.T) {
	region := func(side string, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "%s before %d\n", side, i)
		}
		b.WriteString("kept\n")
		for i := range n {
			fmt.Fprintf(&b, "%s after %d\n", side, i)
		}
		return b.String()
	}
	// 250+250 lines removed and 250+250 added: 1000 changes.
	d := string(gogen.Diff("old", "new", []byte(region("old", 250)), []byte(region("new", 250))))
	require.Contains(t, d, "\n kept\n")
	require.NotContains(t, d, "\n-kept\n")

	for _, n := range []int{251, 300} { // as many new lines as old, and more
		d = string(gogen.Diff("old", "new", []byte(region("old", 251)), []byte(region("new", n))))
		require.Contains(t, d, "\n-kept\n")
		require.Contains(t, d, "\n+kept\n")
		got, err := apply(region("old", 251), d)
		require.NoError(t, err)
		require.Equal(t, region("new", n), got)
	}
}
