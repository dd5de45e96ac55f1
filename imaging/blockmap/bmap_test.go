package blockmap_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dolly/imaging/blockmap"
	"dolly/internal/testimage"
)

func TestBmap(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 10*4096/16+100) // 10 blocks and a part
	size := int64(len(data))
	m, checks, err := blockmap.ParseBmap([]byte(testimage.Bmap(data, 4096, [][2]int64{{0, 1}, {4, 4}, {9, 10}})), size)
	if err != nil {
		t.Fatal(err)
	}
	want := []blockmap.Extent{{0, 2 * 4096}, {4 * 4096, 4096}, {9 * 4096, size - 9*4096}}
	if fmt.Sprint(m.Used) != fmt.Sprint(want) || m.FS != "bmap" {
		t.Errorf("map %v, want %v", m.Used, want)
	}
	r := bytes.NewReader(data)
	if err := blockmap.VerifyBmap(r, checks, 1<<30); err != nil {
		t.Errorf("verify: %v", err)
	}
	changed := bytes.Clone(data)
	changed[4*4096+7] ^= 1
	if err := blockmap.VerifyBmap(bytes.NewReader(changed), checks, 1<<30); !errors.Is(err, blockmap.ErrBmapMismatch) {
		t.Errorf("verify of a changed image: %v, want blockmap.ErrBmapMismatch", err)
	}
	// Outside the map a change is nobody's concern.
	changed = bytes.Clone(data)
	changed[6*4096] ^= 1
	if err := blockmap.VerifyBmap(bytes.NewReader(changed), checks, 1<<30); err != nil {
		t.Errorf("a change outside the mapped blocks: %v", err)
	}

	for _, c := range []struct {
		name, bmap, want string
	}{
		{"another image's", testimage.Bmap(data[:4096*3], 4096, [][2]int64{{0, 0}}), "maps another image"},
		{"ranges out of order", testimage.Bmap(data, 4096, [][2]int64{{4, 4}, {0, 1}}), "in order"},
		{"past the end", strings.Replace(testimage.Bmap(data, 4096, [][2]int64{{0, 1}}), "> 0-1 <", "> 0-11 <", 1), "in order"},
		{"not XML", "hello", "not a bmap file"},
		{"version 3", strings.Replace(testimage.Bmap(data, 4096, nil), `version="2.0"`, `version="3.0"`, 1), "only 1.x and 2.x"},
	} {
		if _, _, err := blockmap.ParseBmap([]byte(c.bmap), size); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
	}
}

func TestFindBmap(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "nt.img")
	if got := blockmap.FindBmap(img); got != "" {
		t.Errorf("no bmap: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "nt.bmap"), nil, 0o644)
	if got := blockmap.FindBmap(img); got != filepath.Join(dir, "nt.bmap") {
		t.Errorf("nt.bmap beside nt.img: %q", got)
	}
	os.WriteFile(img+".bmap", nil, 0o644)
	if got := blockmap.FindBmap(img); got != img+".bmap" {
		t.Errorf("nt.img.bmap beside nt.img: %q", got)
	}
}

func TestUnion(t *testing.T) {
	a := blockmap.Map{FS: "bmap", BlockSize: 4096, Size: 100, Used: []blockmap.Extent{{0, 10}, {50, 10}}}
	b := blockmap.Map{FS: "ext4", BlockSize: 1024, Size: 100, Used: []blockmap.Extent{{5, 10}, {30, 5}, {60, 5}}}
	u := blockmap.Union(a, b)
	if want := "[{0 15} {30 5} {50 15}]"; fmt.Sprint(u.Used) != want || u.FS != "bmap and ext4" || u.BlockSize != 1024 {
		t.Errorf("union %+v, want extents %s", u, want)
	}
}
