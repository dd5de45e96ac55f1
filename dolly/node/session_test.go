package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"dolly/dolly/control"
	"dolly/dolly/relay"
	"dolly/dolly/stream"
	"dolly/imaging"
	"dolly/internal/testimage"
)

// fakeServer plays dolly-server's control side for one node, step by step.
type fakeServer struct {
	t  *testing.T
	ln net.Listener
}

func (s *fakeServer) accept() (*control.Conn, *control.Hello) {
	s.t.Helper()
	c, err := s.ln.Accept()
	if err != nil {
		s.t.Fatal(err)
	}
	conn := control.NewConn(c)
	m := s.recv(conn, control.MsgHello)
	return conn, m.Hello
}

// recv returns the next message of type want, skipping progress reports.
func (s *fakeServer) recv(c *control.Conn, want control.MsgType) control.Message {
	s.t.Helper()
	for {
		m, err := c.Recv(10 * time.Second)
		if err != nil {
			s.t.Fatalf("waiting for %s: %v", want, err)
		}
		if m.Type == want {
			return m
		}
		if m.Type != control.MsgProgress {
			s.t.Fatalf("got %s (%s), want %s", m.Type, m.Reason, want)
		}
	}
}

// joinFake runs a node under cfg against a fakeServer until the node has
// said it is ready, and returns the server's end of its control
// connection and the node's outcome to come. cfg's Server is the fake's.
func joinFake(t *testing.T, cfg Config, welcome control.Welcome) (*fakeServer, *control.Conn, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := &fakeServer{t: t, ln: ln}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	ran := make(chan error, 1)
	cfg.Server = ln.Addr().String()
	go func() {
		_, err := Run(ctx, cfg)
		ran <- err
	}()
	c, _ := srv.accept()
	t.Cleanup(func() { c.Close() })
	srv.send(c, control.Message{Type: control.MsgWelcome, Welcome: &welcome})
	srv.recv(c, control.MsgReady)
	return srv, c, ran
}

func (s *fakeServer) send(c *control.Conn, m control.Message) {
	s.t.Helper()
	if err := c.Send(m); err != nil {
		s.t.Fatal(err)
	}
}

// encodeImage returns the stream of a raw image: its header and the bytes
// after it.
func encodeImage(t *testing.T, path string, cast stream.CastID) (stream.StreamHeader, []byte, imaging.Digest) {
	t.Helper()
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	enc, err := stream.NewEncoder(im, cast, 256<<10, imaging.Raw)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var b bytes.Buffer
	for {
		c, err := enc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(c.Header)
		b.Write(c.Payload)
		b.Write(c.Tag)
	}
	return enc.Header(), b.Bytes(), enc.Digest()
}

// A node that loses its server mid-cast reconnects, and what it then tells
// the server (its resume, or a done once it is back) says it has the whole
// image with the right digest. The receiver finishes while the node is
// rejoining, which is when the cast loop and the reconnecting session both
// touch what the node has made of the stream: run with -race, this test
// catches any access to it that is not synchronised.
func TestNodeFinishesWhileRejoiningTheServer(t *testing.T) {
	dir := t.TempDir()
	img, target := filepath.Join(dir, "image"), filepath.Join(dir, "target")
	const size = 3 << 20
	if err := testimage.Write(img, size, 7, testimage.Typical); err != nil {
		t.Fatal(err)
	}
	if err := testimage.Fill(target, 0xAA, size); err != nil {
		t.Fatal(err)
	}
	cast := stream.CastID{4, 2}
	h, data, digest := encodeImage(t, img, cast)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := &fakeServer{t: t, ln: ln}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type outcome struct {
		res Result
		err error
	}
	ran := make(chan outcome, 1)
	go func() {
		res, err := Run(ctx, Config{Server: ln.Addr().String(), Name: "pc01", Target: target, DataListen: "127.0.0.1:0",
			NoProbe: true, Buffered: true, ServerTimeout: 10 * time.Second, ReconnectTimeout: 30 * time.Second})
		ran <- outcome{res, err}
	}()

	c1, hello := srv.accept()
	welcome := control.Welcome{Cast: cast, Image: "image", ImageSize: size, Fingerprint: "fp",
		DataToken: stream.NewToken(), ProbeToken: stream.NewToken()}
	srv.send(c1, control.Message{Type: control.MsgWelcome, Welcome: &welcome})
	srv.recv(c1, control.MsgReady)
	srv.send(c1, control.Message{Type: control.MsgAssign, Assign: &control.Assign{Upstream: "source", Encoding: "raw"}})

	// The stream's first half, then the server goes away.
	_, port, _ := net.SplitHostPort(hello.DataAddr)
	up, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if pos, err := stream.OpenStream(up, h, nil, welcome.DataToken); err != nil || pos != 0 {
		t.Fatalf("opening the stream: pos %d, %v", pos, err)
	}
	half := len(data) / 2
	if _, err := up.Write(data[:half]); err != nil {
		t.Fatal(err)
	}
	c1.Close()

	// The node comes back; while it waits for the answer to its hello,
	// the rest of the stream arrives and the node finishes.
	c2, hello2 := srv.accept()
	defer c2.Close()
	r := hello2.Resume
	if r == nil || r.Cast != cast || r.Encoding != "raw" || r.Target != target {
		t.Fatalf("rejoined with resume %+v", r)
	}
	if _, err := up.Write(data[half:]); err != nil {
		t.Fatal(err)
	}
	up.(*net.TCPConn).CloseWrite()
	welcome.Resumed = true
	srv.send(c2, control.Message{Type: control.MsgWelcome, Welcome: &welcome})
	// Back, it says ready again, as when it joined.
	if m := srv.recv(c2, control.MsgReady); m.Ready.Target != target {
		t.Errorf("ready again with target %q, want %q", m.Ready.Target, target)
	}
	if !r.Done {
		m := srv.recv(c2, control.MsgDone)
		r.Done, r.Digest = true, m.Done.Digest
	}
	if r.Digest != digest.String() {
		t.Fatalf("node reports digest %s, the image's is %s", r.Digest, digest)
	}
	srv.send(c2, control.Message{Type: control.MsgResult, Result: &control.Result{OK: true, Message: "target verified"}})

	out := <-ran
	if out.err != nil {
		t.Fatalf("node: %v", out.err)
	}
	if out.res.Digest != digest {
		t.Errorf("node result digest %s, want %s", out.res.Digest, digest)
	}
	want, _ := testimage.SHA256(img, -1)
	if got, _ := testimage.SHA256(target, -1); got != want {
		t.Fatalf("target sha256 %s, image %s", got, want)
	}
}

// The cast loop records the receiver's outcome while the session, on
// another goroutine, builds the resume it brings to a server it rejoins.
// Under -race this fails if either side touches the outcome unguarded, as
// the loop and the reconnecting goroutine once did with a done flag and a
// digest. (The end-to-end test above cannot show that alone: every socket
// read or write is a synchronisation point to the race detector.)
func TestResumeIsSafeWhileTheLoopRecordsTheOutcome(t *testing.T) {
	r, err := relay.New(relay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{welcome: control.Welcome{Cast: stream.CastID{1}}, encoding: "raw", relay: r}
	want := imaging.Digest{1, 2, 3}
	wrote := make(chan struct{})
	go func() {
		n.out.set(want)
		close(wrote)
	}()
	for done := false; !done; {
		res := n.resume()
		if res.Done {
			if res.Digest != want.String() {
				t.Fatalf("resume says done with digest %q, want %q", res.Digest, want)
			}
			done = true
		}
		select {
		case <-wrote:
			done = done || n.resume().Done
			if !done {
				t.Fatal("the outcome was recorded, and the resume does not say done")
			}
		default:
		}
	}
}

// A node writes nothing to its target for a disk crowd unless its welcome
// said the cast is confirmed (MeasureTarget): asked anyway, it answers with
// an error and leaves the target alone; told so, it measures.
func TestDiskCrowdWaitsForTheConfirmation(t *testing.T) {
	for _, confirmed := range []bool{false, true} {
		t.Run(fmt.Sprintf("confirmed=%v", confirmed), func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "target")
			const size = 16 << 20
			if err := testimage.Fill(target, 0xAA, size); err != nil {
				t.Fatal(err)
			}
			srv, c, ran := joinFake(t, Config{Name: "pc01", Target: target, DataListen: "127.0.0.1:0", NoProbe: true},
				control.Welcome{Cast: stream.CastID{7}, Image: "image", ImageSize: size, Fingerprint: "fp",
					DataToken: stream.NewToken(), ProbeToken: stream.NewToken(), MeasureTarget: confirmed})
			srv.send(c, control.Message{Type: control.MsgCrowdProbe, CrowdProbe: &control.CrowdProbe{ID: 9, Disk: true}})
			got := srv.recv(c, control.MsgNetResult).NetResult
			if !confirmed {
				if got.Error == "" || !strings.Contains(got.Error, "confirmed") {
					t.Fatalf("unconfirmed disk crowd answered %+v, want an error", got)
				}
			} else {
				if got.Error != "" {
					t.Fatalf("confirmed disk crowd failed to start: %s", got.Error)
				}
				srv.send(c, control.Message{Type: control.MsgCrowdProbe, CrowdProbe: &control.CrowdProbe{ID: 9, Disk: true, Go: true, SettleMillis: 10, WindowMillis: 100}})
				got = srv.recv(c, control.MsgNetResult).NetResult
				if got.Error != "" || got.Bytes <= 0 || got.Rate <= 0 {
					t.Fatalf("confirmed disk crowd answered %+v, want bytes on the disk", got)
				}
			}
			b, _ := os.ReadFile(target)
			if !bytes.Equal(b, bytes.Repeat([]byte{0xAA}, size)) {
				t.Fatal("the target changed")
			}
			srv.send(c, control.Message{Type: control.MsgAbort, Reason: "test over"})
			<-ran
		})
	}
}

// A node told to keep to a part of its machine's cores (control.Share)
// passes it on to the command, once, before its place in the cast; a share
// of no core is ignored.
func TestNodeKeepsToItsShareOfTheCores(t *testing.T) {
	for _, tt := range []struct {
		name  string
		procs int
		want  []int
	}{
		{"one core", 1, []int{1}},
		{"no core", 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "target")
			if err := testimage.Fill(target, 0xAA, 1<<20); err != nil {
				t.Fatal(err)
			}
			var got []int // written by the node's join, read once Run returned
			srv, c, ran := joinFake(t, Config{Name: "pc01", Target: target, DataListen: "127.0.0.1:0", NoProbe: true, Buffered: true,
				SetProcs: func(procs int) int { got = append(got, procs); return procs }},
				control.Welcome{Cast: stream.CastID{1}, Image: "image", ImageSize: 1 << 20, Fingerprint: "fp",
					DataToken: stream.NewToken(), ProbeToken: stream.NewToken()})
			srv.send(c, control.Message{Type: control.MsgShare, Share: &control.Share{Procs: tt.procs}})
			srv.send(c, control.Message{Type: control.MsgAbort, Reason: "that is all"})
			if err := <-ran; err == nil || !strings.Contains(err.Error(), "that is all") {
				t.Fatalf("the node ended with %v, want the abort", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("SetProcs called with %v, want %v", got, tt.want)
			}
		})
	}
}

// A relay crowd is pushed once; a server that doubts what it pushed sets
// one up again under a new id, and the node pushes that one as well.
func TestRelayCrowdMeasuredTwice(t *testing.T) {
	target := filepath.Join(t.TempDir(), "target")
	if err := testimage.Fill(target, 0xAA, 1<<20); err != nil {
		t.Fatal(err)
	}
	srv, c, ran := joinFake(t, Config{Name: "pc01", Target: target, DataListen: "127.0.0.1:0", NoProbe: true, Buffered: true},
		control.Welcome{Cast: stream.CastID{3}, Image: "image", ImageSize: 1 << 20, Fingerprint: "fp",
			DataToken: stream.NewToken(), ProbeToken: stream.NewToken()})
	for _, id := range []uint64{9, 10} {
		srv.send(c, control.Message{Type: control.MsgCrowdProbe, CrowdProbe: &control.CrowdProbe{ID: id}})
		if got := srv.recv(c, control.MsgNetResult).NetResult; got.ID != id || got.Error != "" {
			t.Fatalf("crowd %d set up: %+v", id, got)
		}
		srv.send(c, control.Message{Type: control.MsgCrowdProbe, CrowdProbe: &control.CrowdProbe{ID: id, Go: true, SettleMillis: 10, WindowMillis: 50}})
		if got := srv.recv(c, control.MsgNetResult).NetResult; got.ID != id || got.Error != "" || got.Bytes <= 0 || got.Rate <= 0 {
			t.Fatalf("crowd %d pushed: %+v, want bytes through the relay", id, got)
		}
	}
	srv.send(c, control.Message{Type: control.MsgAbort, Reason: "test over"})
	<-ran
}

// A node told to wake less often (control.Share) casts with a relay that
// does; a server asking for more than maxWake gets maxWake; a share that
// says nothing of it leaves the relay's default.
func TestNodeWakesAsTheServerSaid(t *testing.T) {
	for _, tt := range []struct {
		name  string
		share control.Share
		want  time.Duration
	}{
		{"threads only", control.Share{Procs: 1}, 0},
		{"a crowded machine's cast", control.Share{WakeMillis: int(relay.CrowdedWakeDelay.Milliseconds())}, relay.CrowdedWakeDelay},
		{"too long", control.Share{Procs: 2, WakeMillis: 5000}, maxWake},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{log: slog.New(slog.DiscardHandler), sums: stream.NewPayloadSums()}
			n.share(tt.share)
			if got := n.relayConfig().WakeDelay; got != tt.want {
				t.Errorf("wake delay %v, want %v", got, tt.want)
			}
		})
	}
}
