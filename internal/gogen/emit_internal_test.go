package gogen

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWrap: generated comment text fills lines up to commentWidth (76)
// bytes: a line of exactly 76 stays whole, and the control, 77, breaks
// before its last word. A word longer than a line stands alone on the
// first line, with no empty line before it.
func TestWrap(t *testing.T) {
	word := func(n int) string { return strings.Repeat("x", n) }
	exact := word(40) + " " + word(35) // 76 bytes
	require.Len(t, exact, commentWidth)
	require.Equal(t, []string{exact}, wrap(exact+"\n"))
	require.Equal(t, []string{exact, "y"}, wrap(exact+" y"))

	over := word(40) + " " + word(36) // 77 bytes
	require.Equal(t, []string{word(40), word(36)}, wrap(over))

	long := word(commentWidth + 10)
	require.Equal(t, []string{long, "is long."}, wrap(long+" is long."))
	require.Equal(t, []string{""}, wrap(""), "no text: one empty line")
}
