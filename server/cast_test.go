package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"dolly/capacity"
	"dolly/dolly/castkey"
	"dolly/dolly/control"
	"dolly/dolly/node"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

// castResult is what one in-process cast produced.
type castResult struct {
	sum      Summary
	err      error
	out      string
	nodeErrs []error
}

// cast runs a real server and one real node per target over loopback TCP.
// Nobody probes: a probe costs a second a node, and one test covers them.
func cast(t *testing.T, cfg Config, targets []string) castResult {
	t.Helper()
	return runCast(t, cfg, targets, false)
}

// castProbed is cast with the server and every node measuring themselves.
func castProbed(t *testing.T, cfg Config, targets []string) castResult {
	t.Helper()
	return runCast(t, cfg, targets, true)
}

func runCast(t *testing.T, cfg Config, targets []string, probe bool) castResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cfg.Listen = "127.0.0.1:0"
	cfg.Nodes = len(targets)
	cfg.NoProbe = !probe
	cfg.Out = &out
	cfg.Yes = !cfg.Interactive // an interactive test answers through cfg.In
	addrc := make(chan string, 1)
	cfg.Ready = func(a net.Addr) { addrc <- a.String() }
	res := castResult{nodeErrs: make([]error, len(targets))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res.sum, res.err = Run(ctx, cfg)
	}()
	var addr string
	select {
	case addr = <-addrc:
	case <-done:
		res.out = out.String()
		return res
	}
	var wg sync.WaitGroup
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, res.nodeErrs[i] = node.Run(ctx, node.Config{
				Server: addr, Target: tg, Name: fmt.Sprintf("pc%02d", i+1),
				DataListen: "127.0.0.1:0", JoinTimeout: 5 * time.Second, NoProbe: !probe, Key: cfg.Key,
			})
		}()
	}
	wg.Wait()
	<-done
	res.out = out.String()
	return res
}

// oldDisks makes n targets of size bytes full of 0xFF, like disks that
// still hold an earlier installation.
func oldDisks(t *testing.T, n int, size int64) []string {
	t.Helper()
	dir := t.TempDir()
	var ts []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("disk%02d", i+1))
		if err := testimage.Fill(p, 0xFF, size); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, p)
	}
	return ts
}

func images(t *testing.T, size int64) (map[imaging.Encoding]string, string) {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "nt.img")
	if err := testimage.Write(raw, size, 11, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	imgs := map[imaging.Encoding]string{imaging.Raw: raw}
	for _, enc := range []imaging.Encoding{imaging.Zstd, imaging.Gzip} {
		p := raw + map[imaging.Encoding]string{imaging.Zstd: ".zst", imaging.Gzip: ".gz"}[enc]
		if err := testimage.Compress(raw, p, enc); err != nil {
			t.Fatal(err)
		}
		imgs[enc] = p
	}
	sum, err := testimage.SHA256(raw, -1)
	if err != nil {
		t.Fatal(err)
	}
	return imgs, sum
}

func TestCastTopologiesAndFormats(t *testing.T) {
	const size = 24<<20 + 999
	imgs, want := images(t, size)
	shapes := []struct {
		name   string
		shape  capacity.Kind
		fanout int
		nodes  int
	}{
		{"chain", capacity.KindChain, 1, 4},
		{"2-tree", capacity.KindTree, 2, 5},
		{"star", capacity.KindStar, 0, 3},
	}
	for _, sh := range shapes {
		for _, enc := range []imaging.Encoding{imaging.Raw, imaging.Zstd, imaging.Gzip} {
			t.Run(sh.name+"/"+enc.String(), func(t *testing.T) {
				targets := oldDisks(t, sh.nodes, size+1<<20)
				r := cast(t, Config{Image: imgs[enc], Shape: sh.shape, Fanout: sh.fanout}, targets)
				if r.err != nil {
					t.Fatalf("cast: %v\n%s", r.err, r.out)
				}
				for i, tg := range targets {
					if r.nodeErrs[i] != nil {
						t.Errorf("node %d: %v", i+1, r.nodeErrs[i])
					}
					got, err := testimage.SHA256(tg, size)
					if err != nil || got != want {
						t.Errorf("target %d: sha256 %s (%v), image %s", i+1, got, err, want)
					}
					// What lies beyond the image is left alone.
					tail, _ := os.ReadFile(tg)
					if !bytes.Equal(tail[size:], bytes.Repeat([]byte{0xFF}, len(tail)-size)) {
						t.Errorf("target %d: bytes beyond the image changed", i+1)
					}
				}
				if r.sum.Verified != sh.nodes || !strings.Contains(r.out, fmt.Sprintf("%d of %d nodes verified", sh.nodes, sh.nodes)) {
					t.Fatalf("summary: %d verified\n%s", r.sum.Verified, r.out)
				}
			})
		}
	}
}

func TestCastRefusesSmallTargetAndLeavesItUnchanged(t *testing.T) {
	const size = 8 << 20
	imgs, want := images(t, size)
	targets := oldDisks(t, 3, size)
	small := targets[1]
	if err := testimage.Fill(small, 0xAB, size/2); err != nil {
		t.Fatal(err)
	}
	before, _ := testimage.SHA256(small, -1)
	r := cast(t, Config{Image: imgs[imaging.Raw]}, targets)
	if r.err == nil {
		t.Fatal("the cast reported success with a refused node")
	}
	if !strings.Contains(r.nodeErrs[1].Error(), "is 4.2 MB, image needs 8.4 MB") {
		t.Fatalf("small node's error: %v", r.nodeErrs[1])
	}
	if !strings.Contains(r.out, "refused pc02") || !strings.Contains(r.out, "2 of 3 nodes verified") {
		t.Fatalf("server output does not report the refusal:\n%s", r.out)
	}
	after, _ := testimage.SHA256(small, -1)
	if after != before {
		t.Fatal("the refused target was changed")
	}
	for _, i := range []int{0, 2} {
		if r.nodeErrs[i] != nil {
			t.Fatalf("node %d: %v", i+1, r.nodeErrs[i])
		}
		if got, _ := testimage.SHA256(targets[i], size); got != want {
			t.Fatalf("node %d: target differs from image", i+1)
		}
	}
}

func TestNodeTargetOverridesServerTarget(t *testing.T) {
	const size = 5 << 20
	imgs, want := images(t, size)
	disks := oldDisks(t, 2, size)
	// Node 1 names no target and gets the server's, which must be a block
	// device; node 2 names its own.
	dev := testenv.LoopDevice(t, disks[0])
	r := cast(t, Config{Image: imgs[imaging.Raw], Target: dev}, []string{"", disks[1]})
	if r.err != nil {
		t.Fatalf("cast: %v\n%s", r.err, r.out)
	}
	// The loop device writes through the page cache of its file.
	backing, _ := filepath.EvalSymlinks(disks[0])
	if want := dev + " (block device, 5.2 MB; a loop device over " + backing + ", without direct I/O)"; !strings.Contains(r.out, want) {
		t.Errorf("output lacks %q:\n%s", want, r.out)
	}
	for i, d := range disks {
		if got, _ := testimage.SHA256(d, size); got != want {
			t.Errorf("disk %d differs from the image", i+1)
		}
	}
	noTarget := cast(t, Config{Image: imgs[imaging.Raw]}, []string{""})
	if noTarget.err == nil || !strings.Contains(noTarget.nodeErrs[0].Error(), "no target") {
		t.Fatalf("node without any target: %v", noTarget.nodeErrs[0])
	}
}

// Loop devices without direct I/O write through the page cache of their
// files, which no probe sees: the preview says so, and how to avoid it.
func TestPreviewNotesLoopDevicesWithoutDirectIO(t *testing.T) {
	const size = 5 << 20
	imgs, want := images(t, size)
	disks := oldDisks(t, 2, size)
	devs := []string{testenv.LoopDevice(t, disks[0]), testenv.LoopDevice(t, disks[1])}
	r := castProbed(t, Config{Image: imgs[imaging.Raw]}, devs)
	if r.err != nil {
		t.Fatalf("cast: %v\n%s", r.err, r.out)
	}
	if want := "pc01, pc02 write loop devices without direct I/O"; !strings.Contains(r.out, want) || !strings.Contains(r.out, "losetup --direct-io=on") {
		t.Errorf("output lacks %q and the way out:\n%s", want, r.out)
	}
	for i, d := range disks {
		if got, _ := testimage.SHA256(d, size); got != want {
			t.Errorf("disk %d differs from the image", i+1)
		}
	}
}

func TestCastMaxRateShapesTheSource(t *testing.T) {
	const size = 6 << 20
	// Dense data so the whole image travels.
	dense := filepath.Join(t.TempDir(), "dense.img")
	if err := testimage.Write(dense, size, 3, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := cast(t, Config{Image: dense, MaxRate: 12e6}, oldDisks(t, 2, size))
	if r.err != nil {
		t.Fatalf("cast: %v\n%s", r.err, r.out)
	}
	// 6.3 MB at 12 MB/s cannot take less than about half a second.
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Fatalf("a rate-limited cast of %d bytes at 12 MB/s took only %v", size, d)
	}
}

func TestCastBadImage(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "img")
	testimage.Write(raw, 4<<20, 1, testimage.Dense)
	zst := raw + ".zst"
	testimage.Compress(raw, zst, imaging.Zstd)
	b, _ := os.ReadFile(zst)
	os.WriteFile(zst, b[:len(b)/2], 0o644)
	targets := oldDisks(t, 2, 8<<20)
	r := cast(t, Config{Image: zst}, targets)
	if r.err == nil || !strings.Contains(r.err.Error(), "truncated or corrupt") {
		t.Fatalf("cast of a truncated image: %v", r.err)
	}
	for i, tg := range targets {
		// A node that joined before the scan failed is told why; one that
		// connects while the server shuts down only sees it go.
		if err := r.nodeErrs[i]; err == nil || (strings.Contains(err.Error(), "aborted") && !strings.Contains(err.Error(), "truncated or corrupt")) {
			t.Errorf("node %d: %v", i+1, err)
		}
		b, _ := os.ReadFile(tg)
		if !bytes.Equal(b, bytes.Repeat([]byte{0xFF}, len(b))) {
			t.Errorf("target %d was written", i+1)
		}
	}
}

// With probes the server shows the model's prediction for every plan and
// picks the best, deciding whether to compress; the cast still lands the
// same bytes whatever it picks.
func TestCastWithProbesPreviewsAndPicks(t *testing.T) {
	const size = 12 << 20
	imgs, want := images(t, size)
	// Disks larger than the image: the write probe needs room to time.
	targets := oldDisks(t, 2, 32<<20)
	r := castProbed(t, Config{Image: imgs[imaging.Raw], measureDisks: true}, targets)
	if r.err != nil {
		t.Fatalf("cast: %v\n%s", r.err, r.out)
	}
	wants := []string{"capacity model: predicted rate of each plan", "▶ ", "plan: ", "predicted", "MB/s, ETA",
		// Both targets are files on one machine: one disk, measured with
		// both writing at once.
		"measuring the disk the 2 nodes on one machine share", "2 nodes on one machine wrote their targets at once: their disk took",
		// and twice, through the paths the nodes set up for the first.
		"(the better of two windows: the other took"}
	if runtime.NumCPU() < len(targets)+1 {
		// The source and both nodes share fewer cores than they are:
		// the nodes measure what they cost each other.
		wants = append(wants, "measuring what the 2 nodes on one machine cost each other", "2 nodes on one machine of", "pushed their data path at once",
			// The raw image may be compressed on the fly: both decode
			// together too.
			"then 2 of them decode zstd at once", "2 nodes of one machine of", "decoded zstd at once:")
	}
	for _, want := range wants {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}
	for i, tg := range targets {
		if got, _ := testimage.SHA256(tg, size); got != want {
			t.Errorf("target %d differs from the image", i+1)
		}
	}
}

// Until the admin confirms the cast, no probe writes to a target: the
// preview says the disk was not measured, and an admin who says no finds
// every target as it was.
func TestNothingIsWrittenBeforeTheCastIsConfirmed(t *testing.T) {
	const size = 12 << 20
	imgs, _ := images(t, size)
	targets := oldDisks(t, 2, 32<<20) // room for the write probe, were it to run
	r := castProbed(t, Config{Image: imgs[imaging.Raw], Interactive: true, In: strings.NewReader("n\n"), measureDisks: true}, targets)
	if r.err == nil || !strings.Contains(r.err.Error(), "cancelled") {
		t.Fatalf("cast answered no: %v\n%s", r.err, r.out)
	}
	for _, want := range []string{"disk write rate not measured", "nothing is written to a target before you confirm", "Start the cast? [y/N]"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("output lacks %q:\n%s", want, r.out)
		}
	}
	if strings.Contains(r.out, "measuring the disk") {
		t.Errorf("the disk was measured before the cast was confirmed:\n%s", r.out)
	}
	for i, tg := range targets {
		b, _ := os.ReadFile(tg)
		if !bytes.Equal(b, bytes.Repeat([]byte{0xFF}, 32<<20)) {
			t.Errorf("target %d was written", i+1)
		}
	}
}

// Before the plan the server measures the network: the source to every
// node at once, then each node to the next, in keyed casts as well (the
// probes prove the key like streams do). The model then has every link,
// and the preview says they were measured.
func TestCastMeasuresTheNetwork(t *testing.T) {
	const size = 6 << 20
	imgs, want := images(t, size)
	key, err := castkey.ParseKey(string(castkey.NewKey()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		key  castkey.Key
	}{{"unkeyed", nil}, {"keyed", key}} {
		t.Run(tt.name, func(t *testing.T) {
			// Disks larger than the image: the write probe needs room to time.
			targets := oldDisks(t, 3, 16<<20)
			r := castProbed(t, Config{Image: imgs[imaging.Raw], NetProbe: 200 * time.Millisecond, Key: tt.key, probeLoopback: true}, targets)
			if r.err != nil {
				t.Fatalf("cast: %v\n%s", r.err, r.out)
			}
			// The start-up is measured too: the connections, and the
			// targets' final flush.
			for _, want := range []string{"measuring the network", "links measured in", "to 3 nodes at once", "capacity model: predicted rate",
				"note: start-up ", "connecting took ", ", a target's final flush "} {
				if !strings.Contains(r.out, want) {
					t.Errorf("output lacks %q:\n%s", want, r.out)
				}
			}
			// Nor does it cost a stream at a link's pace that is not there.
			if strings.Contains(r.out, "ns of CPU per byte in and out") {
				t.Errorf("the preview costs loopback as a link's pace:\n%s", r.out)
			}
			if strings.Contains(r.out, "probes failed") || strings.Contains(r.out, "link speed unknown") {
				t.Errorf("a link went unmeasured:\n%s", r.out)
			}
			// The ring follows the star at once: a node that missed the
			// star's end would wait out its order's fallback (the probe's
			// time and 2 s more) before it sent.
			var took time.Duration
			if m := regexp.MustCompile(`links measured in (\S+):`).FindStringSubmatch(r.out); m != nil {
				took, _ = time.ParseDuration(m[1])
			}
			if took <= 0 || took >= 2*time.Second {
				t.Errorf("the network took %v to measure, want the star's and the ring's 0.4 s and a little:\n%s", took, r.out)
			}
			if !r.sum.Plan.Modeled {
				t.Errorf("the model could not judge the plans with every link measured:\n%s", r.out)
			}
			// Over loopback the probes measure the machine's CPU, which
			// the model counts as such: no link limits the plan.
			if b := r.sum.Plan.Result.Bottleneck; strings.Contains(b, "link") {
				t.Errorf("a loopback cast is bound by %q, a link that does not exist:\n%s", b, r.out)
			}
			for i, tg := range targets {
				if got, _ := testimage.SHA256(tg, size); got != want {
					t.Errorf("target %d differs from the image", i+1)
				}
			}
		})
	}
}

// Nodes on loopback have no links: the server does not probe them, and
// the model plans from the machine's CPU and disk alone.
func TestLoopbackCastMeasuresNoLinks(t *testing.T) {
	const size = 6 << 20
	imgs, want := images(t, size)
	targets := oldDisks(t, 3, size)
	r := castProbed(t, Config{Image: imgs[imaging.Raw], NetProbe: 200 * time.Millisecond}, targets)
	if r.err != nil {
		t.Fatalf("cast: %v\n%s", r.err, r.out)
	}
	for _, bad := range []string{"measuring the network", "link speed unknown", "link speed is unknown"} {
		if strings.Contains(r.out, bad) {
			t.Errorf("output says %q:\n%s", bad, r.out)
		}
	}
	if !r.sum.Plan.Modeled {
		t.Errorf("the model could not judge the plans:\n%s", r.out)
	}
	for i, tg := range targets {
		if got, _ := testimage.SHA256(tg, size); got != want {
			t.Errorf("target %d differs from the image", i+1)
		}
	}
}

// The operator may force compression on a raw image (compressed on the fly)
// or force a compressed image raw (decoded at the source).
func TestCastCompressionOverride(t *testing.T) {
	const size = 10 << 20
	imgs, want := images(t, size)
	tests := []struct {
		image    imaging.Encoding
		compress Compress
		says     string
	}{
		{imaging.Raw, CompressYes, "compressed with zstd on the fly"},
		{imaging.Zstd, CompressNo, "decoded at the source and sent raw"},
		{imaging.Gzip, CompressYes, "stored gzip"},
	}
	for _, tt := range tests {
		t.Run(tt.image.String()+"-"+string(tt.compress), func(t *testing.T) {
			targets := oldDisks(t, 3, size)
			r := cast(t, Config{Image: imgs[tt.image], Shape: capacity.KindChain, Compress: tt.compress}, targets)
			if r.err != nil {
				t.Fatalf("cast: %v\n%s", r.err, r.out)
			}
			if !strings.Contains(r.out, tt.says) {
				t.Errorf("output does not say %q:\n%s", tt.says, r.out)
			}
			for i, tg := range targets {
				if got, _ := testimage.SHA256(tg, size); got != want {
					t.Errorf("target %d differs from the image", i+1)
				}
			}
		})
	}
}

// TestTakingUpNeedsTheSameEncoder: a node comes back to a fresh server
// with a cast whose stream was compressed on the fly by another encoder
// (another dolly build). Taking it up would splice two encodings (and,
// keyed, reuse nonces over other bytes): the server refuses it.
// serverToTakeUp starts a server of a raw image for nodes nodes in a chain,
// which nodes may come back to, and returns its address and the image's
// fingerprint; stop ends it.
func serverToTakeUp(t *testing.T, nodes int) (addr, fp string, stop func()) {
	imgs, _ := images(t, 2<<20)
	im, err := imaging.OpenImage(imgs[imaging.Raw])
	if err != nil {
		t.Fatal(err)
	}
	fp, err = im.Fingerprint()
	im.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Config{Image: imgs[imaging.Raw], Listen: "127.0.0.1:0", Nodes: nodes, NoProbe: true, Yes: true,
			Shape: capacity.KindChain, JoinTimeout: 30 * time.Second, Ready: func(a net.Addr) { addrc <- a.String() }})
		done <- err
	}()
	return <-addrc, fp, func() { cancel(); <-done }
}

func TestTakingUpNeedsTheSameEncoder(t *testing.T) {
	addr, fp, stop := serverToTakeUp(t, 1)
	defer stop()
	// comeBack says hello as a node of a cast compressed by encoder and
	// returns the server's answer.
	comeBack := func(encoder string) control.Message {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conn := control.NewConn(c)
		h := control.Hello{Version: stream.Version, Name: "pc01", DataAddr: "127.0.0.1:1",
			Resume: &control.Resume{Cast: stream.CastID{7}, Fingerprint: fp, Encoding: "zstd", FrameSize: 1 << 20, Pos: 1 << 20, Encoder: encoder}}
		if err := conn.Send(control.Message{Type: control.MsgHello, Hello: &h}); err != nil {
			t.Fatal(err)
		}
		m, err := conn.Recv(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := comeBack("zstd fastest, github.com/klauspost/compress v0.0.1"); m.Type != control.MsgReject || !strings.Contains(m.Reason, "another encoder") {
		t.Fatalf("a cast compressed by another encoder: %+v; want a reject", m)
	}
	if m := comeBack(imaging.EncoderID(imaging.Zstd)); m.Type != control.MsgWelcome || !m.Welcome.Resumed {
		t.Fatalf("a cast compressed by this build's encoder: %+v; want it taken up", m)
	}
}

// TestTakenUpNodeCountsOnceReadyAgain: a restarted server gives each node
// that comes back new data tokens. It must hand a node's token to a peer
// (in an assign) only once the node has said ready again, that is, once
// it has taken its welcome; otherwise the peer's connection can reach the
// node before the node knows the token, and the node drops it.
func TestTakenUpNodeCountsOnceReadyAgain(t *testing.T) {
	addr, fp, stop := serverToTakeUp(t, 2)
	defer stop()
	comeBack := func(name string) (*control.Conn, *control.Welcome) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conn := control.NewConn(c)
		h := control.Hello{Version: stream.Version, Name: name, DataAddr: "127.0.0.1:1",
			Resume: &control.Resume{Cast: stream.CastID{7}, Fingerprint: fp, Encoding: "raw", FrameSize: 1 << 20, Pos: 1 << 20}}
		if err := conn.Send(control.Message{Type: control.MsgHello, Hello: &h}); err != nil {
			t.Fatal(err)
		}
		m, err := conn.Recv(10 * time.Second)
		if err != nil || m.Type != control.MsgWelcome || !m.Welcome.Resumed {
			t.Fatalf("%s coming back: %+v, %v; want a welcome that takes it up", name, m, err)
		}
		return conn, m.Welcome
	}
	ready := func(name string, c *control.Conn) {
		if err := c.Send(control.Message{Type: control.MsgReady, Ready: &control.Ready{Target: "/dev/null"}}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// nextAssign returns the next assign on c within wait, skipping pings;
	// nil if none came.
	nextAssign := func(c *control.Conn, wait time.Duration) *control.Assign {
		end := time.Now().Add(wait)
		for time.Now().Before(end) {
			m, err := c.Recv(time.Until(end))
			if err != nil {
				return nil
			}
			if m.Type == control.MsgAssign {
				return m.Assign
			}
		}
		return nil
	}
	c1, _ := comeBack("pc01")
	ready("pc01", c1)
	c2, w2 := comeBack("pc02")
	if a := nextAssign(c1, time.Second); a != nil {
		t.Fatalf("pc01 was assigned %+v before pc02 said ready again", a)
	}
	ready("pc02", c2)
	a := nextAssign(c1, 10*time.Second)
	if a == nil {
		t.Fatal("no assign for pc01 after both nodes said ready")
	}
	if len(a.Children) != 1 || a.Children[0].Name != "pc02" || !bytes.Equal(a.Children[0].Token, w2.DataToken) {
		t.Errorf("pc01's assign: %+v; want pc02 as its child, with the token of pc02's welcome", a)
	}
}

// Nodes served apart that yield to the plan are told to catch up once no
// node of the plan casts any more, once; the plan's nodes are not told.
func TestEndYieldWaitsForThePlan(t *testing.T) {
	pair := controlPairs(t)
	s := &Server{tree: newCastTree(), log: slog.New(slog.DiscardHandler)}
	ends := map[*nodeState]*control.Conn{}
	node := func(name string, st status) *nodeState {
		srv, nd := pair()
		n := &nodeState{name: name, conn: srv, status: st}
		ends[n] = nd
		return n
	}
	a, b := node("a", stCasting), node("b", stCasting)
	s.tree.add(s.tree.root, a)
	s.tree.add(s.tree.at[a], b)
	apart := node("apart", stCasting)
	s.tree.addPaced(s.tree.at[b], apart)
	behind := node("behind", stCasting) // the next of a far switch's chain
	s.tree.add(s.tree.at[apart], behind)
	s.yielding = []*nodeState{apart, behind}

	told := func(n *nodeState) bool {
		m, err := ends[n].Recv(50 * time.Millisecond)
		if err == nil && m.Type != control.MsgCatchUp {
			t.Fatalf("%s got %q", n.name, m.Type)
		}
		return err == nil
	}
	s.endYield()
	a.status = stDone
	s.endYield()
	for _, n := range []*nodeState{apart, behind} {
		if told(n) {
			t.Fatalf("%s told to catch up while b of the plan casts", n.name)
		}
	}
	b.status = stFailed // a failed node casts no more either
	s.endYield()
	s.endYield()
	for _, n := range []*nodeState{apart, behind} {
		if !told(n) {
			t.Fatalf("%s not told to catch up once the plan was done", n.name)
		}
		if told(n) {
			t.Fatalf("%s told to catch up twice", n.name)
		}
	}
	for _, n := range []*nodeState{a, b} {
		if told(n) {
			t.Fatalf("%s of the plan told to catch up", n.name)
		}
	}
}
