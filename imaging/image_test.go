package imaging

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFingerprintSeesAWriteInPlace changes one byte of an image where no
// sample reaches: the fingerprint must change all the same (a restarted
// server would otherwise take a cast up over other bytes, under the same
// frame keys), and stay the same while nothing changes.
func TestFingerprintSeesAWriteInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nt.img")
	data := bytes.Repeat([]byte("dolly image "), 1<<17) // 1.5 MiB
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fingerprint := func() string {
		im, err := OpenImage(path)
		if err != nil {
			t.Fatal(err)
		}
		defer im.Close()
		fp, err := im.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	first := fingerprint()
	if again := fingerprint(); again != first {
		t.Fatalf("fingerprint changed with nothing written: %s, then %s", first, again)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Samples are 16 KiB at every 1/32 of the image: 40000 is between the
	// first two.
	if _, err := f.WriteAt([]byte{'X'}, 40000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	later := time.Now().Add(time.Second)
	os.Chtimes(path, later, later) // file systems with coarse times
	if fingerprint() == first {
		t.Error("a byte written in place did not change the fingerprint")
	}
}

// A stored image is checked against zstd's own checksum; a cast's stream,
// checked by its frames' CRCs and the digest, skips it.
func TestZstdChecksum(t *testing.T) {
	raw := bytes.Repeat([]byte("dolly image data "), 20000)
	var packed bytes.Buffer
	if err := Compress(&packed, Zstd, bytes.NewReader(raw), 1); err != nil {
		t.Fatal(err)
	}
	b := packed.Bytes()
	b[len(b)-1] ^= 0xff // the frame's checksum, the last 4 bytes
	tests := []struct {
		name    string
		open    func(Encoding, io.Reader) (io.ReadCloser, error)
		wantErr bool
	}{
		{"stored image", NewDecoder, true},
		{"cast stream", NewStreamDecoder, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := tt.open(Zstd, bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			got, err := io.ReadAll(d)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want an error: %v", err, tt.wantErr)
			}
			if !tt.wantErr && !bytes.Equal(got, raw) {
				t.Fatal("decoded bytes differ")
			}
		})
	}
}
