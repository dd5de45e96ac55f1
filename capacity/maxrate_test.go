package capacity

import (
	"math"
	"strings"
	"testing"
)

// The source's rate limit caps every plan: at the rate it allows of the
// stream as sent, which carries fewer bytes than the image where zero
// runs are skipped or the stream is compressed.
func TestMaxStreamRateCapsThePlans(t *testing.T) {
	net := Network{Hosts: []Host{
		{Name: "server", Switch: "sw", Role: RoleSource, Link: 125e6, Resources: Resources{Model: ModelDolly, Disk: 1e9}},
		{Name: "pc01", Switch: "sw", Link: 125e6, Resources: Resources{Model: ModelDolly, Disk: 1e9}},
		{Name: "pc02", Switch: "sw", Link: 125e6, Resources: Resources{Model: ModelDolly, Disk: 1e9}},
	}, Switches: []Switch{{Name: "sw"}}}
	for _, tt := range []struct {
		zero, want float64
	}{
		{0, 20e6},   // every byte travels: the image at the cap
		{0.5, 40e6}, // half the image is zero runs, not sent: twice the cap
	} {
		opt := Options{ZeroFraction: tt.zero, MaxStreamRate: 20e6}
		rs, err := Rank(net, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if math.Abs(r.Rate-tt.want) > 1 || !strings.Contains(r.Bottleneck, "-max-rate 20.0 MB/s") {
				t.Errorf("zero share %v, %s: %.1f MB/s (%s); want %.1f, bound by -max-rate", tt.zero, r.Plan.Name(), r.Rate/1e6, r.Bottleneck, tt.want/1e6)
			}
		}
	}
}
