// Package testimage makes deterministic disk images and targets for tests
// and benchmarks, and checks what ended up on a target.
package testimage

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"dolly/imaging"
)

// Mix says what an image is made of, as fractions of its regions.
type Mix struct {
	Zero   float64 // runs of zeros (free space)
	Random float64 // incompressible data
	// The rest is compressible, text-like data.
}

// Typical is a mostly empty filesystem with some of each.
var Typical = Mix{Zero: 0.5, Random: 0.2}

// Dense has no zero runs: every byte travels as data.
var Dense = Mix{Zero: 0, Random: 0.5}

// Write creates a deterministic image of size bytes at path, made of regions
// of 4 KiB to 2 MiB of zeros, random bytes and compressible text.
func Write(path string, size int64, seed uint64, mix Mix) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	// Compressible regions are cut from a pool of text made once.
	words := []string{"kernel ", "module ", "libc.so.6 ", "usr/share/doc/", "config\n", "0x0000ffff ", "README ", "init ", "mount ", "ext4 "}
	pool := make([]byte, 4<<20)
	for i := 0; i < len(pool); {
		i += copy(pool[i:], words[r.IntN(len(words))])
	}
	buf := make([]byte, 2<<20)
	for left := size; left > 0; {
		n := int(min(left, int64(4096*(1+r.IntN(512)))))
		p := buf[:n]
		switch x := r.Float64(); {
		case x < mix.Zero:
			clear(p)
		case x < mix.Zero+mix.Random:
			for i := 0; i+8 <= n; i += 8 {
				binary.LittleEndian.PutUint64(p[i:], r.Uint64())
			}
			for i := n &^ 7; i < n; i++ {
				p[i] = byte(r.Uint32())
			}
		default:
			off := r.IntN(len(pool) - n)
			copy(p, pool[off:off+n])
		}
		if _, err := w.Write(p); err != nil {
			f.Close()
			return err
		}
		left -= int64(n)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Compress writes src encoded as enc to dst.
func Compress(src, dst string, enc imaging.Encoding) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if err := imaging.Compress(out, enc, in, 0); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Fill creates (or overwrites) path with size bytes of b, standing in for a
// disk that holds old data.
func Fill(path string, b byte, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = b
	}
	for left := size; left > 0; {
		k := min(left, int64(len(chunk)))
		if _, err := f.Write(chunk[:k]); err != nil {
			f.Close()
			return err
		}
		left -= k
	}
	return f.Close()
}

// SHA256 returns the hex SHA-256 of the first n bytes of path (all of it
// when n < 0).
func SHA256(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var r io.Reader = f
	if n >= 0 {
		r = io.LimitReader(f, n)
	}
	h := sha256.New()
	got, err := io.Copy(h, r)
	if err != nil {
		return "", err
	}
	if n >= 0 && got != n {
		return "", fmt.Errorf("%s holds %d bytes, want at least %d", path, got, n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// DecodedSHA256 returns the hex SHA-256 of what the image at path decodes
// to (its bytes, if raw).
func DecodedSHA256(path string) (string, error) {
	im, err := imaging.OpenImage(path)
	if err != nil {
		return "", err
	}
	defer im.Close()
	dec, err := imaging.NewDecoder(im.Encoding, im.Stream())
	if err != nil {
		return "", err
	}
	defer dec.Close()
	h := sha256.New()
	if _, err := io.Copy(h, dec); err != nil {
		return "", fmt.Errorf("decoding %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
