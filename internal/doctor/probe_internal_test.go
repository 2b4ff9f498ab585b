package doctor

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbeVerdicts: what each piece of evidence proves. A pid is not a
// session: behind a pooler that balances over several servers, or after a
// backend exits and its pid is reused, two server sessions can answer with
// the same pid, and only the session setting tells them apart.
func TestProbeVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name          string
		p             probe
		moved, shared bool
	}{
		{"one session, direct", probe{pidsA: []int32{7, 7, 7, 7, 7}, markerSeen: 4, pidB: 8}, false, false},
		{"statements moved between backends", probe{pidsA: []int32{7, 9, 7, 9, 7}, markerSeen: 2, pidB: 8}, true, false},
		{"same pid, setting lost", probe{pidsA: []int32{7, 7, 7, 7, 7}, markerSeen: 3, pidB: 8}, true, false},
		{"second client in the first one's session", probe{pidsA: []int32{7, 7, 7, 7, 7}, markerSeen: 4, pidB: 7, bSawMarker: true}, false, true},
		{"second client saw the setting under another pid", probe{pidsA: []int32{7, 7, 7, 7, 7}, markerSeen: 4, pidB: 8, bSawMarker: true}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.moved, tc.p.moved(), "moved")
			require.Equal(t, tc.shared, tc.p.shared(), "shared")
			require.Equal(t, tc.moved || tc.shared, tc.p.txPooler())
		})
	}
}
