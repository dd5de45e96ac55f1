package service

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"dolly/imaging"
)

// Library is the directory of images a service casts from.
type Library struct {
	dir     string
	mu      sync.Mutex
	digests map[string]string // by name@size@mtime: learnt from casts
}

// Image is one image of the library.
type Image struct {
	Name     string    `json:"name"`
	Bytes    int64     `json:"bytes"` // as stored
	Format   string    `json:"format"`
	Captured time.Time `json:"captured"`         // when the file was last written
	Digest   string    `json:"digest,omitempty"` // of the raw image, known once it has been cast
}

// NewLibrary opens the library in dir.
func NewLibrary(dir string) (*Library, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("image library: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("image library %s is not a directory", dir)
	}
	return &Library{dir: dir, digests: map[string]string{}}, nil
}

// Images lists the images, by name. Files that are not images (hidden
// ones, directories, ones whose format dolly does not read) are left out.
func (l *Library) Images() ([]Image, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("image library: %w", err)
	}
	out := []Image{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue // stat takes files and links to files
		}
		img, err := l.stat(e.Name())
		if err != nil {
			continue
		}
		out = append(out, img)
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Path is the file of the image called name, which must be a file of the
// library itself: no path, no way out of the directory.
func (l *Library) Path(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("%q is not an image name: give the name of a file in %s", name, l.dir)
	}
	if _, err := l.stat(name); err != nil {
		return "", err
	}
	return filepath.Join(l.dir, name), nil
}

func (l *Library) stat(name string) (Image, error) {
	p := filepath.Join(l.dir, name)
	f, err := os.Open(p)
	if err != nil {
		return Image{}, fmt.Errorf("no image %q in %s", name, l.dir)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Image{}, err
	}
	if !st.Mode().IsRegular() {
		return Image{}, fmt.Errorf("%s is not a file", p)
	}
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	enc, err := imaging.Detect(head[:n])
	if err != nil {
		return Image{}, fmt.Errorf("%s: %w", p, err)
	}
	img := Image{Name: name, Bytes: st.Size(), Format: enc.String(), Captured: st.ModTime().UTC()}
	l.mu.Lock()
	img.Digest = l.digests[key(img)]
	l.mu.Unlock()
	return img, nil
}

// learn records the digest a cast found for the image called name, as
// the file is now.
func (l *Library) learn(name, digest string) {
	img, err := l.stat(name)
	if err != nil || digest == "" {
		return
	}
	l.mu.Lock()
	l.digests[key(img)] = digest
	l.mu.Unlock()
}

// key names an image as it is: a file changed since it was cast has its
// digest to learn again.
func key(img Image) string {
	return fmt.Sprintf("%s@%d@%d", img.Name, img.Bytes, img.Captured.UnixNano())
}
