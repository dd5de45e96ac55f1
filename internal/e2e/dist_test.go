package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The systemd unit in dist/ names only flags dolly-server has, and
// systemd finds nothing wrong with it.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../dist/dolly-server.service")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(unit), "\\\n", " ")
	var args []string
	for _, line := range strings.Split(text, "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
			args = strings.Fields(cmd)[1:]
		}
	}
	if len(args) == 0 {
		t.Fatal("the unit has no ExecStart")
	}
	// --help after the unit's flags: pflag stops at the first it does not
	// know, and exits 0 only if it knew them all.
	p := start(t, "dolly-server", append(args, "--help")...)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("dolly-server %s: exit %d:\n%s", strings.Join(args, " "), code, p.out.String())
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze: the unit's syntax is not checked")
	}
	dir := t.TempDir()
	local := filepath.Join(dir, "dolly-server.service")
	os.WriteFile(local, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/dolly-server", filepath.Join(bin, "dolly-server"))), 0o644)
	if out, err := exec.Command(analyze, "verify", local).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
