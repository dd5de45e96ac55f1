package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"dolly/imaging/blockmap"
	"dolly/internal/testenv"
	"dolly/internal/testimage"
	"dolly/server"
)

// dirtyExt4 makes an ext4 image of size bytes whose free blocks hold old
// random data (a large random file written, then deleted), holding one
// random file of keep bytes, which it returns.
func dirtyExt4(t *testing.T, dir string, size, keep int64) (img string, kept []byte) {
	t.Helper()
	for _, tool := range []string{"mke2fs", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: apt-get install e2fsprogs", tool)
		}
	}
	img = filepath.Join(dir, "golden.img")
	os.WriteFile(img, nil, 0o644)
	os.Truncate(img, size)
	if out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", img).CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	old, kf := filepath.Join(dir, "old"), filepath.Join(dir, "keep")
	junk := make([]byte, size*6/10)
	rand.Read(junk)
	os.WriteFile(old, junk, 0o644)
	kept = make([]byte, keep)
	rand.Read(kept)
	os.WriteFile(kf, kept, 0o644)
	for _, req := range []string{"write " + old + " old", "rm old", "mkdir etc", "write " + kf + " etc/keep"} {
		if out, err := exec.Command("debugfs", "-w", "-R", req, img).CombinedOutput(); err != nil {
			t.Fatalf("debugfs %s: %v\n%s", req, err, out)
		}
	}
	return img, kept
}

// checkKeptFile checks that each ext4 target checks clean and holds the
// file dirtyExt4 kept, byte for byte.
func checkKeptFile(t *testing.T, dir string, targets []string, kept []byte) {
	t.Helper()
	for i, tg := range targets {
		if out, err := exec.Command("e2fsck", "-fn", tg).CombinedOutput(); err != nil {
			t.Errorf("pc%02d: e2fsck -fn: %v\n%s", i+1, err, out)
		}
		dump := filepath.Join(dir, fmt.Sprintf("dump%d", i))
		if out, err := exec.Command("debugfs", "-R", "dump etc/keep "+dump, tg).CombinedOutput(); err != nil {
			t.Fatalf("pc%02d: debugfs dump: %v\n%s", i+1, err, out)
		}
		if got, _ := os.ReadFile(dump); !bytes.Equal(got, kept) {
			t.Errorf("pc%02d: etc/keep holds %d bytes unlike the golden file's %d", i+1, len(got), len(kept))
		}
	}
}

// A used ext4 image casts its blocks in use only: the free space, full of
// a deleted file's data, is not sent; every target checks clean and holds
// the file. -zero-free casts it byte for byte.
func TestDirtyExt4CastsItsUsedBlocks(t *testing.T) {
	dir := t.TempDir()
	const size, keep = 64 << 20, 12 << 20
	img, kept := dirtyExt4(t, dir, size, keep)
	targets := func(tag string) []string {
		var ts []string
		for i := range 2 {
			p := filepath.Join(dir, fmt.Sprintf("%s%d", tag, i))
			testimage.Fill(p, 0xFF, size)
			ts = append(ts, p)
		}
		return ts
	}
	cast := func(tag string, extra ...string) (server.Report, string, []string) {
		ts := targets(tag)
		report := filepath.Join(dir, tag+".json")
		args := append([]string{"-image", img, "-chain", "-report", report}, extra...)
		if !slices.Contains(extra, "-compress") {
			args = append(args, "-compress", "no")
		}
		r := runCast(t, args, ts, 2*time.Minute)
		out := r.server.out.String()
		if r.code != 0 {
			t.Fatalf("dolly-server %v exited %d:\n%s", extra, r.code, out)
		}
		b, err := os.ReadFile(report)
		if err != nil {
			t.Fatal(err)
		}
		var rep server.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return rep, out, ts
	}

	rep, out, ts := cast("used")
	if !strings.Contains(out, "ext4: ") || !strings.Contains(out, "free blocks are not sent") {
		t.Errorf("the server does not say it maps the image:\n%s", out)
	}
	// The file, the journal and the metadata: a few MB over the file.
	if limit := int64(keep) * 3 / 2; rep.StreamBytes > limit {
		t.Errorf("the stream carried %d bytes for a %d-byte file: the free space went too", rep.StreamBytes, keep)
	}
	checkKeptFile(t, dir, ts, kept)

	// Compressed on the fly, the free blocks are zeros to the compressor.
	if z, _, _ := cast("zstd", "-compress", "yes"); z.StreamBytes > int64(keep)*3/2 {
		t.Errorf("compressed on the fly, the stream carried %d bytes for a %d-byte file", z.StreamBytes, keep)
	}

	all, out, ts := cast("all", "-zero-free")
	t.Logf("stream: %d bytes through the map, %d with -zero-free, of a %d-byte image holding a %d-byte file", rep.StreamBytes, all.StreamBytes, size, keep)
	if strings.Contains(out, "free blocks are not sent") {
		t.Errorf("-zero-free still maps the image:\n%s", out)
	}
	if all.StreamBytes < size/2 {
		t.Errorf("-zero-free sent %d bytes of a %d-byte image whose free space is old data", all.StreamBytes, size)
	}
	want, _ := testimage.SHA256(img, -1)
	for i, tg := range ts {
		if got, _ := testimage.SHA256(tg, size); got != want {
			t.Errorf("pc%02d: with -zero-free the target differs from the image", i+1)
		}
	}
}

// A file system that was not cleanly unmounted is refused before any node
// joins, with the way out.
func TestDirtyFlagRefused(t *testing.T) {
	dir := t.TempDir()
	img, _ := dirtyExt4(t, dir, 16<<20, 1<<20)
	if out, err := exec.Command("debugfs", "-w", "-R", "ssv state 0", img).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v\n%s", err, out)
	}
	p := start(t, "dolly-server", "-image", img, "-nodes", "1", "-listen", freePort(t), "-http", "off")
	if code := p.wait(t, 10*time.Second); code == 0 {
		t.Fatalf("dolly-server cast a file system not cleanly unmounted:\n%s", p.out.String())
	}
	for _, want := range []string{"not cleanly unmounted", "e2fsck", "-zero-free"} {
		if !strings.Contains(p.out.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, p.out.String())
		}
	}
}

// A .bmap beside a raw image is its map: the blocks it lists are cast, the
// rest go as zeros; a .bmap whose checksums the image does not match is
// refused before any node joins.
func TestBmapBesideTheImage(t *testing.T) {
	dir := t.TempDir()
	const size, block = 16 << 20, 4096
	img := filepath.Join(dir, "nt.img")
	if err := testimage.Write(img, size, 11, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(img)
	ranges := [][2]int64{{0, 255}, {1024, 1279}, {4000, 4095}} // 2.4 MB of 16.8
	os.WriteFile(filepath.Join(dir, "nt.bmap"), []byte(testimage.Bmap(data, block, ranges)), 0o644)
	var ts []string
	for i := range 2 {
		p := filepath.Join(dir, fmt.Sprintf("disk%d", i))
		testimage.Fill(p, 0xFF, size)
		ts = append(ts, p)
	}
	report := filepath.Join(dir, "report.json")
	r := runCast(t, []string{"-image", img, "-chain", "-compress", "no", "-report", report}, ts, time.Minute)
	if r.code != 0 {
		t.Fatalf("dolly-server exited %d:\n%s", r.code, r.server.out.String())
	}
	if !strings.Contains(r.server.out.String(), "nt.bmap maps 2.5 MB of 16.8 MB") {
		t.Errorf("the server does not say it casts by the bmap:\n%s", r.server.out.String())
	}
	var rep server.Report
	b, _ := os.ReadFile(report)
	json.Unmarshal(b, &rep)
	if rep.StreamBytes > 3<<20 {
		t.Errorf("the stream carried %d bytes for 2.5 MB mapped", rep.StreamBytes)
	}
	want := make([]byte, size)
	for _, rg := range ranges {
		copy(want[rg[0]*block:(rg[1]+1)*block], data[rg[0]*block:(rg[1]+1)*block])
	}
	for i, tg := range ts {
		got, _ := os.ReadFile(tg)
		if !bytes.Equal(got[:size], want) {
			t.Errorf("pc%02d: the target is not the mapped blocks with zeros between", i+1)
		}
	}

	// The image changed since the bmap was made: refused by the dates,
	// and with the dates made to agree, by the checksums.
	f, _ := os.OpenFile(img, os.O_RDWR, 0)
	f.WriteAt([]byte{^data[100]}, 100)
	f.Close()
	refused := func(why string) {
		t.Helper()
		p := start(t, "dolly-server", "-image", img, "-nodes", "1", "-listen", freePort(t), "-http", "off")
		if code := p.wait(t, 10*time.Second); code == 0 {
			t.Fatalf("dolly-server cast an image its bmap does not match:\n%s", p.out.String())
		}
		for _, want := range []string{"nt.bmap", why, "-zero-free"} {
			if !strings.Contains(p.out.String(), want) {
				t.Errorf("the refusal does not say %q:\n%s", want, p.out.String())
			}
		}
	}
	refused("the image changed after the bmap was made")
	later := time.Now().Add(time.Minute)
	os.Chtimes(filepath.Join(dir, "nt.bmap"), later, later)
	refused("does not match its bmap")
}

// The free blocks of a mapped image are not written: a disk that can
// discard gives them up, one that cannot keeps its old bytes there, and
// with -zero-free both take the whole image, byte for byte. Blocks in use
// are the image's on every target, and the file system checks clean.
func TestFreeBlocksDiscardedOrLeft(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	const size, keep = 64 << 20, 8 << 20
	img, kept := dirtyExt4(t, dir, size, keep)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	used, err := blockmap.Read(f, size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	golden, _ := os.ReadFile(img)
	const old = 0xAA
	disk := func(name string, discard bool) string {
		backing := filepath.Join(dir, name)
		if err := testimage.Fill(backing, old, size); err != nil {
			t.Fatal(err)
		}
		if discard {
			return testenv.LoopDevice(t, backing)
		}
		// The kernel keeps a discard limit set from sysfs for the loop
		// device's whole life, and once it is 0 it cannot be raised: the
		// device is removed once detached, so the next one is new.
		var dev string
		t.Cleanup(func() { testenv.RemoveLoopDevice(t, dev) })
		dev = testenv.LoopDevice(t, backing)
		knob := "/sys/block/" + filepath.Base(dev) + "/queue/discard_max_bytes"
		if err := os.WriteFile(knob, []byte("0"), 0); err != nil {
			t.Skipf("skipped: cannot turn discard off on %s: %v", dev, err)
		}
		return dev
	}
	ssd, hdd := disk("ssd", true), disk("hdd", false)
	cast := func(extra ...string) {
		args := append([]string{"-image", img, "-chain", "-compress", "no", "-no-probe", "-yes"}, extra...)
		r := runCast(t, args, []string{ssd, hdd}, 2*time.Minute)
		if r.code != 0 {
			t.Fatalf("dolly-server %v exited %d:\n%s", extra, r.code, r.server.out.String())
		}
		for i, tg := range []string{ssd, hdd} {
			if out, err := exec.Command("e2fsck", "-fn", tg).CombinedOutput(); err != nil {
				t.Errorf("%v pc%02d: e2fsck -fn: %v\n%s", extra, i+1, err, out)
			}
			dump := filepath.Join(dir, fmt.Sprintf("dump%d", i))
			if out, err := exec.Command("debugfs", "-R", "dump etc/keep "+dump, tg).CombinedOutput(); err != nil {
				t.Fatalf("pc%02d: debugfs dump: %v\n%s", i+1, err, out)
			}
			if got, _ := os.ReadFile(dump); !bytes.Equal(got, kept) {
				t.Errorf("%v pc%02d: etc/keep differs from the golden file", extra, i+1)
			}
		}
	}
	// free reports what the free blocks of a target hold, but for its
	// first and last MiB: zeros, the disk's old bytes, or a mix. edge
	// counts the free bytes of those MiBs that are not zeros.
	const edge = 1 << 20
	free := func(dev string) (zeros, olds, other, edgeOld int64) {
		got, err := os.ReadFile(dev)
		if err != nil {
			t.Fatal(err)
		}
		var off int64
		for off < size {
			start, end := used.NextUsed(off)
			if !bytes.Equal(got[start:end], golden[start:end]) {
				t.Errorf("%s: the used blocks at %d..%d differ from the image's", dev, start, end)
			}
			for b := off; b < start; b += 4096 {
				switch blk := got[b:min(b+4096, start)]; {
				case b < edge || b >= size-edge:
					if slices.ContainsFunc(blk, func(c byte) bool { return c != 0 }) {
						edgeOld += int64(len(blk))
					}
				case !slices.ContainsFunc(blk, func(c byte) bool { return c != 0 }):
					zeros += int64(len(blk))
				case !slices.ContainsFunc(blk, func(c byte) bool { return c != old }):
					olds += int64(len(blk))
				default:
					other += int64(len(blk))
				}
			}
			off = end
		}
		return zeros, olds, other, edgeOld
	}

	cast()
	// Free runs shorter than a zero run travel in data frames, as zeros,
	// and a discard gives up whole pages only (this file system's blocks
	// are 1 KiB): a few KiB of the free space are written all the same.
	// The first and last MiB, where other systems keep their signatures,
	// are zeroed where free, whatever the disk.
	mid := int64(size - 2*edge) // free bytes between them
	for off := int64(edge); off < size-edge; {
		start, end := used.NextUsed(off)
		mid -= min(end, size-edge) - min(start, size-edge)
		off = end
	}
	if zeros, olds, other, edgeOld := free(ssd); zeros < mid*99/100 || edgeOld != 0 {
		t.Errorf("on the disk that discards, %d of %d free bytes read zeros (%d old, %d other); %d free bytes at its ends are not zeros", zeros, mid, olds, other, edgeOld)
	}
	if zeros, olds, other, edgeOld := free(hdd); olds < mid*99/100 || edgeOld != 0 {
		t.Errorf("on the disk that cannot discard, %d of %d free bytes were left as they were (%d zeros, %d other); %d free bytes at its ends are not zeros", olds, mid, zeros, other, edgeOld)
	}

	for _, dev := range []string{ssd, hdd} { // the old bytes back
		if err := testimage.Fill(dev, old, size); err != nil {
			t.Fatal(err)
		}
	}
	cast("-zero-free")
	for _, dev := range []string{ssd, hdd} {
		if got, _ := os.ReadFile(dev); !bytes.Equal(got, golden) {
			t.Errorf("with -zero-free %s is not the image", dev)
		}
	}
}

// NTFS and FAT32 images whose free space holds old random data (the disk
// was written over with it before a quick format) cast only the blocks in
// use: at most 1.1 times the bytes in use travel; each target checks
// clean with the file system's own tools and holds the golden files.
func TestDirtyNTFSAndFAT32CastTheirUsedBlocks(t *testing.T) {
	const size, files = 64 << 20, 3
	type fsKind struct {
		name  string
		tools []string
		mkfs  func(img string) []string
		put   func(img, src, name string) []string
		get   func(img, name, dst string) []string
		check func(img string) []string
	}
	kinds := []fsKind{
		{"ntfs", []string{"mkntfs", "ntfscp", "ntfscat", "ntfsfix"},
			func(img string) []string { return []string{"mkntfs", "-Q", "-F", "-q", img} },
			func(img, src, name string) []string { return []string{"ntfscp", "-q", img, src, name} },
			func(img, name, dst string) []string {
				return []string{"sh", "-c", "ntfscat " + img + " " + name + " > " + dst}
			},
			func(img string) []string { return []string{"ntfsfix", "-n", img} }},
		{"fat32", []string{"mkfs.fat", "mcopy", "fsck.fat"},
			func(img string) []string { return []string{"mkfs.fat", "-F", "32", img} },
			func(img, src, name string) []string { return []string{"mcopy", "-i", img, src, "::" + name} },
			func(img, name, dst string) []string { return []string{"mcopy", "-n", "-i", img, "::" + name, dst} },
			func(img string) []string { return []string{"fsck.fat", "-n", img} }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, tool := range k.tools {
				testenv.RequireProgram(t, tool, "ntfs-3g, dosfstools, mtools")
			}
			dir := t.TempDir()
			run := func(args []string) {
				t.Helper()
				testenv.Run(t, args[0], args[1:]...)
			}
			img := filepath.Join(dir, "golden.img")
			junk := make([]byte, size)
			rand.Read(junk)
			os.WriteFile(img, junk, 0o644)
			run(k.mkfs(img))
			var want [][]byte
			for i := range files {
				b := make([]byte, (3+i)<<20)
				rand.Read(b)
				src := filepath.Join(dir, fmt.Sprintf("f%d", i))
				os.WriteFile(src, b, 0o644)
				run(k.put(img, src, fmt.Sprintf("F%d.BIN", i)))
				want = append(want, b)
			}
			f, _ := os.Open(img)
			m, err := blockmap.Read(f, size)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			var ts []string
			for i := range 2 {
				p := filepath.Join(dir, fmt.Sprintf("disk%d", i))
				testimage.Fill(p, 0xFF, size)
				ts = append(ts, p)
			}
			report := filepath.Join(dir, "report.json")
			r := runCast(t, []string{"-image", img, "-chain", "-compress", "no", "-report", report}, ts, 2*time.Minute)
			if r.code != 0 {
				t.Fatalf("dolly-server exited %d:\n%s", r.code, r.server.out.String())
			}
			var rep server.Report
			b, _ := os.ReadFile(report)
			json.Unmarshal(b, &rep)
			t.Logf("%s: %d bytes in use of %d, %d sent", k.name, m.UsedBytes(), size, rep.StreamBytes)
			if limit := m.UsedBytes() * 11 / 10; rep.StreamBytes > limit {
				t.Errorf("the stream carried %d bytes for %d in use (limit %d)", rep.StreamBytes, m.UsedBytes(), limit)
			}
			for i, tg := range ts {
				run(k.check(tg))
				for j, w := range want {
					dst := filepath.Join(dir, fmt.Sprintf("out%d-%d", i, j))
					run(k.get(tg, fmt.Sprintf("F%d.BIN", j), dst))
					if got, _ := os.ReadFile(dst); !bytes.Equal(got, w) {
						t.Errorf("pc%02d: F%d.BIN differs from the golden file", i+1, j)
					}
				}
			}
		})
	}
}

// A compressed image of a file system (zstd's tool, on a clean ext4) is
// mapped once scanned: on a disk that cannot discard, the nodes leave its
// free blocks as they were rather than write them all as zeros, and the
// blocks in use are the image's. With -zero-free the target is the image.
func TestCompressedImageLeavesItsFreeBlocks(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireProgram(t, "zstd", "zstd")
	for _, tool := range []string{"mke2fs", "debugfs", "e2fsck"} {
		testenv.RequireProgram(t, tool, "e2fsprogs")
	}
	dir := t.TempDir()
	const size = 64 << 20
	img := filepath.Join(dir, "fs.img")
	if err := testimage.Fill(img, 0, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", img).CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	kept := make([]byte, 6<<20)
	rand.Read(kept)
	keep := filepath.Join(dir, "keep")
	os.WriteFile(keep, kept, 0o644)
	if out, err := exec.Command("debugfs", "-w", "-R", "write "+keep+" keep", img).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v\n%s", err, out)
	}
	golden, _ := os.ReadFile(img)
	f, _ := os.Open(img)
	used, err := blockmap.Read(f, size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("zstd", "-q", "-3", img, "-o", img+".zst").CombinedOutput(); err != nil {
		t.Fatalf("zstd: %v\n%s", err, out)
	}

	const old = 0xAA
	backing := filepath.Join(dir, "hdd")
	if err := testimage.Fill(backing, old, size); err != nil {
		t.Fatal(err)
	}
	var hdd string
	t.Cleanup(func() { testenv.RemoveLoopDevice(t, hdd) })
	hdd = testenv.LoopDevice(t, backing)
	knob := "/sys/block/" + filepath.Base(hdd) + "/queue/discard_max_bytes"
	if err := os.WriteFile(knob, []byte("0"), 0); err != nil {
		t.Skipf("skipped: cannot turn discard off on %s: %v", hdd, err)
	}

	cast := func(extra ...string) string {
		args := append([]string{"-image", img + ".zst", "-chain", "-no-probe", "-yes"}, extra...)
		r := runCast(t, args, []string{hdd}, 2*time.Minute)
		if r.code != 0 {
			t.Fatalf("dolly-server %v exited %d:\n%s", extra, r.code, r.server.out.String())
		}
		if out, err := exec.Command("e2fsck", "-fn", hdd).CombinedOutput(); err != nil {
			t.Errorf("%v: e2fsck -fn: %v\n%s", extra, err, out)
		}
		return r.server.out.String()
	}

	out := cast()
	if !strings.Contains(out, "in use (mapped in") {
		t.Errorf("the server does not say it mapped the image:\n%s", out)
	}
	got, err := os.ReadFile(hdd)
	if err != nil {
		t.Fatal(err)
	}
	// The first and last MiB are zeroed where free (FreeSkipper); the
	// free blocks between keep the disk's old bytes.
	const edge = 1 << 20
	var free, left int64
	for off := int64(0); off < size; {
		start, end := used.NextUsed(off)
		if !bytes.Equal(got[start:end], golden[start:end]) {
			t.Fatalf("the used blocks at %d..%d differ from the image's", start, end)
		}
		for b := max(off, edge); b < min(start, size-edge); b++ {
			free++
			if got[b] == old {
				left++
			}
		}
		off = end
	}
	if free < size/2 || left < free*99/100 {
		t.Errorf("%d of %d free bytes were left as they were; want nearly all", left, free)
	}

	cast("-zero-free")
	if got, _ := os.ReadFile(hdd); !bytes.Equal(got, golden) {
		t.Error("with -zero-free the target is not the image")
	}
}
