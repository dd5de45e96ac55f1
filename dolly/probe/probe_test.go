package probe

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"dolly/internal/testenv"
	"dolly/internal/testimage"
)

func TestProbeMeasuresWithoutChangingTheTarget(t *testing.T) {
	target := filepath.Join(t.TempDir(), "disk")
	if err := testimage.Write(target, 48<<20, 3, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	before, _ := testimage.SHA256(target, -1)
	// 60 ms a measurement: with less, a stream's few milliseconds of CPU
	// time are within the clock's noise of a copy's, and its cost less the
	// copy's can come out as nothing (it did, once in many CI runs).
	r := Run(t.Context(), Config{Name: "pc07", Target: target, Budget: 60 * time.Millisecond, Compress: true, LocalIP: net.IPv4(127, 0, 0, 1)})
	after, _ := testimage.SHA256(target, -1)
	if after != before {
		t.Fatal("probing the target changed its content")
	}
	if r.Hostname != "pc07" || r.Cores < 1 {
		t.Errorf("name %q, cores %d", r.Hostname, r.Cores)
	}
	for name, v := range map[string]float64{
		"target write": r.DiskWriteBytesPerSec, "memcpy": r.MemcpyBytesPerSec, "digest": r.DigestBytesPerSec,
		"zstd decode": r.DecompressBytesPerSec["zstd"], "gzip decode": r.DecompressBytesPerSec["gzip"],
		"zstd encode": r.CompressBytesPerSec["zstd"], "TCP stream": r.NetStreamBytesPerSec, "relay path": r.RelayBytesPerSec,
	} {
		if v <= 1e6 {
			t.Errorf("%s: %v bytes/s", name, v)
		}
	}
	// A relay's path holds two streams' halves and more.
	if r.RelayBytesPerSec >= r.NetStreamBytesPerSec {
		t.Errorf("relay path at %v bytes/s, faster than one stream's half at %v", r.RelayBytesPerSec, r.NetStreamBytesPerSec)
	}
	if r.NICBytesPerSec != 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "loopback has no link speed") {
		t.Errorf("loopback link: %v bytes/s, notes %q", r.NICBytesPerSec, r.Notes)
	}
	text := r.Format()
	for _, want := range []string{"probe of pc07", "target write", "zstd decode", "CRC-32C", "relay path"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

// The source's probe measures its own path, not a relay node's, and what
// reading its image costs.
func TestSourceProbeMeasuresItsPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the source's path is measured on Linux only")
	}
	img := filepath.Join(t.TempDir(), "nt.img")
	if err := testimage.Write(img, 48<<20, 3, testimage.Dense); err != nil {
		t.Fatal(err)
	}
	r := Run(t.Context(), Config{Name: "source", Image: img, Source: true, Budget: 60 * time.Millisecond, LocalIP: net.IPv4(127, 0, 0, 1)})
	for name, v := range map[string]float64{
		"source path": r.FeedBytesPerSec, "image read CPU": r.ImageReadCPUBytesPerSec,
		"image read": r.DiskReadBytesPerSec, "TCP stream": r.NetStreamBytesPerSec,
	} {
		if v <= 1e6 {
			t.Errorf("%s: %v bytes/s (notes %q)", name, v, r.Notes)
		}
	}
	if r.RelayBytesPerSec != 0 {
		t.Errorf("a source measured a relay node's path: %v bytes/s", r.RelayBytesPerSec)
	}
	// The source's path holds a stream's send, a pipe's copy and more.
	if r.FeedBytesPerSec >= r.NetStreamBytesPerSec {
		t.Errorf("source path at %v bytes/s, faster than one stream's half at %v", r.FeedBytesPerSec, r.NetStreamBytesPerSec)
	}
	text := r.Format()
	for _, want := range []string{"source path, one core", "image read, one core"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

func TestProbeOfMissingTargetUsesATemporaryFile(t *testing.T) {
	dir := t.TempDir()
	r := Run(t.Context(), Config{Target: filepath.Join(dir, "new.img"), Budget: 10 * time.Millisecond})
	if r.DiskWriteBytesPerSec <= 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "temporary file") {
		t.Fatalf("write rate %v, notes %q", r.DiskWriteBytesPerSec, r.Notes)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Fatalf("the probe left %v behind", m)
	}
}

// A mounted block device is in use: the probe must leave it alone.
func TestProbeLeavesAMountedDeviceAlone(t *testing.T) {
	dev := mountedDevice(t)
	r := Run(t.Context(), Config{Target: dev, Budget: 10 * time.Millisecond})
	if r.DiskWriteBytesPerSec != 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "in use") {
		t.Fatalf("probe of a mounted device: %v bytes/s, notes %q", r.DiskWriteBytesPerSec, r.Notes)
	}
}

// mountedDevice is a loop device holding a file system mounted until the
// test ends.
func mountedDevice(t *testing.T) string {
	t.Helper()
	testenv.RequireProgram(t, "mkfs.ext4", "e2fsprogs")
	file := filepath.Join(t.TempDir(), "disk")
	if err := testimage.Fill(file, 0, 32<<20); err != nil {
		t.Fatal(err)
	}
	dev := testenv.LoopDevice(t, file)
	testenv.Run(t, "mkfs.ext4", "-q", dev)
	mnt := t.TempDir()
	testenv.Run(t, "mount", dev, mnt)
	t.Cleanup(func() { testenv.Run(t, "umount", mnt) })
	return dev
}

// The machine's ID is the same on every call, and says nothing of the
// boot ID it comes from.
func TestMachineID(t *testing.T) {
	id := MachineID()
	if runtime.GOOS != "linux" {
		t.Skip("skipped: only Linux tells its boot ID")
	}
	if len(id) != 16 || MachineID() != id {
		t.Fatalf("MachineID = %q, then %q: want the same 16 hex digits", id, MachineID())
	}
	if b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id"); strings.Contains(string(b), id) {
		t.Fatalf("MachineID %q gives the boot ID away", id)
	}
}

// The relay measured ends with its stream every time, never taking the
// end for a cut (and waiting out its deadline for another upstream).
func TestRelayCostEndsWithItsStream(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the relay's path is measured on Linux only")
	}
	buf := make([]byte, 256<<10)
	StandardSample(buf, 1)
	for i := range 10 {
		start := time.Now()
		cost, err := relayCost(t.Context(), buf, nil, time.Millisecond)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if cost <= 0 || time.Since(start) > 2*time.Second {
			t.Fatalf("run %d: %v s per byte in %v", i, cost, time.Since(start))
		}
	}
}

// The source's path measured ends with its stream every time, and runs
// through the history it is given (the cast's, whose pages it maps), which
// no relay of the probe writes once it has returned.
func TestFeedCostRunsThroughTheHistoryGiven(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the source's path is measured on Linux only")
	}
	buf := make([]byte, 256<<10)
	StandardSample(buf, 1)
	history := make([]byte, 4<<20)
	for i := range 5 {
		clear(history)
		start := time.Now()
		cost, err := feedCost(t.Context(), buf, history, time.Millisecond)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if cost <= 0 || time.Since(start) > 2*time.Second {
			t.Fatalf("run %d: %v s per byte in %v", i, cost, time.Since(start))
		}
		if !bytes.Contains(history, buf[:4096]) {
			t.Fatalf("run %d: the history given holds none of the bytes fed", i)
		}
		snapshot := bytes.Clone(history)
		runtime.Gosched()
		if !bytes.Equal(snapshot, history) {
			t.Fatalf("run %d: the history changed after the probe returned", i)
		}
	}
}

// The read probe reads the image's data through the page cache, where a
// sparse file keeps it, and refuses a file too small to time.
func TestReadCostReadsTheImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image's read is measured on Linux only")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 8<<20)
	StandardSample(data, 1)
	// A sparse file of 64 MiB: data at 16 MiB and at its end, holes between.
	if _, err := f.WriteAt(data, 16<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 56<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const MiB = 1 << 20
	for _, tt := range []struct{ off, want int64 }{
		{0, 16 * MiB},          // the hole before the first data is skipped
		{17 * MiB, 17 * MiB},   // within data
		{30 * MiB, 56 * MiB},   // the hole between is skipped
		{63 * MiB, 63 * MiB},   // the last whole chunk
		{70 * MiB, 16 * MiB},   // past the end: from the first data again
		{63*MiB + 1, 16 * MiB}, // no whole chunk left
	} {
		if got := nextData(r, tt.off, 64*MiB); got != tt.want {
			t.Errorf("nextData(%d MiB) = %.2f MiB, want %d MiB", tt.off/MiB, float64(got)/MiB, tt.want/MiB)
		}
	}
	cost, err := readCost(t.Context(), img, 20*time.Millisecond)
	if err != nil || cost <= 0 {
		t.Fatalf("readCost = %v, %v; want a cost per byte", cost, err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, data[:4096], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCost(t.Context(), small, 20*time.Millisecond); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Fatalf("readCost of a 4 KiB file: %v, want too small to measure", err)
	}
}

// A crowd's push takes the bytes asked through the whole data path, and
// leaves nothing running.
func TestCrowdPushesThroughTheDataPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the relay path is probed on Linux only")
	}
	before := runtime.NumGoroutine()
	for i := range 3 {
		var mem []byte
		if i == 1 { // in lent memory
			mem = make([]byte, CrowdMemory)
		}
		c, err := StartCrowd(t.Context(), mem)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if mem != nil {
			sample := make([]byte, 1<<20)
			StandardSample(sample, 1)
			if !bytes.Equal(mem[:len(sample)], sample) || &c.buf[0] != &mem[0] {
				t.Fatalf("run %d: the crowd does not push from the memory lent to it", i)
			}
		}
		const window = 50 * time.Millisecond
		n, took, err := c.PushFor(time.Duration(i)*10*time.Millisecond, window)
		c.Close()
		clear(mem) // the node's again: with -race, nothing of the crowd may touch it now
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if n <= 0 || took < window {
			t.Fatalf("run %d: counted %d bytes in %v, want some in at least %v", i, n, took, window)
		}
	}
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("%d goroutines before, %d after three crowd runs", before, after)
	}
}

// The probe tells whether it wrote the target as a cast does with
// O_DIRECT (a block device) or through the page cache (a file, or a
// device written buffered): the model counts a node's copies by it.
func TestProbeSaysHowItWroteTheTarget(t *testing.T) {
	file := filepath.Join(t.TempDir(), "disk")
	if err := testimage.Fill(file, 0, 32<<20); err != nil {
		t.Fatal(err)
	}
	dev := testenv.LoopDevice(t, file)
	cases := []struct {
		name     string
		target   string
		buffered bool
		direct   bool
	}{
		{"block device", dev, false, true},
		{"block device, buffered", dev, true, false},
		{"file", file, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Run(t.Context(), Config{Target: c.target, Buffered: c.buffered, Budget: 10 * time.Millisecond, SkipDecoders: []string{"zstd", "gzip"}})
			if r.DiskWriteBytesPerSec <= 0 {
				t.Fatalf("no write rate measured: %q", r.Notes)
			}
			if r.DirectWrites != c.direct {
				t.Fatalf("DirectWrites = %v, want %v", r.DirectWrites, c.direct)
			}
			want := "through the page cache"
			if c.direct {
				want = "with O_DIRECT"
			}
			if !strings.Contains(r.Format(), want) {
				t.Fatalf("the report does not say %q:\n%s", want, r.Format())
			}
		})
	}
}
