package initramfs

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// DefaultPort is dolly-server's control port, used when dolly.server names
// only a host.
const DefaultPort = "9700"

// Boot is what the kernel command line tells the initramfs to do.
type Boot struct {
	Server string // dolly.server: dolly-server's control address, host:port (required)
	Target string // dolly.target: where to write, a path or a disk: query (see dolly.ResolveTarget)
	Name   string // dolly.name: how the server shows this node
	// Capture is dolly.capture: the disk (a path or a disk: query) to send
	// to dolly-server -capture, instead of joining a cast.
	Capture string
	Key     string // dolly.key: the cast key's text (on a network only the lab reaches)
	// ServerKey is dolly.serverkey: the server's public key, with which a
	// node enrolls instead of holding the cast key.
	ServerKey string
	// After is dolly.after, what to do once the cast is over when the server
	// does not say: "reboot", "poweroff" or "shell".
	After string
	// Debug is dolly.debug: log everything.
	Debug bool
	// Unknown lists dolly.* parameters this initramfs does not know, so that
	// a typo is reported rather than silently ignored.
	Unknown []string
}

// ValidAfter reports whether s is an after-cast action, as dolly.after and
// dolly-server -after name them.
func ValidAfter(s string) bool {
	return slices.Contains(afterActions(), s)
}

func afterActions() []string { return []string{"reboot", "poweroff", "shell"} }

// ParseCmdline reads the dolly.* parameters of a kernel command line such
// as the content of /proc/cmdline. Other parameters are ignored.
func ParseCmdline(cmdline string) (Boot, error) {
	var b Boot
	var errs []error
	for _, f := range splitCmdline(cmdline) {
		key, value, hasValue := strings.Cut(f, "=")
		name, ok := strings.CutPrefix(key, "dolly.")
		if !ok {
			continue
		}
		switch name {
		case "server":
			b.Server = value
		case "target":
			b.Target = value
		case "name":
			b.Name = value
		case "capture":
			b.Capture = value
		case "key":
			b.Key = value
		case "serverkey":
			b.ServerKey = value
		case "after":
			if !ValidAfter(value) {
				errs = append(errs, fmt.Errorf("dolly.after=%s: use %s", value, strings.Join(afterActions(), ", ")))
				continue
			}
			b.After = value
		case "debug":
			b.Debug = !hasValue || value == "1" || value == "true" || value == "yes"
		default:
			b.Unknown = append(b.Unknown, f)
		}
	}
	switch {
	case b.Server == "":
		errs = append(errs, errors.New("no dolly.server=HOST:PORT on the kernel command line: add it to the boot entry (dolly-server's iPXE script does)"))
	default:
		if _, _, err := net.SplitHostPort(b.Server); err != nil {
			// Only a host: the default port. An IPv6 literal needs brackets.
			b.Server = net.JoinHostPort(strings.Trim(b.Server, "[]"), DefaultPort)
		}
		if host, _, _ := net.SplitHostPort(b.Server); host == "" {
			errs = append(errs, fmt.Errorf("dolly.server=%s: no host", b.Server))
		}
	}
	return b, errors.Join(errs...)
}

// splitCmdline splits a kernel command line into parameters the way the
// kernel does: at blanks, except inside double quotes, which are removed
// (param="a b" is the parameter param=a b).
func splitCmdline(s string) []string {
	var fields []string
	var cur strings.Builder
	inQuote, inField := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			inField = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n'):
			if inField {
				fields = append(fields, cur.String())
				cur.Reset()
				inField = false
			}
		default:
			cur.WriteRune(r)
			inField = true
		}
	}
	if inField {
		fields = append(fields, cur.String())
	}
	return fields
}
