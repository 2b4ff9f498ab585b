package gogen

import (
	"bytes"
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around each change.
const diffContext = 3

// maxEditDistance bounds the diff's work: beyond this many changed lines the
// changed region is shown as one replacement (still a correct diff).
const maxEditDistance = 1000

// Diff returns a unified diff that turns old into new, headed by oldName
// and newName, or nil when they are equal. `lockgen check` prints it.
func Diff(oldName, newName string, old, new []byte) []byte {
	if bytes.Equal(old, new) {
		return nil
	}
	a, b := splitLines(string(old)), splitLines(string(new))
	edits := diffLines(a, b)

	var out bytes.Buffer
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	// oldAt[i] and newAt[i] count the old and new lines before edit i.
	oldAt, newAt := make([]int, len(edits)+1), make([]int, len(edits)+1)
	for i, e := range edits {
		oldAt[i+1], newAt[i+1] = oldAt[i], newAt[i]
		if e.op != '+' {
			oldAt[i+1]++
		}
		if e.op != '-' {
			newAt[i+1]++
		}
	}
	for i := 0; i < len(edits); {
		if edits[i].op == ' ' {
			i++
			continue
		}
		start, end := max(i-diffContext, 0), i
		for {
			for end < len(edits) && edits[end].op != ' ' {
				end++
			}
			same := end
			for same < len(edits) && edits[same].op == ' ' {
				same++
			}
			if same < len(edits) && same-end <= 2*diffContext {
				end = same
				continue
			}
			end = min(end+diffContext, len(edits))
			break
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n",
			hunkRange(oldAt[start], oldAt[end]-oldAt[start]),
			hunkRange(newAt[start], newAt[end]-newAt[start]))
		for _, e := range edits[start:end] {
			out.WriteByte(e.op)
			out.WriteString(e.line)
			if !strings.HasSuffix(e.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.Bytes()
}

func hunkRange(before, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", before)
	}
	if n == 1 {
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, n)
}

// splitLines splits s into lines that keep their "\n".
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

type edit struct {
	op   byte // ' ' same, '-' only in old, '+' only in new
	line string
}

// diffLines is a line diff: the common prefix and suffix, and Myers'
// shortest edit script for the rest.
func diffLines(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	edits := make([]edit, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		edits = append(edits, edit{' ', l})
	}
	edits = append(edits, myers(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		edits = append(edits, edit{' ', l})
	}
	return edits
}

// myers returns a shortest edit script from a to b (E. Myers, "An O(ND)
// Difference Algorithm and Its Variations", 1986), keeping the frontier of
// every step for the walk back: O((N+M)·D) time, O(D²) memory.
func myers(a, b []string) []edit {
	n, m := len(a), len(b)
	maxD := n + m
	off := maxD + 1
	v := make([]int, 2*maxD+3)
	var trace [][]int
	for d := 0; d <= maxD; d++ {
		if d > maxEditDistance {
			return replaceAll(a, b)
		}
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				return walkBack(trace, a, b)
			}
		}
	}
	return replaceAll(a, b)
}

func walkBack(trace [][]int, a, b []string) []edit {
	x, y := len(a), len(b)
	var rev []edit
	for d := len(trace) - 1; d >= 0; d-- {
		vs := trace[d]
		at := func(k int) int { return vs[k+d+1] }
		k := x - y
		prevK := k - 1
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			prevK = k + 1
		}
		prevX := at(prevK)
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			rev = append(rev, edit{' ', a[x-1]})
			x, y = x-1, y-1
		}
		if d > 0 {
			if x == prevX {
				rev = append(rev, edit{'+', b[y-1]})
				y--
			} else {
				rev = append(rev, edit{'-', a[x-1]})
				x--
			}
		}
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

func replaceAll(a, b []string) []edit {
	edits := make([]edit, 0, len(a)+len(b))
	for _, l := range a {
		edits = append(edits, edit{'-', l})
	}
	for _, l := range b {
		edits = append(edits, edit{'+', l})
	}
	return edits
}
