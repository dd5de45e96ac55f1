package stream

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"dolly/imaging"
	"dolly/internal/testimage"
)

// wirePayloads walks the frames of stream (the bytes after its header) as
// they lie on the wire and returns each payload's offset, length and the
// CRC its header announces; with split, a data payload's pieces too (see
// payloadSum), computed from its bytes.
func wirePayloads(t *testing.T, stream []byte, trailer int, split bool) []payloadSum {
	t.Helper()
	var sums []payloadSum
	for off := 0; off < len(stream); {
		f, err := parseFrameHeader(stream[off : off+FrameHeaderLen])
		if err != nil {
			t.Fatalf("frame at %d: %v", off, err)
		}
		body := off + FrameHeaderLen
		if n := int(payloadLen(f)); n > 0 {
			sum := payloadSum{off: int64(body), n: int64(n), crc: f.CRC}
			if split && f.Kind == FrameData {
				sum.image = f.Offset
				p := stream[body : body+n]
				for at := f.Offset; len(p) > 0; {
					k := min(len(p), int(imaging.DigestBlock-at%imaging.DigestBlock))
					sum.pieces = append(sum.pieces, imaging.CRC32C(p[:k]))
					p, at = p[k:], at+int64(k)
				}
			}
			sums = append(sums, sum)
			off = body + n
		} else {
			off = body
		}
		off += trailer
	}
	return sums
}

// observeUneven feeds stream to s in pieces of random sizes, as a relay's
// rounds bring it.
func observeUneven(s *PayloadSums, stream []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for len(stream) > 0 {
		k := min(len(stream), 1+r.IntN(70000))
		if r.IntN(5) == 0 {
			k = min(len(stream), 1+r.IntN(50))
		}
		s.Observe(stream[:k])
		stream = stream[k:]
	}
}

// The sums are the CRCs the frames announce (of the payloads as sent),
// for every frame with a payload, however the bytes arrive; an encrypted
// stream's CRCs are of what no relay sees, and it gets none.
func TestPayloadSumsAreTheFramesCRCs(t *testing.T) {
	imgs := makeImages(t, 5<<20+77, testimage.Typical)
	k := testKey(t)
	tests := []struct {
		name      string
		enc       imaging.Encoding
		frameSize int
		key       *FrameKey
	}{
		{"raw, zero runs", imaging.Raw, 1 << 20, nil},
		{"raw, small frames", imaging.Raw, 64 << 10, nil},
		{"raw, frames of three digest blocks", imaging.Raw, 3 << 20, nil},
		{"zstd", imaging.Zstd, 64 << 10, nil},
		{"raw, authenticated", imaging.Raw, 1 << 20, NewFrameKey(k, CastID{9}, false)},
		{"zstd, encrypted", imaging.Zstd, 64 << 10, NewFrameKey(k, CastID{9}, true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, stream, _ := encodeKeyed(t, imgs[tt.enc], tt.frameSize, 255, tt.key)
			trailer := 0
			if tt.key != nil {
				trailer = h.trailerLen()
			}
			want := wirePayloads(t, stream, trailer, tt.enc == imaging.Raw)
			if tt.frameSize > imaging.DigestBlock && !slices.ContainsFunc(want, func(s payloadSum) bool { return len(s.pieces) > 1 }) {
				t.Fatal("no payload spans two digest blocks: not a test")
			}
			if len(want) < 3 {
				t.Fatalf("only %d payloads: not a test", len(want))
			}
			s := NewPayloadSums()
			s.Start(h, tt.key)
			observeUneven(s, stream, uint64(len(stream)))
			for i, w := range want {
				got, ok := s.take(w.off, w.n)
				switch {
				case tt.key != nil && tt.key.Encrypt:
					if ok {
						t.Fatalf("payload %d of an encrypted stream has a sum", i)
					}
				case !ok:
					t.Fatalf("payload %d (%d bytes at %d) has no sum", i, w.n, w.off)
				case got.crc != w.crc:
					t.Fatalf("payload %d: sum %08x, the frame says %08x", i, got.crc, w.crc)
				case got.image != w.image || !slices.Equal(got.pieces, w.pieces):
					t.Fatalf("payload %d at image offset %d: pieces %x at %d, want %x", i, w.image, got.pieces, got.image, w.pieces)
				}
			}
		})
	}
}

// A payload whose bytes differ from what its frame announces still fails,
// sums or not, and a good stream is received whole even when the sums are
// out of step with it (they then only cost a second reading).
func TestReceiveWithPayloadSums(t *testing.T) {
	imgs := makeImages(t, 3<<20, testimage.Dense)
	h, stream, _ := encodeStream(t, imgs[imaging.Raw], 1<<20)
	want, _ := testimage.SHA256(imgs[imaging.Raw], -1)
	second := FrameHeaderLen + (1 << 20) + FrameHeaderLen
	shifted := append([]byte{0}, stream...)
	flipped := append([]byte(nil), stream...)
	flipped[second+100] ^= 0x40
	// A header that passes its own checksum but whose CRC field lies: the
	// sums are then right and the frame wrong.
	lying := append([]byte(nil), stream...)
	hdr := lying[FrameHeaderLen+(1<<20) : second]
	binary.LittleEndian.PutUint32(hdr[32:], binary.LittleEndian.Uint32(hdr[32:])^1)
	binary.LittleEndian.PutUint32(hdr[36:], imaging.CRC32C(hdr[:36]))
	tests := []struct {
		name      string
		observed  []byte // what the relay took in
		received  []byte // what the frame reader reads
		wantErr   string
		wantTaken bool
	}{
		{"good", stream, stream, "", true},
		{"flipped payload byte", flipped, flipped, "payload checksum mismatch", true},
		{"lying frame header", lying, lying, "payload checksum mismatch", true},
		{"sums out of step", shifted, stream, "", false},
		{"sums of other bytes", flipped, stream, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewPayloadSums()
			s.Start(h, nil)
			observeUneven(s, tt.observed, 5)
			taken := len(s.sums)
			target, err := receiveWithSums(t, h, tt.received, s)
			if fmt.Sprint(err) == "<nil>" != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Receive = %v, want %q", err, tt.wantErr)
			}
			if err == nil {
				if got, _ := testimage.SHA256(target, h.ImageSize); got != want {
					t.Fatal("target differs from the image")
				}
			}
			if used := taken > 0 && len(s.sums) < taken; used != tt.wantTaken {
				t.Fatalf("sums used: %v (%d of %d left), want %v", used, len(s.sums), taken, tt.wantTaken)
			}
		})
	}
}

func receiveWithSums(t *testing.T, h StreamHeader, stream []byte, s *PayloadSums) (string, error) {
	t.Helper()
	path := t.TempDir() + "/target"
	if err := testimage.Fill(path, 0xFF, h.ImageSize); err != nil {
		t.Fatal(err)
	}
	tg, err := imaging.OpenTarget(path, h.ImageSize, imaging.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	_, _, err = Receive(&lendingReader{b: stream}, h, nil, tg, nil, Hooks{Sums: s})
	return path, err
}
