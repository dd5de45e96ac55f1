package boot

import (
	"bytes"
	"crypto/sha256"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pin/tftp/v3"
)

// startTFTP serves files on an ephemeral loopback port and returns its
// address.
func startTFTP(t testing.TB, files map[string]string, generated func(string) (generatedFile, bool)) string {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := newTFTP(files, generated, slog.New(slog.DiscardHandler))
	done := make(chan error, 1)
	go func() { done <- s.Serve(conn) }()
	t.Cleanup(func() {
		s.Shutdown()
		if err := <-done; err != nil {
			t.Errorf("TFTP Serve: %v", err)
		}
	})
	return conn.LocalAddr().String()
}

func TestTFTP(t *testing.T) {
	dir := t.TempDir()
	bios := writeFile(t, dir, "undionly.kpxe", 70_001) // ends in a partial block
	efi := writeFile(t, dir, "ipxe.efi", 1468*700)     // ends in an empty block
	writeFile(t, dir, "secret", 10)
	addr := startTFTP(t, map[string]string{biosName: bios, efiName: efi}, nil)

	tests := []struct {
		name string
		path string // file whose bytes are expected; "" for an error
	}{
		{"undionly.kpxe", bios},
		{"/undionly.kpxe", bios},
		{"ipxe.efi", efi},
		{"secret", ""},
		{"../" + dir + "/secret", ""},
		{dir + "/secret", ""},
		{"", ""},
		{"//ipxe.efi", ""},
	}
	for _, tt := range tests {
		c, err := tftp.NewClient(addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetTimeout(5 * time.Second)
		c.SetBlockSize(1468)
		wt, err := c.Receive(tt.name, "octet")
		if tt.path == "" {
			if err == nil {
				t.Errorf("%q: served, want an error", tt.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.name, err)
			continue
		}
		h := sha256.New()
		if _, err := wt.WriteTo(h); err != nil {
			t.Errorf("%q: %v", tt.name, err)
			continue
		}
		want, err := os.ReadFile(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(want); !bytes.Equal(h.Sum(nil), sum[:]) {
			t.Errorf("%q: sha256 %x, want %x", tt.name, h.Sum(nil), sum)
		}
	}
}

func TestTFTPRefusesWrites(t *testing.T) {
	dir := t.TempDir()
	bios := writeFile(t, dir, "undionly.kpxe", 1000)
	before, err := os.ReadFile(bios)
	if err != nil {
		t.Fatal(err)
	}
	addr := startTFTP(t, map[string]string{biosName: bios}, nil)
	for _, name := range []string{biosName, "new.bin"} {
		c, err := tftp.NewClient(addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetTimeout(5 * time.Second)
		rf, err := c.Send(name, "octet")
		if err == nil {
			_, err = rf.ReadFrom(strings.NewReader("overwritten"))
		}
		if err == nil {
			t.Errorf("write of %q accepted", name)
		}
	}
	after, err := os.ReadFile(bios)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("%s changed (%v)", bios, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%s holds %d files after refused writes, want 1", dir, len(entries))
	}
}
