// Package imaging reads disk images and writes them to targets: image
// formats (raw, zstd, gzip), zero-run detection, block-device and file
// targets, and the content digest both ends of a cast agree on.
package imaging

import (
	"bytes"
	"fmt"
)

// Encoding is how an image file stores the raw disk bytes.
type Encoding uint8

const (
	Raw  Encoding = iota // the bytes as they go onto the disk
	Zstd                 // Zstandard (.zst)
	Gzip                 // gzip (.gz)
)

func (e Encoding) String() string {
	switch e {
	case Raw:
		return "raw"
	case Zstd:
		return "zstd"
	case Gzip:
		return "gzip"
	}
	return fmt.Sprintf("encoding(%d)", uint8(e))
}

// Compressed reports whether the image must be decoded before it is written.
func (e Encoding) Compressed() bool { return e == Zstd || e == Gzip }

// ParseEncoding maps a name ("raw", "none", "zstd", "gzip") to an Encoding.
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "raw", "none", "":
		return Raw, nil
	case "zstd", "zst":
		return Zstd, nil
	case "gzip", "gz":
		return Gzip, nil
	}
	return 0, fmt.Errorf("unknown image encoding %q (want raw, zstd or gzip)", s)
}

// MagicLen is how many leading bytes Detect needs to tell formats apart.
const MagicLen = 6

// unsupported lists compressed formats people try that dolly does not read,
// so the error can say what the file is instead of casting it as raw bytes.
var unsupported = []struct {
	magic []byte
	name  string
}{
	{[]byte{0xfd, '7', 'z', 'X', 'Z', 0x00}, "xz"},
	{[]byte("BZh"), "bzip2"},
	{[]byte{0x04, 0x22, 0x4d, 0x18}, "lz4"},
	{[]byte("7z\xbc\xaf\x27\x1c"), "7z"},
}

// Detect tells the encoding of an image from its first bytes. Anything that
// is not a known compressed format is a raw image.
func Detect(head []byte) (Encoding, error) {
	switch {
	case len(head) >= 4 && bytes.Equal(head[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return Zstd, nil
	case len(head) >= 4 && head[1] == 0x2a && head[2] == 0x4d && head[3] == 0x18 && head[0]&0xf0 == 0x50:
		// A zstd skippable frame (0x184D2A5?) opens some zstd files.
		return Zstd, nil
	case len(head) >= 3 && head[0] == 0x1f && head[1] == 0x8b && head[2] == 0x08:
		return Gzip, nil
	}
	for _, u := range unsupported {
		if bytes.HasPrefix(head, u.magic) {
			return 0, fmt.Errorf("image is %s-compressed, which dolly does not read: decompress it, or recompress it with zstd", u.name)
		}
	}
	return Raw, nil
}
