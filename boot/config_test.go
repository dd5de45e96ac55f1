package boot

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		in       string
		from, to string // "" for an error
	}{
		{"198.18.0.100-198.18.0.199", "198.18.0.100", "198.18.0.199"},
		{"198.18.0.5 - 198.18.0.5", "198.18.0.5", "198.18.0.5"},
		{"198.18.0.199-198.18.0.100", "", ""},
		{"198.18.0.100", "", ""},
		{"198.18.0.100-", "", ""},
		{"fd00::1-fd00::9", "", ""},
		{"a-b", "", ""},
	}
	for _, tt := range tests {
		from, to, err := ParseRange(tt.in)
		if tt.from == "" {
			if err == nil {
				t.Errorf("ParseRange(%q) = %v, %v; want an error", tt.in, from, to)
			}
			continue
		}
		if err != nil || from.String() != tt.from || to.String() != tt.to {
			t.Errorf("ParseRange(%q) = %v, %v, %v; want %s, %s", tt.in, from, to, err, tt.from, tt.to)
		}
	}
}

func TestNewestKernel(t *testing.T) {
	tests := []struct {
		paths []string
		want  string
	}{
		{[]string{"/boot/vmlinuz-6.1.0-9-amd64", "/boot/vmlinuz-6.1.0-56-amd64", "/boot/vmlinuz-6.1.0-10-amd64"}, "/boot/vmlinuz-6.1.0-56-amd64"},
		{[]string{"/boot/vmlinuz-6.12.1-amd64", "/boot/vmlinuz-6.9.0-amd64"}, "/boot/vmlinuz-6.12.1-amd64"},
		{[]string{"/boot/vmlinuz-5.10.0-28-amd64"}, "/boot/vmlinuz-5.10.0-28-amd64"},
		{[]string{"/boot/vmlinuz-6.1.0-amd64", "/boot/vmlinuz-6.1.0-1-amd64"}, "/boot/vmlinuz-6.1.0-amd64"},
	}
	for _, tt := range tests {
		if got := newestKernel(tt.paths); got != tt.want {
			t.Errorf("newestKernel(%q) = %s, want %s", tt.paths, got, tt.want)
		}
	}
}

func TestControlAddr(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.1")
	for in, want := range map[string]string{
		":9700":                  "198.18.0.1:9700",
		"0.0.0.0:9700":           "198.18.0.1:9700",
		"[::]:9700":              "198.18.0.1:9700",
		"198.18.0.2:9800":        "198.18.0.2:9800",
		"dolly.lab.example:9700": "dolly.lab.example:9700",
		"9700":                   "",
		"":                       "",
	} {
		got, err := controlAddr(in, ip)
		if want == "" {
			if err == nil {
				t.Errorf("controlAddr(%q) = %s, want an error", in, got)
			}
		} else if err != nil || got != want {
			t.Errorf("controlAddr(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
}

func TestCheckRange(t *testing.T) {
	server := netip.MustParsePrefix("198.18.0.1/24")
	a := netip.MustParseAddr
	tests := []struct {
		from, to, router string
		err              string // "" for none
	}{
		{"198.18.0.100", "198.18.0.199", "", ""},
		{"198.18.0.100", "198.18.0.199", "198.18.0.254", ""},
		{"198.18.0.1", "198.18.0.254", "", ""},
		{"198.18.1.100", "198.18.1.199", "", "outside eth0's subnet 198.18.0.0/24"},
		{"198.18.0.100", "198.18.1.5", "", "outside"},
		{"198.18.0.0", "198.18.0.10", "", "network or broadcast"},
		{"198.18.0.200", "198.18.0.255", "", "network or broadcast"},
		{"198.18.0.200", "198.18.0.100", "", "comes after"},
		{"198.18.0.100", "198.18.0.199", "198.19.0.1", "router 198.19.0.1 is outside"},
	}
	for _, tt := range tests {
		c := &Config{RangeFrom: a(tt.from), RangeTo: a(tt.to)}
		if tt.router != "" {
			c.Router = a(tt.router)
		}
		err := checkRange(c, "eth0", server)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("checkRange(%s-%s, router %q) = %v, want %q", tt.from, tt.to, tt.router, err, tt.err)
		}
	}
}
