package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"dolly/imaging/blockmap"
	"dolly/internal/testimage"
)

func TestMedianCast(t *testing.T) {
	cast := func(mbps, seconds, predicted float64) result {
		return result{measured: mbps, seconds: seconds, predicted: predicted}
	}
	tests := []struct {
		name          string
		casts         []result
		wantMBps      float64
		wantSeconds   float64
		wantPredicted float64
	}{
		{"one", []result{cast(20, 12, 21)}, 20, 12, 21},
		{"three in order", []result{cast(19, 13, 20), cast(20, 12, 20), cast(21, 11, 20)}, 20, 12, 20},
		{"three shuffled", []result{cast(21, 11, 20), cast(19, 13, 20), cast(20, 12, 20)}, 20, 12, 20},
		{"two: the slower", []result{cast(22, 10, 20), cast(18, 14, 20)}, 18, 14, 20},
		{"ties keep their order", []result{cast(20, 12, 20), cast(20, 12.5, 20), cast(25, 9, 20)}, 20, 12.5, 20},
		// The median cast's own prediction (17) is the outlier: the
		// predictions' median is not.
		{"predictions' own median", []result{cast(20, 12, 17), cast(19, 13, 21), cast(21, 11, 20)}, 20, 12, 20},
		{"no prediction (a peer)", []result{cast(20, 12, 0)}, 20, 12, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := medianCast(tt.casts)
			if got.measured != tt.wantMBps || got.seconds != tt.wantSeconds || got.predicted != tt.wantPredicted {
				t.Errorf("median = %.1f MB/s in %.1fs predicted %.1f, want %.1f in %.1fs predicted %.1f",
					got.measured, got.seconds, got.predicted, tt.wantMBps, tt.wantSeconds, tt.wantPredicted)
			}
			var want, wantPred []float64
			for _, c := range tt.casts {
				want, wantPred = append(want, c.measured), append(wantPred, c.predicted)
			}
			if !slices.Equal(got.casts, want) || !slices.Equal(got.castsPredicted, wantPred) {
				t.Errorf("casts = %v predicted %v, want every cast's in order: %v, %v", got.casts, got.castsPredicted, want, wantPred)
			}
		})
	}
}

func TestCastsFor(t *testing.T) {
	const links = "links dolly-server→sw1 and sw1→pc01 (1 channel each)"
	tests := []struct {
		seconds    float64
		bottleneck string
		reps       int
		want       int
	}{
		{2.3, "CPU of machine lab, shared by 5 hosts", 3, 5}, // a gigabit cast: the most
		{2.3, links, 3, 5},
		{11.6, links, 3, 3}, // a short one
		{45.4, "CPU of machine lab, shared by 25 hosts", 3, 1}, // long enough alone
		{2.3, links, 1, 1}, // the quick bench casts once
		{39.9, "CPU of machine lab, shared by 25 hosts", 3, 3},
		{22.6, "66% of the time: links dolly-server→sw1; 34%: CPU of machine lab", 3, 3},
		{23.1, "links dolly-server→sw1 and pc01→sw1, each shared by 2 channels", 3, 1},
		{34.9, "link dolly-server→sw1 shared by 3 channels", 3, 1},
		{19.9, "link dolly-server→sw1 shared by 3 channels", 3, 3},
		{25.0, "link dolly-server→sw1 shared by 3 channels; CPU of machine lab, shared by 25 hosts", 3, 3},
		{10, "", 3, 3},
	}
	for _, tt := range tests {
		if got := castsFor(result{seconds: tt.seconds, bottleneck: tt.bottleneck}, tt.reps); got != tt.want {
			t.Errorf("castsFor(%v s, %q, %d) = %d, want %d", tt.seconds, tt.bottleneck, tt.reps, got, tt.want)
		}
	}
}

func TestSettled(t *testing.T) {
	rates := func(mbps ...float64) []result {
		var rs []result
		for _, m := range mbps {
			rs = append(rs, result{measured: m})
		}
		return rs
	}
	predicted := func(rs []result, mbps ...float64) []result {
		for i := range rs {
			rs[i].predicted = mbps[i]
		}
		return rs
	}
	tests := []struct {
		name  string
		casts []result
		want  bool
	}{
		{"one cast", rates(23.2), false},
		{"two that agree", rates(23.2, 23.5), true},
		{"two that differ", rates(272.8, 287.0), false},
		{"the last agrees with the first", rates(190, 152, 192), true},
		{"only earlier ones agree", rates(190, 191, 152), false},
		{"rates agree, predictions do not", predicted(rates(48.15, 47.55), 39.85, 46.70), false},
		{"both agree", predicted(rates(48.15, 47.55), 46.9, 46.70), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := settled(tt.casts); got != tt.want {
				t.Errorf("settled(%v) = %v, want %v", tt.casts, got, tt.want)
			}
		})
	}
}

func TestCastsCell(t *testing.T) {
	tests := []struct {
		r    result
		want string
	}{
		{result{casts: []float64{23.63, 23.684}, castsPredicted: []float64{23.15, 23.149}}, "23.63 (23.15), 23.68 (23.15)"},
		{result{casts: []float64{10.27}, castsPredicted: []float64{0}}, "10.27"}, // a peer: no prediction
		{result{}, ""},
	}
	for _, tt := range tests {
		if got := castsCell(tt.r); got != tt.want {
			t.Errorf("castsCell(%v, %v) = %q, want %q", tt.r.casts, tt.r.castsPredicted, got, tt.want)
		}
	}
}

func TestWriteCSV(t *testing.T) {
	results := []result{
		{runSpec: runSpec{method: "dolly", topology: "star", fanout: 24, compression: "none", nodes: 24, mbit: 100, image: "tiny"}, predicted: 1.061, measured: 1.05, chosen: "star none"},
		{runSpec: runSpec{method: "udpcast", topology: "multicast", compression: "none", nodes: 8, mbit: 100, image: "small"}, measured: 10.014},
		{runSpec: runSpec{method: "dolly", topology: "chain", fanout: 1, compression: "none", nodes: 4, mbit: 100, image: "small"}, err: "failed"},
	}
	tests := []struct {
		withImage bool
		want      string
	}{
		{false, "method,topology,fanout,compression,nodes,link_mbit,predicted_mbps,measured_mbps,chosen_plan\n" +
			"dolly,star,24,none,24,100,1.06,1.05,star none\n" +
			"udpcast,multicast,0,none,8,100,,10.01,\n"},
		{true, "method,topology,fanout,compression,nodes,link_mbit,predicted_mbps,measured_mbps,chosen_plan,image_mib\n" +
			"dolly,star,24,none,24,100,1.06,1.05,star none,64\n" +
			"udpcast,multicast,0,none,8,100,,10.01,,256\n"},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "out.csv")
		if err := writeCSV(path, results, tt.withImage); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("writeCSV(withImage %v) wrote\n%s\nwant\n%s", tt.withImage, got, tt.want)
		}
	}
}

func TestSeriesOn(t *testing.T) {
	star := runSpec{method: "dolly", topology: "star", fanout: 24, compression: "zstd", nodes: 24, mbit: 100, image: "tiny"}
	if got, want := seriesOn(star, "small"), "dolly star zstd (64 MiB image)"; got != want {
		t.Errorf("seriesOn(star on tiny, small) = %q, want %q", got, want)
	}
	if got, want := seriesOn(star, "tiny"), "dolly star zstd"; got != want {
		t.Errorf("seriesOn(star on tiny, tiny) = %q, want %q", got, want)
	}
}

func TestGroupImages(t *testing.T) {
	g := group{runs: []runSpec{{image: "tiny"}, {image: "small"}, {image: "small"}, {image: "tiny"}, {image: "small"}}}
	if got := g.images(); !slices.Equal(got, []string{"small", "tiny"}) {
		t.Errorf("images = %v, want [small tiny]", got)
	}
}

// TestScribbleCheck: a disk holding the image passes the check; once
// scribbled on (as before a cast that then writes nothing), it fails.
func TestScribbleCheck(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "x.img")
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i % 251)
	}
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(dir, "pc01.disk")
	if err := os.WriteFile(disk, append(slices.Clone(data), 0xff, 0xff), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := testimage.SHA256(raw, -1)
	if err != nil {
		t.Fatal(err)
	}
	img := image{name: "x", raw: raw, size: int64(len(data)), sha256: sum}
	e := &labEnv{disks: map[string][]string{"x": {disk}}}
	if err := e.check(img, 0, img.sha256, nil); err != nil {
		t.Fatalf("check of a disk holding the image: %v", err)
	}
	if err := e.scribble(img, 0); err != nil {
		t.Fatal(err)
	}
	err = e.check(img, 0, img.sha256, nil)
	if err == nil || !strings.Contains(err.Error(), "pc01's target differs from the image") {
		t.Fatalf("check after scribbling = %v, want pc01's target differs", err)
	}
}

func TestChainKeeps(t *testing.T) {
	chain := func(comp string, nodes int, measured float64) result {
		return result{runSpec: runSpec{method: "dolly", topology: "chain", compression: comp, nodes: nodes, mbit: 100, image: "large"}, measured: measured}
	}
	results := []result{chain("zstd", 4, 200), chain("zstd", 8, 120), chain("zstd", 24, 75), chain("none", 1, 12), chain("none", 24, 11.9)}
	for _, c := range []struct {
		comp     string
		minNodes int
		goal     float64
		want     string
	}{
		{"zstd", 8, 0.90, "MISS zstd chain at 24 nodes keeps 62.5% of its 8-node rate at 100 Mbit/s, large image (goal: 90%)"},
		{"none", 1, 0.95, "PASS raw chain at 24 nodes keeps 99.2% of its 1-node rate at 100 Mbit/s, large image (goal: 95%)"},
	} {
		if got, ok := chainKeeps(results, c.comp, 100, "large", c.minNodes, c.goal); !ok || got != c.want {
			t.Errorf("%s: %q (%v), want %q", c.comp, got, ok, c.want)
		}
	}
	if _, ok := chainKeeps(results, "zstd", 100, "small", 8, 0.90); ok {
		t.Error("a check on an image with no chains")
	}
}

// Behind a thin trunk -auto is judged by the whole lab: a plan that is
// faster on the source's switch but slower across the trunk loses.
func TestAutoJudgedByTheWholeLabBehindATrunk(t *testing.T) {
	spec := func(topology, comp string) runSpec {
		return runSpec{method: "dolly", topology: topology, compression: comp, nodes: 16, mbit: 1000, image: "large", trunkMbit: 100}
	}
	for _, c := range []struct {
		name      string
		auto      result
		chainNear float64
		want      string
	}{
		{"faster across the trunk", result{runSpec: spec("auto", "auto"), chosen: "chain zstd", measured: 208, farMeasured: 96.7}, 285,
			"PASS -auto (chain zstd) 96.70 MB/s for the whole lab (its slowest node, on either switch), 286.2% of the best forced plan (chain 33.79)"},
		{"slower across the trunk", result{runSpec: spec("auto", "auto"), chosen: "chain zstd", measured: 400, farMeasured: 20}, 285,
			"MISS -auto (chain zstd) 20.00 MB/s for the whole lab (its slowest node, on either switch), 59.2% of the best forced plan (chain 33.79)"},
	} {
		chain := result{runSpec: spec("chain", "none"), measured: c.chainNear, farMeasured: 33.79}
		var got string
		for _, line := range acceptance([]result{c.auto, chain}) {
			if strings.Contains(line, "-auto") {
				got = line
			}
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want it to start %q", c.name, got, c.want)
		}
	}
}

func TestJoinPhaseOfTheLargestLab(t *testing.T) {
	run := func(nodes int, joins ...float64) result {
		return result{runSpec: runSpec{method: "dolly", topology: "chain", nodes: nodes}, joins: joins}
	}
	for _, c := range []struct {
		results []result
		want    string
	}{
		{[]result{run(8, 9.9), run(24, 2.1, 2.9), run(24, 2.5)}, "PASS join phase at 24 nodes: at most 2.9 s over 3 casts, median 2.5 s (goal: 3 s)"},
		{[]result{run(24, 2.1, 3.4), run(24, 2.5)}, "MISS join phase at 24 nodes: at most 3.4 s over 3 casts, median 2.5 s (goal: 3 s)"},
	} {
		if got, ok := joinPhase(c.results); !ok || got != c.want {
			t.Errorf("%q (%v), want %q", got, ok, c.want)
		}
	}
	parted := run(24, 2.0, 2.8)
	parted.joinParts = []map[string]float64{{"probes": 0.9}, {"probes": 1.0, "network": 0.83, "shared": 0.9}}
	want := "PASS join phase at 24 nodes: at most 2.8 s over 2 casts, median 2.0 s (goal: 3 s); the longest: probes 1.00 s, network 0.83 s, shared 0.90 s"
	if got, ok := joinPhase([]result{parted}); !ok || got != want {
		t.Errorf("%q (%v), want %q", got, ok, want)
	}
	if _, ok := joinPhase([]result{{runSpec: runSpec{method: "udpcast", nodes: 24}}}); ok {
		t.Error("a join phase stated without a dolly cast")
	}
}

func TestUsedDiskChecks(t *testing.T) {
	run := func(img string, all bool, measured float64, stream int64) result {
		return result{runSpec: runSpec{method: "dolly", topology: "auto", compression: "auto", nodes: 4, mbit: 100, image: img, allBlocks: all},
			measured: measured, streamBytes: stream, imageUsed: 400e6}
	}
	// Each file system's cast is held to its own -zero-free run.
	lines := strings.Join(acceptance([]result{run("dirty", false, 80, 300e6), run("dirty", true, 20, 900e6),
		run("dirty-ntfs", false, 50, 500e6), run("dirty-ntfs", true, 25, 900e6)}), "\n")
	for _, want := range []string{
		"PASS used disk's image (ext4), auto: 80.00 MB/s per node through its block map, 4.0× the 20.00 of -zero-free (goal: 3×)",
		"PASS used disk's image (ext4), auto: 300.0 MB sent for 400.0 MB in use, 0.75× (goal: at most 1.1×)",
		"MISS used disk's image (NTFS), auto: 50.00 MB/s per node through its block map, 2.0× the 25.00 of -zero-free (goal: 3×)",
		"MISS used disk's image (NTFS), auto: 500.0 MB sent for 400.0 MB in use, 1.25× (goal: at most 1.1×)",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("checks lack %q:\n%s", want, lines)
		}
	}
	m := &blockmap.Map{Size: 8192, Used: []blockmap.Extent{{Off: 0, Len: 4096}}}
	img := image{sha256: "plain", mapped: "mapped", usedMap: m}
	if w, th := img.castCheck(runSpec{method: "dolly"}); w != "mapped" || th != m {
		t.Error("a mapped dolly cast is not checked through the map")
	}
	for _, r := range []runSpec{{method: "dolly", allBlocks: true}, {method: "udpcast"}} {
		if w, th := img.castCheck(r); w != "plain" || th != nil {
			t.Errorf("%+v is not checked against the image", r)
		}
	}
}

// The used disk's image has a lab of its own: the matrix's 24 nodes need
// not each hold a disk of it.
func TestDirtyRunsHaveALabOfTheirOwn(t *testing.T) {
	for _, g := range fullPlan().groups() {
		for _, r := range g.runs {
			if (r.image == "dirty") != (g.own == "dirty") {
				t.Errorf("run %s in the group of %v Mbit/s (own %q)", r, g.mbit, g.own)
			}
		}
		if g.own == "dirty" && g.maxNodes != 4 {
			t.Errorf("the used disk's lab has %d nodes", g.maxNodes)
		}
	}
}

// A target read through a map reads zeros where the map says free, and
// what it holds where it says used.
func TestSHA256Through(t *testing.T) {
	data := bytes.Repeat([]byte{0xAB}, 3<<20)
	path := filepath.Join(t.TempDir(), "disk")
	os.WriteFile(path, data, 0o644)
	m := &blockmap.Map{Size: 3 << 20, Used: []blockmap.Extent{{Off: 4096, Len: 4096}, {Off: 2 << 20, Len: 1 << 20}}}
	want := make([]byte, len(data))
	for _, e := range m.Used {
		copy(want[e.Off:e.End()], data[e.Off:e.End()])
	}
	sum := sha256.Sum256(want)
	got, err := sha256Through(path, int64(len(data)), m)
	if err != nil || got != hex.EncodeToString(sum[:]) {
		t.Fatalf("got %s, %v; want %x", got, err, sum)
	}
}
