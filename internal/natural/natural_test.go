package natural

import (
	"slices"
	"testing"
)

func TestCompare(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"numbered hosts", []string{"pc10", "pc2", "pc1", "pc02"}, []string{"pc1", "pc2", "pc02", "pc10"}},
		{"words", []string{"zeus", "athena", "hera"}, []string{"athena", "hera", "zeus"}},
		{"disks", []string{"nvme10n1", "sdb", "vda", "nvme2n1", "sda", "nvme0n1"}, []string{"nvme0n1", "nvme2n1", "nvme10n1", "sda", "sdb", "vda"}},
		{"prefix first", []string{"pc1a", "pc1", "pc"}, []string{"pc", "pc1", "pc1a"}},
		{"huge numbers", []string{"n99999999999999999999", "n2"}, []string{"n2", "n99999999999999999999"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Clone(tt.in)
			slices.SortFunc(got, Compare)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
