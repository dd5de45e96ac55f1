package imaging

import (
	"math/rand/v2"
	"testing"
)

func TestCRC32CCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, split := range []struct{ a, b int }{
		{0, 0}, {0, 1}, {1, 0}, {1, 1}, {7, 13}, {4096, 1 << 20}, {1<<20 - 1, 1}, {1 << 20, 2 << 20}, {12345, 54321},
	} {
		a, b := data[:split.a], data[split.a:split.a+split.b]
		want := CRC32C(data[:split.a+split.b])
		if got := CRC32CCombine(CRC32C(a), CRC32C(b), int64(len(b))); got != want {
			t.Errorf("combine(%d, %d) = %08x, want %08x", split.a, split.b, got, want)
		}
	}
}
