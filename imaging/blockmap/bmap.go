package blockmap

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A .bmap file (bmaptool's block map, made by `bmaptool create`) beside a
// raw image lists the blocks worth writing, each range with a checksum of
// its bytes: the image's author has said what is in use. It is honoured in
// place of the file system's own records.

// bmapFile is the XML of a .bmap, versions 1.x and 2.x.
type bmapFile struct {
	XMLName      xml.Name `xml:"bmap"`
	Version      string   `xml:"version,attr"`
	ImageSize    string   `xml:"ImageSize"`
	BlockSize    string   `xml:"BlockSize"`
	BlocksCnt    string   `xml:"BlocksCnt"`
	ChecksumType string   `xml:"ChecksumType"`
	Ranges       []struct {
		Sum  string `xml:"chksum,attr"`
		Span string `xml:",chardata"`
	} `xml:"BlockMap>Range"`
}

// Check is a range of a .bmap with the checksum of its bytes.
type Check struct {
	Extent
	Sum  []byte
	hash func() hash.Hash
}

// FindBmap returns the path of the .bmap beside image, as bmaptool names
// it (nt.img.bmap, or nt.bmap for nt.img), or "" if there is none.
func FindBmap(image string) string {
	for p := image; ; {
		if c := p + ".bmap"; fileExists(c) {
			return c
		}
		ext := filepath.Ext(p)
		if ext == "" || ext == p {
			return ""
		}
		p = strings.TrimSuffix(p, ext)
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// ParseBmap reads a .bmap for an image of size bytes.
func ParseBmap(data []byte, size int64) (Map, []Check, error) {
	var f bmapFile
	if err := xml.Unmarshal(data, &f); err != nil {
		return Map{}, nil, fmt.Errorf("not a bmap file: %w", err)
	}
	major, _, _ := strings.Cut(f.Version, ".")
	if major != "1" && major != "2" {
		return Map{}, nil, fmt.Errorf("bmap version %q: only 1.x and 2.x are known", f.Version)
	}
	num := func(s, what string) (int64, error) {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("bmap %s %q is not a count", what, strings.TrimSpace(s))
		}
		return v, nil
	}
	imageSize, err := num(f.ImageSize, "ImageSize")
	if err != nil {
		return Map{}, nil, err
	}
	blockSize, err := num(f.BlockSize, "BlockSize")
	if err != nil || blockSize == 0 {
		return Map{}, nil, fmt.Errorf("bmap BlockSize %q is not a block size", strings.TrimSpace(f.BlockSize))
	}
	if imageSize != size {
		return Map{}, nil, fmt.Errorf("the bmap is of an image of %d bytes, this one has %d: it maps another image", imageSize, size)
	}
	var newHash func() hash.Hash
	switch strings.ToLower(strings.TrimSpace(f.ChecksumType)) {
	case "sha256":
		newHash = sha256.New
	case "sha1", "": // version 1 names none: SHA-1
		newHash = sha1.New
	default:
		return Map{}, nil, fmt.Errorf("bmap checksum type %q is not known", f.ChecksumType)
	}
	blocks := (size + blockSize - 1) / blockSize
	var b builder
	var checks []Check
	last := int64(-1)
	for _, r := range f.Ranges {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(r.Span), "-")
		if !isRange {
			hi = lo
		}
		first, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		end, err2 := strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		if err1 != nil || err2 != nil || first > end || first <= last || end >= blocks {
			return Map{}, nil, fmt.Errorf("bmap range %q is not a range of the image's %d blocks in order", strings.TrimSpace(r.Span), blocks)
		}
		last = end
		e := Extent{Off: first * blockSize, Len: min((end+1)*blockSize, size) - first*blockSize}
		b.add(e.Off, e.Len)
		sum, err := hex.DecodeString(strings.TrimSpace(r.Sum))
		if err != nil || (len(sum) > 0 && len(sum) != newHash().Size()) {
			return Map{}, nil, fmt.Errorf("bmap range %q: checksum %q", strings.TrimSpace(r.Span), r.Sum)
		}
		if len(sum) > 0 {
			checks = append(checks, Check{Extent: e, Sum: sum, hash: newHash})
		}
	}
	return Map{FS: "bmap", BlockSize: blockSize, Size: size, Used: b.used}, checks, nil
}

// ErrBmapMismatch says a range of the image does not hold the bytes its
// .bmap's checksum names: the map is of another image.
var ErrBmapMismatch = errors.New("the image does not match its bmap")

// VerifyBmap checks ranges of r against their checksums, reading at most
// about budget bytes: the first ranges and some spread over the image, so
// that a stale map is caught before anything is sent, without reading the
// whole image twice. (The cast's digest covers every byte it sends.)
func VerifyBmap(r io.ReaderAt, checks []Check, budget int64) error {
	if len(checks) == 0 {
		return nil
	}
	var read int64
	step := 1
	var total int64
	for _, c := range checks {
		total += c.Len
	}
	if total > budget {
		step = int(min(int64(len(checks)), max(1, total/budget)))
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < len(checks) && read < budget; i += step {
		c := checks[i]
		h := c.hash()
		if _, err := io.CopyBuffer(h, io.NewSectionReader(r, c.Off, c.Len), buf); err != nil {
			return fmt.Errorf("reading the image to check its bmap: %w", err)
		}
		if !bytes.Equal(h.Sum(nil), c.Sum) {
			return fmt.Errorf("%w: bytes %d-%d differ from its checksum", ErrBmapMismatch, c.Off, c.End()-1)
		}
		read += c.Len
	}
	return nil
}
