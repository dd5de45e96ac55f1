// Command labbench is `make bench` and `make bench-quick`: it casts a
// realistic image to hosts of an emulated lab (network namespaces on a
// bridge, links shaped with tc) with dolly along every topology, and with
// udpcast and an `nc | tee | nc` chain on the same lab and image, and
// writes the measurements next to the capacity model's predictions:
// bench/out/*.csv, results.md and PNG plots.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"dolly/imaging"
	"dolly/imaging/blockmap"
	"dolly/internal/lab"
	"dolly/internal/sampleimage"
	"dolly/internal/testimage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "labbench: %v\n", err)
		os.Exit(1)
	}
}

// options of one bench session.
type options struct {
	bin   string // dolly and dolly-server
	out   string // bench/out
	work  string // images, disks, logs
	quick bool
}

func run() error {
	var o options
	flag.StringVar(&o.bin, "bin", "bin", "directory holding dolly and dolly-server")
	flag.StringVar(&o.out, "out", "out", "directory for results (make bench: bench/out)")
	flag.StringVar(&o.work, "work", "", "directory for images, disks and logs (default: a temporary one)")
	flag.BoolVar(&o.quick, "quick", false, "the quick subset (3-5 minutes) instead of the full matrix (30-45 minutes)")
	only := flag.String("only", "", "run only the runs whose description matches this regular expression, e.g. \"2-tree\" or \"chain +none +(1|24) nodes +100\"")
	flag.Parse()
	if err := lab.Available(); err != nil {
		return fmt.Errorf("the emulated lab %v: run as root on Linux with iproute2", err)
	}
	for _, prog := range []string{"udp-sender", "udp-receiver", "nc", "mkfs.ext4", "zstd"} {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("needs %s: apt-get install udpcast netcat-openbsd e2fsprogs zstd", prog)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.work == "" {
		dir, err := os.MkdirTemp("", "dolly-labbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.work = dir
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	start := time.Now()
	plan := fullPlan()
	if o.quick {
		plan = quickPlan()
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return fmt.Errorf("-only: %w", err)
		}
		plan = slices.DeleteFunc(plan, func(r runSpec) bool { return !re.MatchString(r.String()) })
		if len(plan) == 0 {
			return fmt.Errorf("no run matches -only %q", *only)
		}
	}
	images, err := makeImages(ctx, o.work, plan.images())
	if err != nil {
		return err
	}
	var results []result
	for _, group := range plan.groups() {
		rs, err := runGroup(ctx, o, group, images)
		results = append(results, rs...)
		if err != nil {
			writeOutputs(o, results, start)
			return err
		}
	}
	return writeOutputs(o, results, start)
}

// image is one test image, raw and compressed.
type image struct {
	name    string
	raw     string
	zst     string
	size    int64
	zstSize int64
	sha256  string // of raw, hex
	// mapped is the sha256 of raw as dolly casts it by default: read
	// through its file system's block map, free blocks as zeros; used is
	// how many of its bytes the map keeps.
	mapped string
	used   int64
	// usedMap is that map, nil for an image without one.
	usedMap *blockmap.Map
}

// castCheck is what a run's targets are checked against: the image's
// sha256, or, for a dolly cast that maps it, that of the image read
// through its block map, which each target is then read through too. The
// lab's disks cannot discard (lab.Spec.NoDiscard), so the nodes leave the
// free blocks as they were, which may be another run's.
func (img image) castCheck(r runSpec) (want string, through *blockmap.Map) {
	if r.method == "dolly" && !r.allBlocks && img.mapped != "" {
		return img.mapped, img.usedMap
	}
	return img.sha256, nil
}

// sha256Through hashes the first size bytes of path read through m: the
// bytes m calls free as zeros.
func sha256Through(path string, size int64, m *blockmap.Map) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		start, end := m.NextUsed(off)
		start, end = min(start, size), min(end, size)
		for ; off < start; off += int64(len(zeros)) {
			h.Write(zeros[:min(int64(len(zeros)), start-off)])
		}
		off = start
		if _, err := io.Copy(h, io.NewSectionReader(f, start, end-start)); err != nil {
			return "", err
		}
		off = max(off, end)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// mappedSHA256 hashes the raw image as dolly reads it through its block
// map, and says how much of it the map keeps.
func mappedSHA256(path string) (string, *blockmap.Map, error) {
	im, err := imaging.OpenImage(path)
	if err != nil {
		return "", nil, err
	}
	defer im.Close()
	m, err := im.ReadMap()
	if errors.Is(err, blockmap.ErrUnknown) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	if err := im.UseMap(m); err != nil {
		return "", nil, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, im.Stream()); err != nil {
		return "", nil, err
	}
	return hex.EncodeToString(h.Sum(nil)), &m, nil
}

func junkNote(spec sampleimage.Spec) string {
	switch {
	case spec.Junk == 0:
		return ""
	case spec.FS == "" || spec.FS == "ext4":
		return fmt.Sprintf(", %d MiB of deleted data in its free space", spec.Junk>>20)
	}
	return fmt.Sprintf(", quick-formatted over %d MiB of old data", spec.Junk>>20)
}

// makeImages builds the sample ext4 images the plan needs.
func makeImages(ctx context.Context, dir string, specs map[string]sampleimage.Spec) (map[string]image, error) {
	out := map[string]image{}
	for name, spec := range specs {
		img := image{name: name, raw: filepath.Join(dir, name+".img"), size: spec.Size}
		fmt.Printf("labbench: building the %s image (%s%s)…\n", name, imageLabel(name), junkNote(spec))
		if err := sampleimage.Build(ctx, img.raw, spec); err != nil {
			return nil, err
		}
		sum, err := testimage.SHA256(img.raw, -1)
		if err != nil {
			return nil, fmt.Errorf("hashing %s: %w", img.raw, err)
		}
		img.sha256 = sum
		if img.mapped, img.usedMap, err = mappedSHA256(img.raw); err != nil {
			return nil, fmt.Errorf("mapping %s: %w", img.raw, err)
		}
		if img.usedMap != nil {
			img.used = img.usedMap.UsedBytes()
		}
		if spec.Junk == 0 && img.mapped != img.sha256 {
			// Free space of zeros reads the same through the map.
			return nil, fmt.Errorf("%s read through its block map differs from the file: the map leaves out blocks in use", img.raw)
		}
		img.zst = img.raw + ".zst"
		if out, err := exec.CommandContext(ctx, "zstd", "-q", "-f", "-3", "-T0", img.raw, "-o", img.zst).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("zstd: %v: %s", err, out)
		}
		st, err := os.Stat(img.zst)
		if err != nil {
			return nil, err
		}
		img.zstSize = st.Size()
		out[name] = img
	}
	return out, nil
}

// runGroup builds one lab for a group of runs and runs them in turn.
func runGroup(ctx context.Context, o options, g group, images map[string]image) ([]result, error) {
	// Disks that cannot discard, as hard disks: on a loop device a discard
	// punches a hole that the next writer pays for, which would slow the
	// peers that write every block after a dolly cast.
	spec := lab.Spec{Server: lab.HostSpec{Name: "srv", Mbit: g.mbit}, Dir: o.work, NoDiscard: true}
	for i := range g.maxNodes {
		spec.Nodes = append(spec.Nodes, lab.HostSpec{Name: fmt.Sprintf("pc%02d", i+1), Mbit: g.mbit})
	}
	if g.trunkMbit > 0 {
		spec.Switches = []string{"sw1", "sw2"}
		spec.Trunks = []lab.Trunk{{A: "sw1", B: "sw2", Mbit: g.trunkMbit}}
		spec.Server.Switch = "sw1"
		for i := range spec.Nodes {
			spec.Nodes[i].Switch = spec.Switches[2*i/len(spec.Nodes)]
		}
		fmt.Printf("labbench: lab of %d nodes on %v Mbit/s links, half of them behind a %v Mbit/s trunk\n", g.maxNodes, g.mbit, g.trunkMbit)
	} else if g.slowMbit > 0 {
		spec.Nodes = append(spec.Nodes, lab.HostSpec{Name: fmt.Sprintf("pc%02d", g.maxNodes+1), Mbit: g.slowMbit})
		fmt.Printf("labbench: lab of %d nodes on %v Mbit/s links and one on %v Mbit/s\n", g.maxNodes, g.mbit, g.slowMbit)
	} else {
		fmt.Printf("labbench: lab of %d nodes on %s\n", g.maxNodes, strings.TrimSpace(linkName(g.mbit)))
	}
	l, err := lab.New(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	// Each node has a disk per image. A lab disk is a loop device over a
	// sparse file, and a node zeroes an image's zero runs with BLKZEROOUT,
	// which leaves unwritten extents where another image keeps its data:
	// a cast right after another image's ran slower. A PC's own disk has
	// no such memory of the previous image.
	env := &labEnv{lab: l, opts: o, disks: map[string][]string{}}
	if g.trunkMbit > 0 {
		// An admin describes a lab of two switches: nothing measures a
		// trunk from the hosts.
		b, err := l.Topology(spec)
		if err != nil {
			return nil, err
		}
		env.topology = filepath.Join(o.work, fmt.Sprintf("two-switches-%vmbit.json", g.trunkMbit))
		if err := os.WriteFile(env.topology, b, 0o644); err != nil {
			return nil, err
		}
	}
	for _, name := range g.images() {
		img := images[name]
		for _, h := range l.Nodes {
			d, err := l.Disk(ctx, h.Name, img.size, 0)
			if err != nil {
				return nil, err
			}
			env.disks[name] = append(env.disks[name], d)
		}
		if err := warmUp(ctx, env, g.mbit, g.maxNodes, img); err != nil {
			return nil, err
		}
	}
	// Every cast runs as a user's does: the nodes and the server measure
	// themselves and the network, and no topology file describes the lab.
	reps := 3 // casts on a shared machine vary: see castsFor
	if o.quick {
		reps = 1
	}
	var results []result
	for _, r := range g.runs {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		res := env.runMedian(ctx, r, images[r.image], reps)
		// Let the run's writeback finish before the next one starts.
		syscall.Sync()
		results = append(results, res)
		fmt.Println("  " + res.line())
		if len(res.perNode) > 1 {
			fmt.Printf("      per node:%s\n", perNodeLine(res.perNode))
		}
		if res.err != "" && errors.Is(ctx.Err(), context.Canceled) {
			return results, ctx.Err()
		}
	}
	return results, nil
}

// warmUp casts img to the first n nodes' disks for it once (a slow node's
// would take minutes), untimed: the first
// write to each block of a lab disk allocates it in the machine's file
// system, which costs CPU that a PC's own disk does not, so a group's first
// casts ran slower than its later ones.
func warmUp(ctx context.Context, env *labEnv, mbit float64, n int, img image) error {
	fmt.Printf("labbench: warming the disks up: a chain of %d casts the %s image…\n", n, img.name)
	logDir := filepath.Join(env.opts.work, fmt.Sprintf("warmup-%vmbit-%s", mbit, img.name))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	r := runSpec{method: "dolly", topology: "chain", fanout: 1, compression: "none", nodes: n, mbit: mbit, image: img.name}
	if _, err := env.dolly(ctx, r, img, logDir); err != nil {
		return fmt.Errorf("warming the disks up: %w", err)
	}
	syscall.Sync()
	return nil
}

func perNodeLine(rates []float64) string {
	var b strings.Builder
	for _, r := range rates {
		fmt.Fprintf(&b, " %.2f", r)
	}
	return b.String()
}
