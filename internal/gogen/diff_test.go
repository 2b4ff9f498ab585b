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
}

// TestDiffApplies checks on random edits that applying the diff to the old
// text gives the new text, and that context lines match the old text.
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
