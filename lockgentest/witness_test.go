package lockgentest_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/lockgen/lockgen/lockgentest"
)

// TestWitnessKeys: sections of different keys, and of one key one after
// the other, do not conflict; exit may be called twice; a section entered
// while another of its key is inside fails the test, from any goroutine.
func TestWitnessKeys(t *testing.T) {
	r := runAs(t, func(tb testing.TB) {
		w := lockgentest.NewWitness(tb)
		exitA := w.Enter("a")
		exitB := w.Enter("b")
		exitA()
		exitA()
		w.Enter("a")()
		exitB()
		// Sections of "c" from 16 goroutines, one after the other (a
		// mutex orders them, as a lock would).
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				w.Enter("c")()
			}()
		}
		wg.Wait()
	})
	if r.Failed() {
		t.Fatalf("sections that never overlap failed the test:\n%s", r.failures())
	}

	r = runAs(t, func(tb testing.TB) {
		w := lockgentest.NewWitness(tb)
		exit := w.Enter("a")
		done := make(chan struct{})
		go func() { defer close(done); w.Enter("a")() }()
		<-done
		exit()
	})
	if got := r.failures(); !strings.Contains(got, `two holders of "a" overlap`) || strings.Count(got, "\n") != 0 {
		t.Fatalf("one overlap from another goroutine: want one report, got:\n%s", got)
	}
}
