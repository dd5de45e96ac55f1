package stream

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"dolly/imaging"
	"dolly/internal/testimage"
)

func TestStreamHeaderRoundTrip(t *testing.T) {
	h := StreamHeader{Version: Version, Encoding: imaging.Zstd, FrameSize: 1 << 20, Cast: CastID{1, 2, 3}, ImageSize: 5e9, StreamSize: 2e9}
	b := h.MarshalBinary()
	got, err := ParseStreamHeader(b)
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, h)
	}
	tests := []struct {
		name   string
		mutate func([]byte)
		want   string
	}{
		{"not dolly", func(b []byte) { copy(b, "GET / HT") }, "not a dolly stream"},
		{"flipped bit", func(b []byte) { b[33] ^= 1 }, "checksum mismatch"},
		{"short", nil, "bytes, want"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := append([]byte(nil), b...)
			if tt.mutate != nil {
				tt.mutate(c)
			} else {
				c = c[:10]
			}
			if _, err := ParseStreamHeader(c); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseStreamHeader = %v, want error containing %q", err, tt.want)
			}
		})
	}
	h.Version = Version + 1
	if _, err := ParseStreamHeader(h.MarshalBinary()); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("other version: %v", err)
	}
}

// encodeStream renders the whole stream of an image file, sent as stored.
func encodeStream(t testing.TB, path string, frameSize int) (StreamHeader, []byte, *Encoder) {
	return encodeStreamAs(t, path, frameSize, 255)
}

// encodeStreamAs renders the stream sent as send (255: as stored).
func encodeStreamAs(t testing.TB, path string, frameSize int, send imaging.Encoding) (StreamHeader, []byte, *Encoder) {
	t.Helper()
	return encodeKeyed(t, path, frameSize, send, nil)
}

// encodeKeyed is encodeStreamAs for a keyed cast (key nil: unkeyed).
func encodeKeyed(t testing.TB, path string, frameSize int, send imaging.Encoding, key *FrameKey) (StreamHeader, []byte, *Encoder) {
	t.Helper()
	im, err := imaging.OpenImage(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { im.Close() })
	if err := im.Scan(t.Context(), nil, nil); err != nil {
		t.Fatal(err)
	}
	if send == 255 {
		send = im.Encoding
	}
	enc, err := NewEncoder(im, CastID{9}, frameSize, send)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { enc.Close() })
	enc.SetKey(key)
	stream := append(enc.Header().MarshalBinary(), frames(t, enc)...)
	h, err := ParseStreamHeader(stream)
	if err != nil {
		t.Fatal(err)
	}
	return h, stream[StreamHeaderLen:], enc
}

// frames is every frame enc sends, as on the wire.
func frames(t testing.TB, enc *Encoder) []byte {
	t.Helper()
	var b bytes.Buffer
	for {
		c, err := enc.Next()
		if errors.Is(err, io.EOF) {
			return b.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(c.Header)
		b.Write(c.Payload)
		b.Write(c.Tag)
	}
}

func makeImages(t testing.TB, size int64, mix testimage.Mix) map[imaging.Encoding]string {
	t.Helper()
	dir := t.TempDir()
	raw := filepath.Join(dir, "img")
	if err := testimage.Write(raw, size, 7, mix); err != nil {
		t.Fatal(err)
	}
	out := map[imaging.Encoding]string{imaging.Raw: raw}
	for _, enc := range []imaging.Encoding{imaging.Zstd, imaging.Gzip} {
		p := raw + "." + enc.String()
		if err := testimage.Compress(raw, p, enc); err != nil {
			t.Fatal(err)
		}
		out[enc] = p
	}
	return out
}

func TestEncoderFramesCoverTheImage(t *testing.T) {
	imgs := makeImages(t, 9<<20+4321, testimage.Typical)
	h, stream, enc := encodeStream(t, imgs[imaging.Raw], 256<<10)
	fr := NewFrameReader(bytes.NewReader(stream), h, nil)
	var data, zero int64
	kinds := map[FrameKind]int{}
	for {
		f, err := fr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds[f.Kind]++
		switch f.Kind {
		case FrameData:
			data += f.Length
		case FrameZero:
			zero += f.Length
		case FrameEnd:
			e, err := ParseEnd(f.Payload)
			if err != nil || e.Digest != enc.Digest() || e.Size != h.ImageSize {
				t.Fatalf("end frame %+v, %v; want digest %s", e, err, enc.Digest())
			}
		}
	}
	if data+zero != h.ImageSize {
		t.Fatalf("frames cover %d bytes, image has %d", data+zero, h.ImageSize)
	}
	if kinds[FrameZero] == 0 || zero < h.ImageSize/4 {
		t.Fatalf("zero runs were sent as data: %d zero frames, %d zero bytes of %d", kinds[FrameZero], zero, h.ImageSize)
	}
	if kinds[FrameEnd] != 1 {
		t.Fatalf("%d end frames", kinds[FrameEnd])
	}
	want := imaging.NewDigester()
	raw, _ := os.ReadFile(imgs[imaging.Raw])
	want.Write(raw)
	if enc.Digest() != want.Sum() {
		t.Fatal("source digest differs from the digest of the image file")
	}
}

// receiveInto writes a stream to a target pre-filled with 0xFF.
func receiveInto(t *testing.T, h StreamHeader, stream []byte) (string, error) {
	t.Helper()
	return receiveKeyed(t, h, nil, stream)
}

// receiveKeyed receives a stream onto a target full of 0xFF. It receives it
// twice, read as a plain reader and lent in place as a relay's history
// does, and fails unless both land the same bytes and error alike, and
// the lent stream is left as it was.
func receiveKeyed(t *testing.T, h StreamHeader, key *FrameKey, stream []byte) (string, error) {
	t.Helper()
	path, err := receiveFrom(t, h, key, bytes.NewReader(stream))
	lent := bytes.Clone(stream)
	lentPath, lentErr := receiveFrom(t, h, key, &lendingReader{b: lent})
	if fmt.Sprint(err) != fmt.Sprint(lentErr) {
		t.Fatalf("read: %v; lent: %v", err, lentErr)
	}
	if !bytes.Equal(lent, stream) {
		t.Fatal("receiving changed the stream bytes lent to it")
	}
	a, _ := testimage.SHA256(path, h.ImageSize)
	b, _ := testimage.SHA256(lentPath, h.ImageSize)
	if a != b {
		t.Fatal("the stream read and the stream lent landed different bytes")
	}
	return path, err
}

func receiveFrom(t *testing.T, h StreamHeader, key *FrameKey, r io.Reader) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "target")
	if err := testimage.Fill(path, 0xFF, h.ImageSize+8192); err != nil {
		t.Fatal(err)
	}
	tg, err := imaging.OpenTarget(path, h.ImageSize, imaging.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	_, _, err = Receive(r, h, key, tg, nil, Hooks{})
	return path, err
}

// lendingReader lends its bytes in place, as a relay's history does.
type lendingReader struct{ b []byte }

func (l *lendingReader) Read(p []byte) (int, error) {
	if len(l.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, l.b)
	l.b = l.b[n:]
	return n, nil
}

func (l *lendingReader) Lend(n int) ([]byte, error) {
	if len(l.b) < n {
		l.b = nil
		return nil, io.ErrUnexpectedEOF
	}
	p := l.b[:n:n]
	l.b = l.b[n:]
	return p, nil
}

func TestReceiveWritesTheImage(t *testing.T) {
	imgs := makeImages(t, 6<<20+17, testimage.Typical)
	want, _ := testimage.SHA256(imgs[imaging.Raw], -1)
	for enc, path := range imgs {
		t.Run(enc.String(), func(t *testing.T) {
			h, stream, _ := encodeStream(t, path, 1<<20)
			target, err := receiveInto(t, h, stream)
			if err != nil {
				t.Fatal(err)
			}
			got, err := testimage.SHA256(target, h.ImageSize)
			if err != nil || got != want {
				t.Fatalf("target sha256 %s (%v), image %s", got, err, want)
			}
		})
	}
}

// In frames of the smallest size, a zstd stream's frame and block headers
// and its zero frames are cut across payloads: the decoder, which reads
// the payloads in place, must land the same bytes, read or lent.
func TestReceiveSmallFrames(t *testing.T) {
	imgs := makeImages(t, 3<<20+5000, testimage.Typical)
	want, _ := testimage.SHA256(imgs[imaging.Raw], -1)
	tests := []struct {
		name string
		path string
		send imaging.Encoding
	}{
		{"zstd stored", imgs[imaging.Zstd], imaging.Zstd},
		{"zstd on the fly", imgs[imaging.Raw], imaging.Zstd},
		{"gzip stored", imgs[imaging.Gzip], imaging.Gzip},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, stream, _ := encodeStreamAs(t, tt.path, imaging.ZeroBlock, tt.send)
			target, err := receiveInto(t, h, stream)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := testimage.SHA256(target, h.ImageSize); got != want {
				t.Fatal("target differs from the image")
			}
		})
	}
}

// The source may send an image otherwise than it is stored: decoded, or
// compressed on the fly. Every way must land the same bytes.
func TestConvertedStreams(t *testing.T) {
	imgs := makeImages(t, 5<<20+300, testimage.Typical)
	want, _ := testimage.SHA256(imgs[imaging.Raw], -1)
	tests := []struct {
		stored, send imaging.Encoding
	}{
		{imaging.Raw, imaging.Zstd},
		{imaging.Raw, imaging.Gzip},
		{imaging.Zstd, imaging.Raw},
		{imaging.Gzip, imaging.Raw},
	}
	for _, tt := range tests {
		t.Run(tt.stored.String()+"-as-"+tt.send.String(), func(t *testing.T) {
			h, stream, enc := encodeStreamAs(t, imgs[tt.stored], 256<<10, tt.send)
			if h.Encoding != tt.send {
				t.Fatalf("header says %v, want %v", h.Encoding, tt.send)
			}
			if tt.send.Compressed() && h.StreamSize != 0 {
				t.Fatalf("on-the-fly stream announces %d bytes", h.StreamSize)
			}
			if tt.send == imaging.Raw && len(stream) > 4<<20 {
				t.Fatalf("decoded stream of %d bytes: zero runs were not left out", len(stream))
			}
			target, err := receiveInto(t, h, stream)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := testimage.SHA256(target, h.ImageSize); got != want {
				t.Fatal("target differs from the image")
			}
			d := imaging.NewDigester()
			raw, _ := os.ReadFile(imgs[imaging.Raw])
			d.Write(raw)
			if enc.Digest() != d.Sum() {
				t.Fatal("source digest differs from the image's")
			}
		})
	}
}

func TestReceiveRejectsCorruptAndShortStreams(t *testing.T) {
	imgs := makeImages(t, 3<<20, testimage.Dense)
	h, stream, _ := encodeStream(t, imgs[imaging.Raw], 1<<20)
	// The second frame's payload starts after the first frame.
	second := FrameHeaderLen + (1 << 20) + FrameHeaderLen
	tests := []struct {
		name   string
		stream func() []byte
		want   string
	}{
		{"flipped payload byte", func() []byte {
			s := append([]byte(nil), stream...)
			s[second+100] ^= 0x40
			return s
		}, "payload checksum mismatch"},
		{"flipped header byte", func() []byte {
			s := append([]byte(nil), stream...)
			s[FrameHeaderLen+(1<<20)+17] ^= 1
			return s
		}, "frame header checksum mismatch"},
		{"truncated", func() []byte { return stream[:len(stream)-100] }, ErrTruncated.Error()},
		{"no end frame", func() []byte { return stream[:len(stream)-FrameHeaderLen-endPayloadLen] }, ErrTruncated.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, err := receiveInto(t, h, tt.stream())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Receive = %v, want error containing %q", err, tt.want)
			}
			if tt.name == "flipped payload byte" {
				// The bad frame must not have reached the disk.
				b, _ := os.ReadFile(target)
				if !bytes.Equal(b[1<<20:2<<20], bytes.Repeat([]byte{0xFF}, 1<<20)) {
					t.Fatal("a frame that failed its checksum was written")
				}
			}
		})
	}
}

// A compressing encoder over any reader sends what NewEncoder sends of a
// raw image compressed on the fly: it lands the same bytes and digest.
func TestCompressingEncoderOverAReader(t *testing.T) {
	imgs := makeImages(t, 3<<20+4096, testimage.Typical)
	raw, err := os.ReadFile(imgs[imaging.Raw])
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewCompressingEncoder(bytes.NewReader(raw), int64(len(raw)), 256<<10, imaging.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	stream := frames(t, enc)
	h := enc.Header()
	if h.Encoding != imaging.Zstd || h.ImageSize != int64(len(raw)) {
		t.Fatalf("header %+v", h)
	}
	if len(stream) >= len(raw) {
		t.Fatalf("%d bytes of stream for %d of a compressible image", len(stream), len(raw))
	}
	target, err := receiveInto(t, h, stream)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := testimage.SHA256(imgs[imaging.Raw], -1)
	if got, _ := testimage.SHA256(target, h.ImageSize); got != want {
		t.Fatal("target differs from the reader's bytes")
	}
	d := imaging.NewDigester()
	d.Write(raw)
	if enc.Digest() != d.Sum() {
		t.Fatal("digest differs from the reader's bytes")
	}
	if _, err := NewCompressingEncoder(bytes.NewReader(raw), 1, 256<<10, imaging.Raw); err == nil {
		t.Error("a compressing encoder that does not compress was made")
	}
}

// TestCompressedOnTheFlyInChunks: an image of many chunks, the last one
// short, compresses on several cores into a stream that decodes to its
// bytes, and into the same stream whatever the number of cores.
func TestCompressedOnTheFlyInChunks(t *testing.T) {
	imgs := makeImages(t, 5*imaging.ChunkSize+12288, testimage.Typical)
	raw, err := os.ReadFile(imgs[imaging.Raw])
	if err != nil {
		t.Fatal(err)
	}
	streamOf := func(procs int) []byte {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		enc, err := NewCompressingEncoder(bytes.NewReader(raw), int64(len(raw)), 256<<10, imaging.Zstd)
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		return frames(t, enc)
	}
	one, four := streamOf(1), streamOf(4)
	if !bytes.Equal(one, four) {
		t.Fatalf("the stream differs with 1 core (%d bytes) and 4 (%d bytes)", len(one), len(four))
	}
	h := StreamHeader{Version: Version, Encoding: imaging.Zstd, FrameSize: 256 << 10, ImageSize: int64(len(raw))}
	target, err := receiveInto(t, h, four)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := testimage.SHA256(target, h.ImageSize)
	if want := fmt.Sprintf("%x", sha256.Sum256(raw)); got != want {
		t.Fatalf("target sha256 %s, want the image's %s", got, want)
	}
}
