// Package cli holds what dolly's two commands share on the command line:
// Go-style single-dash long flags on pflag, terminal detection and logging.
package cli

import (
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// LongDash rewrites Go-style single-dash long flags ("-image x", "-tree=2")
// as pflag's double-dash form, so an admin can type either. Arguments that
// are not a known long flag (shorthands like -y, values, negative numbers)
// and everything after "--" are left alone.
func LongDash(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if fs.Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Logger returns a text logger on w: warnings and errors, Info too when
// info is set, and everything when debug is set.
func Logger(w io.Writer, info, debug bool) *slog.Logger {
	level := slog.LevelWarn
	switch {
	case debug:
		level = slog.LevelDebug
	case info:
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
