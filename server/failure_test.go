package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/dolly/control"
	"dolly/dolly/node"
	"dolly/internal/testimage"
)

// watchWriter collects output and closes seen once it contains want.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// openFDs counts the process's open files, except those the Go runtime
// opens on its own (it watches the cgroup's CPU limit).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("skipped: cannot count open files: %v", err)
	}
	n := 0
	for _, e := range ents {
		dst, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if !strings.HasPrefix(dst, "/sys/fs/cgroup/") {
			n++
		}
	}
	return n
}

// TestFailedCastLeaksNothing runs a cast in which a node dies mid-way and
// checks that afterwards the server and the nodes have closed every
// connection and ended every goroutine they started.
func TestFailedCastLeaksNothing(t *testing.T) {
	const size = 12 << 20
	img := filepath.Join(t.TempDir(), "dense.img")
	if err := testimage.Write(img, size, 5, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	targets := oldDisks(t, 3, size)
	runtime.GC()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	var before []string
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, l := range ents {
			dst, _ := os.Readlink(filepath.Join("/proc/self/fd", l.Name()))
			before = append(before, l.Name()+"="+dst)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := &watchWriter{want: "casting ", seen: make(chan struct{})}
	addrc := make(chan string, 1)
	cfg := Config{Image: img, Shape: capacity.KindChain, Listen: "127.0.0.1:0", Nodes: 3, NoProbe: true, Yes: true,
		MaxRate: 16e6, Out: out, ProgressEvery: 50 * time.Millisecond, NodeTimeout: time.Second,
		Ready: func(a net.Addr) { addrc <- a.String() }}
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, runErr = Run(ctx, cfg)
	}()
	addr := <-addrc
	nodeErrs := make([]error, 3)
	var wg sync.WaitGroup
	for i, tg := range targets {
		nctx, ncancel := context.WithCancel(ctx)
		defer ncancel()
		if i == 1 {
			// The middle node dies once the cast runs.
			go func() {
				select {
				case <-out.seen:
				case <-ctx.Done():
				}
				ncancel()
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, nodeErrs[i] = node.Run(nctx, node.Config{Server: addr, Target: tg, Name: fmt.Sprintf("pc%02d", i+1),
				DataListen: "127.0.0.1:0", JoinTimeout: 5 * time.Second, NoProbe: true})
		}()
	}
	wg.Wait()
	<-done
	if runErr == nil {
		t.Fatalf("the cast succeeded with a node dead:\n%s", out.String())
	}
	if nodeErrs[0] != nil || nodeErrs[2] != nil || nodeErrs[1] == nil {
		t.Fatalf("node errors %v:\n%s", nodeErrs, out.String())
	}
	for _, i := range []int{0, 2} {
		if got, _ := testimage.SHA256(targets[i], size); got == "" {
			t.Errorf("pc%02d: no target", i+1)
		}
	}

	// Goroutines that were told to stop take a moment to return.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), openFDs(t)
		if g <= goroutines && f <= fds {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			links, _ := os.ReadDir("/proc/self/fd")
			var open []string
			for _, l := range links {
				dst, _ := os.Readlink(filepath.Join("/proc/self/fd", l.Name()))
				open = append(open, l.Name()+"="+dst)
			}
			t.Fatalf("after the cast: %d goroutines (before: %d), %d open files (before: %d): %v (before: %v)\n%s", g, goroutines, f, fds, open, before, buf)
		}
		time.Sleep(20 * time.Millisecond) // nothing to wait on: goroutines wind down
	}
}

// TestCheckNodesTakesOutSilentAndStalledNodes checks the rules that take a
// node out: silence past the node timeout; no progress past the stall
// timeout while its upstream is well ahead, or has the whole stream; an
// upstream that left after its verdict while a child still lacked the end
// of the stream. A node that is slow but moving, or that waits on an
// upstream with nothing more to give, stays.
func TestCheckNodesTakesOutSilentAndStalledNodes(t *testing.T) {
	now := time.Now()
	cfg := Config{NodeTimeout: 5 * time.Second, StallTimeout: 30 * time.Second}
	cfg.defaults()
	s := &Server{cfg: cfg, events: make(chan castEvent, 16), src: &source{feed: &feed{}}, tree: newCastTree()}
	s.src.sent.Store(100 << 20)
	conn := func() *control.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		go func() { // the node's end: take the pings
			buf := make([]byte, 4096)
			for {
				if _, err := b.Read(buf); err != nil {
					return
				}
			}
		}()
		return control.NewConn(a)
	}
	node := func(name string, up *vertex, pos int64, heard, moved time.Duration) *nodeState {
		n := &nodeState{name: name, conn: conn(), status: stCasting, pos: pos, lastHeard: now.Add(-heard), lastMoved: now.Add(-moved)}
		s.tree.add(up, n)
		return n
	}
	under := func(n *nodeState) *vertex { return s.tree.at[n] }
	healthy := node("healthy", s.tree.root, 90<<20, time.Second, time.Second)
	silent := node("silent", under(healthy), 50<<20, 6*time.Second, time.Second)
	stalled := node("stalled", under(healthy), 10<<20, time.Second, 31*time.Second)
	waiting := node("waiting", under(stalled), 10<<20-1<<20, time.Second, 40*time.Second) // its upstream has little more
	slow := node("slow", under(healthy), 20<<20, time.Second, 2*time.Second)
	finished := func(name string, left bool) *nodeState {
		n := node(name, under(healthy), 100<<20, time.Second, time.Second)
		n.status, n.verdict, n.left = stDone, verified, left
		return n
	}
	// Behind an upstream that has it all, by less than stallMargin.
	done := finished("done", false)
	shortOfTheEnd := node("short of the end", under(done), 100<<20-300<<10, time.Second, 31*time.Second)
	// Behind an upstream that said goodbye (having waited for its
	// children's kernels to take the stream): rewired once it stalls,
	// not when its disk pauses for a few seconds.
	gone := finished("gone", true)
	orphan := node("orphan", under(gone), 99<<20, time.Second, 31*time.Second)
	gone4 := finished("gone4", true)
	pausing := node("pausing", under(gone4), 99<<20, time.Second, 6*time.Second)
	gone2 := finished("gone2", true)
	hasItAll := node("has it all", under(gone2), 100<<20, time.Second, 40*time.Second) // syncing its disk
	gone3 := finished("gone3", true)
	tailArriving := node("tail arriving", under(gone3), 99<<20, time.Second, 2*time.Second)
	// A verified upstream that fell silent (its power went) is gone too;
	// one still heard from is still delivering.
	mute := finished("mute", false)
	mute.lastHeard = now.Add(-6 * time.Second)
	orphan2 := node("orphan2", under(mute), 99<<20, time.Second, 6*time.Second)
	heard := finished("heard", false)
	delivering := node("delivering", under(heard), 99<<20, time.Second, 6*time.Second)
	s.castNodes = []*nodeState{healthy, silent, stalled, waiting, slow, done, shortOfTheEnd, gone, orphan, gone2, hasItAll, gone3, tailArriving,
		mute, orphan2, heard, delivering, gone4, pausing}
	s.checkNodes(now)
	close(s.events)
	got := map[string]string{}
	for e := range s.events {
		got[e.node.name] = e.reason
	}
	want := map[string]string{
		"silent":           "no word from it",
		"stalled":          "stalled: no progress",
		"short of the end": "stalled: no progress for 31s while its upstream was 307.2 kB ahead",
		"gone":             "went away before orphan had the whole stream",
		"mute":             "went away before orphan2 had the whole stream",
	}
	for name, reason := range want {
		if !strings.Contains(got[name], reason) {
			t.Errorf("%s: reason %q, want %q", name, got[name], reason)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s taken out: %s", name, got[name])
		}
	}
}
