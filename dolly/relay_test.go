package dolly

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan net.Conn)
	go func() {
		c, _ := ln.Accept()
		done <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-done
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// plainConn hides the *net.TCPConn so the relay takes its portable path.
type plainConn struct{ net.Conn }

type relayCase struct {
	children int
	zeroCopy bool
	teeLimit int
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func TestRelayForwardsVerbatim(t *testing.T) {
	data := randomBytes(23<<20+11, 1)
	want := sha256.Sum256(data)
	for _, tc := range []relayCase{{0, true, 0}, {1, true, 0}, {3, true, 0}, {2, true, 1000}, {1, false, 0}, {3, false, 0}} {
		name := map[bool]string{true: "splice", false: "copy"}[tc.zeroCopy]
		if tc.teeLimit > 0 {
			name = "short-tee"
		}
		t.Run(name+"/"+string(rune('0'+tc.children)), func(t *testing.T) {
			upW, upR := tcpPair(t)
			var up net.Conn = upR
			var kids []net.Conn
			var sinks []net.Conn
			for range tc.children {
				a, b := tcpPair(t)
				if tc.zeroCopy {
					kids = append(kids, a)
				} else {
					kids = append(kids, plainConn{a})
				}
				sinks = append(sinks, b)
			}
			if !tc.zeroCopy {
				up = plainConn{upR}
			}
			r, err := NewRelay(up, kids)
			if err != nil {
				t.Fatal(err)
			}
			r.teeLimit = tc.teeLimit
			if r.ZeroCopy() != tc.zeroCopy {
				t.Fatalf("ZeroCopy = %v, want %v", r.ZeroCopy(), tc.zeroCopy)
			}
			got := make(chan [32]byte, len(sinks)+1)
			for _, s := range sinks {
				go func() {
					h := sha256.New()
					io.Copy(h, s)
					got <- [32]byte(h.Sum(nil))
				}()
			}
			go func() {
				h := sha256.New()
				io.Copy(h, r.Local)
				got <- [32]byte(h.Sum(nil))
			}()
			go func() {
				// Uneven writes exercise partial rounds.
				rnd := rand.New(rand.NewPCG(2, 2))
				for p := data; len(p) > 0; {
					k := min(len(p), 1+rnd.IntN(3<<20))
					upW.Write(p[:k])
					p = p[k:]
				}
				upW.(*net.TCPConn).CloseWrite()
			}()
			if err := r.Run(); err != nil {
				t.Fatal(err)
			}
			for range len(sinks) + 1 {
				select {
				case h := <-got:
					if h != want {
						t.Fatal("a copy differs from what upstream sent")
					}
				case <-time.After(30 * time.Second):
					t.Fatal("a copy never finished")
				}
			}
			if r.Forwarded() != int64(len(data)) {
				t.Fatalf("Forwarded = %d, want %d", r.Forwarded(), len(data))
			}
		})
	}
}

func TestRelayOutlivesADeadChild(t *testing.T) {
	data := randomBytes(40<<20, 4)
	for _, zeroCopy := range []bool{true, false} {
		t.Run(map[bool]string{true: "splice", false: "copy"}[zeroCopy], func(t *testing.T) {
			upW, upR := tcpPair(t)
			good, goodSink := tcpPair(t)
			bad, badSink := tcpPair(t)
			var up, k1, k2 net.Conn = upR, good, bad
			if !zeroCopy {
				up, k1, k2 = plainConn{upR}, plainConn{good}, plainConn{bad}
			}
			r, err := NewRelay(up, []net.Conn{k1, k2})
			if err != nil {
				t.Fatal(err)
			}
			badSink.Close() // the child dies before reading anything
			got := make(chan []byte, 2)
			go func() { b, _ := io.ReadAll(goodSink); got <- b }()
			go func() { b, _ := io.ReadAll(r.Local); got <- b }()
			go func() {
				upW.Write(data)
				upW.(*net.TCPConn).CloseWrite()
			}()
			if err := r.Run(); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if b := <-got; !bytes.Equal(b, data) {
					t.Fatalf("a surviving copy has %d bytes, want the %d sent", len(b), len(data))
				}
			}
			if r.ChildErr(0) != nil || r.ChildErr(1) == nil {
				t.Fatalf("ChildErr = %v, %v; want nil and an error", r.ChildErr(0), r.ChildErr(1))
			}
		})
	}
}
