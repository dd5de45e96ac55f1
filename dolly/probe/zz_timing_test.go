package probe

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestZZTiming(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	f := "/tmp/zzdisk"
	os.WriteFile(f, make([]byte, 600<<20), 0o644)
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		r := Run(context.Background(), Config{Name: "x", Budget: CastBudget, DiskBudget: CastDiskBudget, Target: f, SkipDecoders: []string{"gzip"}})
		t.Logf("run %v notes %v", time.Since(t0), r.Notes)
		t0 = time.Now()
		Run(context.Background(), Config{Name: "x", Budget: CastBudget, DiskBudget: CastDiskBudget, SkipDecoders: []string{"gzip"}})
		t.Logf("no disk %v", time.Since(t0))
	}
}
