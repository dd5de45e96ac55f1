package stream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"dolly/imaging"
)

// framedStream cuts data into data frames of the given payload sizes,
// in turn, and ends it with an end frame: a compressed stream as stored.
func framedStream(data []byte, sizes []int) (StreamHeader, []byte) {
	h := StreamHeader{Version: Version, Encoding: imaging.Zstd, FrameSize: 1 << 16, ImageSize: 1, StreamSize: int64(len(data))}
	var b []byte
	var seq uint64
	for off, i := 0, 0; off < len(data); i++ {
		n := min(sizes[i%len(sizes)], len(data)-off)
		p := data[off : off+n]
		b = AppendFrameHeader(b, Frame{Kind: FrameData, Seq: seq, Offset: int64(off), Length: int64(n), CRC: imaging.CRC32C(p)})
		b = append(b, p...)
		off += n
		seq++
	}
	return h, append(b, EndFrame(seq, End{Size: 1, Frames: seq}, nil)...)
}

// The frame source reads, peeks and discards across payloads exactly as
// a bufio.Reader does over the payloads joined, whether the frame reader
// lends its payloads or copies them into a buffer it reuses.
func TestFrameSourceIsTheJoinedPayloads(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	data := make([]byte, 200<<10)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, sizes := range [][]int{{1}, {3, 1, 7}, {4096}, {17, 64 << 10, 2}} {
		h, stream := framedStream(data, sizes)
		for _, lent := range []bool{false, true} {
			t.Run(fmt.Sprintf("payloads of %v, lent %v", sizes, lent), func(t *testing.T) {
				var in io.Reader = bytes.NewReader(stream)
				if lent {
					in = &lendingReader{b: bytes.Clone(stream)}
				}
				src := &frameSource{fr: NewFrameReader(in, h, nil), c: new(Counters)}
				want := bufio.NewReaderSize(bytes.NewReader(data), 1<<20)
				ops := rand.New(rand.NewPCG(uint64(len(sizes)), 1))
				for step := 0; ; step++ {
					n := 1 + ops.IntN(40)
					if ops.IntN(4) == 0 {
						n = 1 + ops.IntN(9000)
					}
					var got, exp []byte
					var gotErr, expErr error
					op := []string{"read", "peek", "discard"}[ops.IntN(3)]
					switch op {
					case "read":
						got, exp = make([]byte, n), make([]byte, n)
						var k, l int
						k, gotErr = io.ReadFull(src, got)
						l, expErr = io.ReadFull(want, exp)
						got, exp = got[:k], exp[:l]
					case "peek":
						got, gotErr = src.Peek(n)
						exp, expErr = want.Peek(n)
						got = bytes.Clone(got)
					case "discard":
						var k, l int
						k, gotErr = src.Discard(n)
						l, expErr = want.Discard(n)
						got, exp = []byte{byte(k), byte(k >> 8)}, []byte{byte(l), byte(l >> 8)}
					}
					if !bytes.Equal(got, exp) || (gotErr == nil) != (expErr == nil) {
						t.Fatalf("step %d, %s(%d): got %d bytes (%v), want %d bytes (%v)", step, op, n, len(got), gotErr, len(exp), expErr)
					}
					if expErr != nil {
						if !errors.Is(gotErr, io.EOF) && !errors.Is(gotErr, io.ErrUnexpectedEOF) {
							t.Fatalf("at the end: %v", gotErr)
						}
						break
					}
				}
				rest, err := io.ReadAll(src)
				if wantRest, _ := io.ReadAll(want); err != nil || !bytes.Equal(rest, wantRest) {
					t.Fatalf("the rest: %d bytes (%v), want %d", len(rest), err, len(wantRest))
				}
				if !src.ended || src.err != nil {
					t.Fatalf("after the last payload: ended %v, err %v", src.ended, src.err)
				}
				if err := src.atEnd(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
