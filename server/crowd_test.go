package server

import (
	"math"
	"testing"
)

func TestCrowdSlowdownAndContention(t *testing.T) {
	// One node alone: 1 ns of CPU a byte, so 2 cores would push 2 GB/s.
	const alone = 1e-9
	tests := []struct {
		name       string
		rate       float64
		hosts      int
		slowdown   float64
		contention float64
	}{
		{"as fast as alone", 2e9, 25, 1, 0},
		{"faster than alone counts as alone", 3e9, 25, 1, 0},
		{"half as fast", 1e9, 25, 2, 1.0 / 24},
		{"a quarter as fast, 5 hosts", 0.5e9, 5, 4, 0.75},
		{"far slower is capped", 0.01e9, 3, 200, 1},
		{"one host has no one to contend with", 1e9, 1, 2, 0},
		{"nothing measured", 0, 25, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := crowd{nodes: 24, cores: 2, rate: tt.rate, alone: alone}
			if got := c.slowdown(); math.Abs(got-tt.slowdown) > 1e-9 {
				t.Errorf("slowdown = %v, want %v", got, tt.slowdown)
			}
			if got := c.contention(tt.hosts); math.Abs(got-tt.contention) > 1e-9 {
				t.Errorf("contention(%d) = %v, want %v", tt.hosts, got, tt.contention)
			}
		})
	}
}
