// Package cli holds what dolly's commands share on the command line:
// Go-style single-dash long flags on pflag, usage errors, terminal
// detection and logging.
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// LongDash rewrites Go-style single-dash long flags ("-image x", "-tree=2")
// as pflag's double-dash form, so an admin can type either. Arguments that
// are not a known long flag (shorthands like -y, values, negative numbers),
// the value that follows a flag which takes one (a key may begin with "-"),
// and everything after "--" are left alone.
func LongDash(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			// A known long flag, or a word that is no cluster of
			// shorthands: then pflag's error names it whole.
			if fs.Lookup(name) != nil || isWord(name) && !isShorthands(fs, name) {
				a = "-" + a
			}
		}
		out = append(out, a)
		if takesNext(fs, a) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// takesNext reports whether a is a flag whose value is the next argument:
// a known long flag or shorthand, not boolean-like, written without "=".
func takesNext(fs *pflag.FlagSet, a string) bool {
	var f *pflag.Flag
	switch {
	case strings.Contains(a, "="):
		return false
	case strings.HasPrefix(a, "--") && len(a) > 2:
		f = fs.Lookup(a[2:])
	case len(a) == 2 && a[0] == '-':
		f = fs.ShorthandLookup(a[1:])
	}
	return f != nil && f.NoOptDefVal == ""
}

func isWord(s string) bool {
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && (c == '-' || c >= '0' && c <= '9')) {
			return false
		}
	}
	return true
}

func isShorthands(fs *pflag.FlagSet, s string) bool {
	for _, c := range s {
		if fs.ShorthandLookup(string(c)) == nil {
			return false
		}
	}
	return true
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	return term.IsTerminal(int(f.Fd()))
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

// Parse parses args into fs, taking single-dash long flags too, with usage
// (followed by the flags' defaults) as the help text. It returns -1 when
// the command goes on, or the exit code to end with: 0 after --help or
// --version, 2 for bad flags or arguments (which takes none).
func Parse(fs *pflag.FlagSet, usage string, args []string) int {
	fs.SortFlags = false
	showVersion := fs.Bool("version", false, "print the version and exit")
	// Only --help calls Usage (mistakes are UsageError's): help asked
	// for goes to stdout, where a pager or grep finds it.
	fs.SetOutput(os.Stdout)
	fs.Usage = func() {
		fmt.Fprint(os.Stdout, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(LongDash(fs, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return ExitOK
		}
		return UsageError(fs.Name(), "%v", err)
	}
	if *showVersion {
		fmt.Printf("%s %s\n", fs.Name(), Version())
		return ExitOK
	}
	if fs.NArg() > 0 {
		return UsageError(fs.Name(), "unexpected argument %q", fs.Arg(0))
	}
	return -1
}

// UsageError prints a command-line mistake with a pointer to --help and
// returns ExitUsage.
func UsageError(name, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "%s: %s\nRun %s --help for usage.\n", name, fmt.Sprintf(format, a...), name)
	return ExitUsage
}
