package capacity_test

import (
	"fmt"
	"log"
	"os"

	"dolly/capacity"
	"dolly/internal/units"
)

// A server plans a cast from the probes its nodes sent when they joined.
func ExampleRank() {
	node := capacity.Probe{
		NICBytesPerSec:        125e6, // Gigabit Ethernet
		DiskWriteBytesPerSec:  150e6,
		MemcpyBytesPerSec:     4e9,
		DecompressBytesPerSec: map[string]float64{"zstd": 600e6},
		DigestBytesPerSec:     8e9,
		Cores:                 2,
	}
	server := node
	server.Hostname = "server"
	server.DiskReadBytesPerSec = 500e6
	var nodes []capacity.Probe
	for i := 1; i <= 8; i++ {
		p := node
		p.Hostname = fmt.Sprintf("pc%02d", i)
		nodes = append(nodes, p)
	}
	results, err := capacity.Rank(capacity.SingleSwitch(server, nodes), capacity.Options{
		Compression: capacity.Compression{Codec: "zstd", Factor: 2},
		ImageBytes:  16e9,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(capacity.FormatPreview(capacity.Preview(results[:4])))
	best := results[0].Plan
	fmt.Print(best.Tree.Format(func(v int) string { return best.Hosts[v] }))
	// Output:
	// plan    compression  MB/s   ETA    bottleneck
	// chain   zstd         150.0  1m47s  disk of pc01, pc02 and 6 more
	// 2-tree  zstd         125.0  2m8s   links server→switch, pc01→switch and 2 more, each shared by 2 channels
	// chain   none         125.0  2m8s   links server→switch, pc01→switch and 14 more (1 channel each)
	// 3-tree  zstd         83.3   3m12s  links server→switch and pc01→switch, each shared by 3 channels
	// server → pc01 → pc02 → pc03 → pc04 → pc05 → pc06 → pc07 → pc08
}

// The shipped Figure 5 example: the paper's two-switch network with an
// explicit tree in the basic model.
func ExampleEvaluate() {
	f, err := os.Open("examples/figure5.json")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	topo, err := capacity.ReadTopology(f)
	if err != nil {
		log.Fatal(err)
	}
	r, err := capacity.Evaluate(topo.Network, *topo.Tree, topo.Options)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.1f MB/s: %s\n", r.Rate/capacity.MB, r.Bottleneck)
	for _, c := range r.Binding {
		fmt.Println(c)
	}
	// Output:
	// 7.5 MB/s: switching capacity of pc01 and pc02 (in 1, out 2, disk)
	// switching capacity of pc01 (in 1, out 2, disk): 4·b ≤ 30 MB/s → b ≤ 7.50 MB/s
	// switching capacity of pc02 (in 1, out 2, disk): 4·b ≤ 30 MB/s → b ≤ 7.50 MB/s
}

func ExampleParseRate() {
	for _, s := range []string{"12.5MB/s", "100Mbit", "1Gbit", "4GB/s", "1MiB/s", "125000000"} {
		r, err := units.ParseRate(s)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%-9s = %g bytes/s\n", s, r)
	}
	// Output:
	// 12.5MB/s  = 1.25e+07 bytes/s
	// 100Mbit   = 1.25e+07 bytes/s
	// 1Gbit     = 1.25e+08 bytes/s
	// 4GB/s     = 4e+09 bytes/s
	// 1MiB/s    = 1.048576e+06 bytes/s
	// 125000000 = 1.25e+08 bytes/s
}
