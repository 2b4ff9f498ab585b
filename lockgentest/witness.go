package lockgentest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Witness watches critical sections from inside the code under test and
// fails the test when two of them overlap for the same key: the check
// that a lock really excludes, made where the work happens rather than
// on the lock. Call [Witness.Enter] first thing inside the section and
// its exit func when the section ends:
//
//	err := locker.RunExclusive(ctx, lock, func(tx *sql.Tx) error {
//		defer w.Enter("report")()
//		…
//	})
//
// A Witness is safe for concurrent use by any number of goroutines. It
// sees sections of one process; sections of two processes need a shared
// store, such as a table.
type Witness struct {
	t       testing.TB
	mu      sync.Mutex
	seq     int
	holders map[string][]*holder
}

// holder is one section in progress.
type holder struct {
	n     int
	where string // caller of Enter and its goroutine
	since time.Time
}

func (h *holder) String() string {
	return fmt.Sprintf("holder #%d (entered at %s, %v ago)", h.n, h.where, time.Since(h.since).Round(time.Microsecond))
}

// NewWitness returns a Witness that reports overlaps to t.
func NewWitness(t testing.TB) *Witness {
	return &Witness{t: t, holders: make(map[string][]*holder)}
}

// Enter records that a holder of key entered its section, and returns the
// func that records its exit; exit may be called more than once. When
// another holder of key has entered and not exited, the test fails
// (t.Errorf) naming both: where each entered (file:line and goroutine)
// and how long ago. Sections of different keys never conflict.
func (w *Witness) Enter(key string) (exit func()) {
	w.t.Helper()
	h := &holder{where: caller(), since: time.Now()}
	w.mu.Lock()
	w.seq++
	h.n = w.seq
	inside := append([]*holder(nil), w.holders[key]...)
	w.holders[key] = append(w.holders[key], h)
	w.mu.Unlock()
	for _, other := range inside {
		w.t.Errorf("lockgentest: Witness: two holders of %q overlap: %v entered while %v had not exited", key, h, other)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			hs := w.holders[key]
			for i, o := range hs {
				if o == h {
					w.holders[key] = append(hs[:i:i], hs[i+1:]...)
					break
				}
			}
			if len(w.holders[key]) == 0 {
				delete(w.holders, key)
			}
		})
	}
}

// caller is Enter's caller, file:line, and its goroutine.
func caller() string {
	where := "unknown"
	if _, file, line, ok := runtime.Caller(2); ok {
		if i := strings.LastIndexByte(file, '/'); i >= 0 {
			if j := strings.LastIndexByte(file[:i], '/'); j >= 0 {
				file = file[j+1:]
			}
		}
		where = fmt.Sprintf("%s:%d", file, line)
	}
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	// "goroutine 42 [running]:..."
	if f := strings.Fields(string(buf)); len(f) >= 2 && f[0] == "goroutine" {
		where += " on goroutine " + f[1]
	}
	return where
}
