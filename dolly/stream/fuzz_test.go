package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"dolly/imaging"
	"dolly/internal/testimage"
)

// The seed corpora under testdata/fuzz are checked in; this flag rewrites
// the generated ones: go test -run TestWriteFuzzSeeds -write-fuzz-seeds ./dolly/stream
var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite the generated seed corpora in testdata/fuzz")

// FuzzParseStreamHeader checks the stream header parser on arbitrary bytes.
// With fixCRC the header checksum is made right first, so the fuzzer gets
// past it to the field checks.
func FuzzParseStreamHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		b := bytes.Clone(data)
		if fixCRC && len(b) >= 64 {
			binary.LittleEndian.PutUint32(b[60:], imaging.CRC32C(b[:60]))
		}
		h, err := ParseStreamHeader(b)
		if err != nil {
			return
		}
		switch {
		case h.Version != Version:
			t.Fatalf("accepted version %d", h.Version)
		case h.FrameSize < 1 || h.FrameSize > MaxFrameSize:
			t.Fatalf("accepted frame size %d", h.FrameSize)
		case h.ImageSize <= 0 || h.StreamSize < 0:
			t.Fatalf("accepted sizes image %d, stream %d", h.ImageSize, h.StreamSize)
		case h.Encoding == imaging.Raw && h.StreamSize != h.ImageSize:
			t.Fatalf("accepted a raw stream of %d bytes for %d", h.StreamSize, h.ImageSize)
		case h.Encoding != imaging.Raw && !h.Encoding.Compressed():
			t.Fatalf("accepted encoding %v", h.Encoding)
		}
		h2, err := ParseStreamHeader(h.MarshalBinary())
		if err != nil || h2 != h {
			t.Fatalf("re-encoded header: %+v, %v; want %+v", h2, err, h)
		}
	})
}

// memTarget is an image target in memory that starts out as old data (0xFF).
type memTarget struct{ b []byte }

func newMemTarget(size int) *memTarget { return &memTarget{b: bytes.Repeat([]byte{0xFF}, size)} }

func (m *memTarget) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(m.b)) || int64(len(p)) > int64(len(m.b))-off {
		return 0, fmt.Errorf("write of %d bytes at %d beyond %d", len(p), off, len(m.b))
	}
	return copy(m.b[off:], p), nil
}

func (m *memTarget) ZeroRange(off, n int64) error {
	if off < 0 || n < 0 || off > int64(len(m.b)) || n > int64(len(m.b))-off {
		return fmt.Errorf("zeroing %d bytes at %d beyond %d", n, off, len(m.b))
	}
	clear(m.b[off : off+n])
	return nil
}

// fuzzImageLimit keeps each iteration cheap: images are at most this long.
const fuzzImageLimit = 256 << 10

// FuzzReceive feeds arbitrary frames after a valid stream header to the
// frame reader and to Receive writing into memory. They must fail cleanly
// or verify, never panic, never hand out a payload longer than the frame
// size, and a verified image must be what the target holds. With fix the
// checksums of headers and payloads are made right first, so the fuzzer
// reaches the checks of sequence, offsets, lengths and digests.
func FuzzReceive(f *testing.F) {
	f.Fuzz(func(t *testing.T, enc uint8, frameSize uint32, imageSize uint32, streamSize uint32, fix bool, frames []byte) {
		h := StreamHeader{Version: Version, Encoding: imaging.Encoding(enc % 3), FrameSize: frameSize % (fuzzImageLimit + 1),
			ImageSize: int64(imageSize % (fuzzImageLimit + 1)), StreamSize: int64(streamSize % (fuzzImageLimit + 1))}
		if h.Encoding == imaging.Raw {
			h.StreamSize = h.ImageSize
		}
		h, err := ParseStreamHeader(h.MarshalBinary())
		if err != nil {
			return // the header parser has its own target
		}
		if fix {
			frames = fixFrames(bytes.Clone(frames))
		}

		fr := NewFrameReader(bytes.NewReader(frames), h, nil)
		for i := 0; ; i++ {
			fm, err := fr.Next()
			if err != nil {
				if errors.Is(err, io.EOF) && i == 0 {
					t.Fatal("io.EOF before any frame")
				}
				break
			}
			if int64(len(fm.Payload)) != map[FrameKind]int64{FrameData: fm.Length, FrameZero: 0, FrameEnd: endPayloadLen}[fm.Kind] {
				t.Fatalf("%s frame of length %d with a payload of %d bytes", fm.Kind, fm.Length, len(fm.Payload))
			}
			if fm.Kind == FrameData && len(fm.Payload) > int(h.FrameSize) {
				t.Fatalf("payload of %d bytes, frame size %d", len(fm.Payload), h.FrameSize)
			}
			if fm.Kind == FrameEnd {
				if _, err := fr.Next(); err != io.EOF {
					t.Fatalf("after the end frame: %v, want io.EOF", err)
				}
				break
			}
		}

		tg := newMemTarget(int(h.ImageSize))
		d, end, err := Receive(bytes.NewReader(frames), h, nil, tg, nil, Hooks{})
		if err != nil {
			return
		}
		if d != end.Digest || end.Size != h.ImageSize {
			t.Fatalf("verified with digest %s and size %d; the end frame says %s and %d", d.Short(), h.ImageSize, end.Digest.Short(), end.Size)
		}
		dg := imaging.NewDigester()
		dg.Write(tg.b)
		if got := dg.Sum(); got != d {
			t.Fatalf("verified digest %s, but the target holds %s", d.Short(), got.Short())
		}
	})
}

// fixFrames walks b as a sequence of frames and sets each header's checksum
// and, where the payload is there, its CRC (zero frames keep theirs).
func fixFrames(b []byte) []byte {
	for off := 0; off+FrameHeaderLen <= len(b); {
		hdr := b[off : off+FrameHeaderLen]
		copy(hdr, frameMagic[:])
		kind := FrameKind(hdr[4])
		n := int64(binary.LittleEndian.Uint64(hdr[24:]))
		payload := int64(0)
		if kind == FrameData || kind == FrameEnd {
			payload = n
		}
		if payload < 0 || payload > int64(len(b)-off-FrameHeaderLen) {
			payload = int64(len(b) - off - FrameHeaderLen)
		} else {
			p := b[off+FrameHeaderLen : off+FrameHeaderLen+int(payload)]
			binary.LittleEndian.PutUint32(hdr[32:], imaging.CRC32C(p))
		}
		binary.LittleEndian.PutUint32(hdr[36:], imaging.CRC32C(hdr[:36]))
		off += FrameHeaderLen + int(payload)
	}
	return b
}

// TestWriteFuzzSeeds writes the generated seed corpora: real streams of a
// small image, raw and compressed.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeFuzzSeeds {
		t.Skip("rewrites testdata/fuzz; run with -write-fuzz-seeds")
	}
	dir := t.TempDir()
	raw := filepath.Join(dir, "img")
	if err := testimage.Write(raw, 12<<10, 3, testimage.Mix{Zero: 0.3, Random: 0.3}); err != nil {
		t.Fatal(err)
	}
	for _, enc := range []imaging.Encoding{imaging.Raw, imaging.Zstd, imaging.Gzip} {
		path := raw
		if enc != imaging.Raw {
			path = raw + "." + enc.String()
			if err := testimage.Compress(raw, path, enc); err != nil {
				t.Fatal(err)
			}
		}
		h, stream, _ := encodeStream(t, path, imaging.ZeroBlock)
		args := []any{uint8(h.Encoding), h.FrameSize, uint32(h.ImageSize), uint32(h.StreamSize)}
		writeSeed(t, "FuzzReceive", enc.String(), append(args, false, stream)...)
		cut := bytes.Clone(stream[:len(stream)/2])
		writeSeed(t, "FuzzReceive", enc.String()+"-truncated", append(args, false, cut)...)
		flipped := bytes.Clone(stream)
		flipped[len(flipped)/3] ^= 0x40
		writeSeed(t, "FuzzReceive", enc.String()+"-flipped-fixed", append(args, true, flipped)...)
		writeSeed(t, "FuzzParseStreamHeader", enc.String(), h.MarshalBinary(), false)
	}
	writeSeed(t, "FuzzParseStreamHeader", "short", []byte("DOLLYSTM"), true)

}

// writeSeed writes one corpus file in the "go test fuzz v1" format.
func writeSeed(t *testing.T, fuzzName, name string, args ...any) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		default:
			fmt.Fprintf(&b, "%T(%v)\n", v, v)
		}
	}
	dir := filepath.Join("testdata", "fuzz", fuzzName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
