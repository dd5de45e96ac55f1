package server

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"dolly/internal/units"
)

// printPlan shows who sends to whom and what each node will overwrite.
func (s *Server) printPlan(p castPlan, ch Choice) {
	out := s.cfg.Out
	fmt.Fprintf(out, "\nplan: %s\n", describeChoice(ch))
	fmt.Fprintf(out, "  %d nodes, depth %d; image %s (%s, stored %s)", p.tree.Nodes(), p.tree.Depth(),
		s.cfg.Image, units.FormatBytes(s.img.Size), s.img.Encoding)
	switch {
	case p.send == s.img.Encoding:
	case p.send.Compressed():
		fmt.Fprintf(out, ", compressed with %s on the fly", p.send)
	default:
		fmt.Fprintf(out, ", decoded at the source and sent raw")
	}
	fmt.Fprintln(out)
	if s.cfg.MaxRate > 0 {
		fmt.Fprintf(out, "  source rate limited to %s MB/s\n", mbps(s.cfg.MaxRate))
	}
	text := p.tree.Format(p.name)
	if p.tree.Kind == "chain" {
		text = wrapChain(text, 100)
	}
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(out, "  %s\n", line)
	}
	for _, a := range p.apart {
		if a.up >= 0 {
			fmt.Fprintf(out, "  %s: served apart by %s, at its own pace (predicted %s MB/s)\n", a.node.name, p.name(a.up), mbps(a.rate))
		} else {
			fmt.Fprintf(out, "  %s: served apart after %s (predicted %s MB/s)\n", a.node.name, a.from.name, mbps(a.rate))
		}
	}
	fmt.Fprintln(out, "targets:")
	for _, n := range p.all() {
		kind, cached := "file", ""
		if n.block {
			kind = "block device"
		}
		if n.cachedBy != "" {
			cached = "; a loop device over " + n.cachedBy + ", without direct I/O"
		}
		fmt.Fprintf(out, "  %-16s %s (%s, %s%s)\n", n.name, n.target, kind, units.FormatBytes(n.targetSize), cached)
	}
}

// wrapChain breaks a long "a → b → c" line after an arrow.
func wrapChain(line string, width int) string {
	parts := strings.Split(strings.TrimSpace(line), " → ")
	var b strings.Builder
	col := 0
	for i, p := range parts {
		if i > 0 {
			if col+len(p)+3 > width {
				b.WriteString(" →\n  → ")
				col = 4
			} else {
				b.WriteString(" → ")
				col += 3
			}
		}
		b.WriteString(p)
		col += len(p)
	}
	return b.String() + "\n"
}

// confirm asks the operator before anything is overwritten.
func (s *Server) confirm(ready []*nodeState) (bool, error) {
	targets := map[string]int{}
	for _, n := range ready {
		targets[n.target]++
	}
	var ts []string
	for t, k := range targets {
		ts = append(ts, fmt.Sprintf("%s (%d)", t, k))
	}
	sort.Strings(ts)
	fmt.Fprintf(s.cfg.Out, "\nThis overwrites %s on %d nodes with %s. Start the cast? [y/N] ",
		strings.Join(ts, ", "), len(ready), s.cfg.Image)
	answer, err := bufio.NewReader(s.cfg.In).ReadString('\n')
	if err != nil && answer == "" {
		return false, err
	}
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "y" || answer == "yes", nil
}

// nodeView is a snapshot of one node for display.
type nodeView struct {
	name     string
	status   status
	written  int64
	rate     float64
	elapsed  time.Duration
	reason   string
	verified bool
}

// progressView shows the cast while it runs: a live table redrawn in place
// on a terminal, plain periodic lines otherwise.
type progressView struct {
	out      io.Writer
	live     bool
	every    time.Duration
	size     int64
	start    time.Time
	lines    int // lines drawn last time (live mode)
	maxLines int
	// screen is the terminal's size now (live mode), 0 where unknown: a
	// line wider than the terminal wraps, and the redraw in place would
	// climb too few lines.
	screen func() (width, height int)
}

func newProgressView(out io.Writer, live bool, every time.Duration, size int64) *progressView {
	return &progressView{out: out, live: live, every: every, size: size, start: time.Now(), maxLines: 30, screen: terminalSize(out)}
}

// terminalSize returns what reads the size of the terminal out is, or a
// function that says 0 when out is none.
func terminalSize(out io.Writer) func() (int, int) {
	f, ok := out.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() (int, int) { return 0, 0 }
	}
	return func() (int, int) {
		w, h, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return 0, 0
		}
		return w, h
	}
}

// clip cuts s to width columns (counting runes), marking the cut; width
// 0 leaves it whole.
func clip(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:max(width-1, 0)]) + "…"
}

func (v *progressView) interval() time.Duration {
	if v.live {
		return 500 * time.Millisecond
	}
	return v.every
}

func (v *progressView) row(n nodeView) string {
	pct := min(float64(n.written)/float64(max(v.size, 1))*100, 100)
	avg := float64(n.written) / max(n.elapsed.Seconds(), 1e-9)
	var state string
	switch {
	case n.status == stFailed:
		state = "FAILED: " + n.reason
	case n.verified:
		state = "verified"
	case n.status == stDone:
		state = "verifying"
	default:
		eta := "—"
		// A node barely moving has no meaningful ETA: it waits on
		// something (a rewiring, a slow upstream).
		if left := float64(v.size-n.written) / n.rate; n.rate > 0 && left < 24*3600 {
			eta = formatDuration(time.Duration(left * float64(time.Second)))
		}
		state = "ETA " + eta
	}
	bar := ""
	if v.live {
		const width = 20
		full := int(pct / 100 * width)
		bar = "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "] "
	}
	return fmt.Sprintf("%-16s %s%5.1f%% %10s %7s MB/s  %s", n.name, bar, pct, units.FormatBytes(n.written), mbps(avg), state)
}

// draw renders one update.
func (v *progressView) draw(nodes []nodeView, sent int64) {
	elapsed := time.Since(v.start)
	head := fmt.Sprintf("casting %s: %s sent by the source, %s elapsed", units.FormatBytes(v.size), units.FormatBytes(sent), formatDuration(elapsed))
	if !v.live {
		fmt.Fprintln(v.out, head)
		for _, n := range nodes {
			fmt.Fprintf(v.out, "  %s\n", v.row(n))
		}
		return
	}
	width, height := v.screen()
	maxLines := v.maxLines
	if height > 0 {
		maxLines = max(min(maxLines, height-3), 1) // the head, the "… and" line, the cursor's
	}
	shown := nodes
	hidden := 0
	if len(shown) > maxLines {
		// Show the nodes furthest behind: they decide when the cast ends.
		shown = append([]nodeView(nil), nodes...)
		sort.SliceStable(shown, func(i, j int) bool { return shown[i].written < shown[j].written })
		hidden = len(shown) - maxLines
		shown = shown[:maxLines]
	}
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.lines)
	}
	lines := 0
	put := func(s string) {
		b.WriteString("\x1b[2K")
		b.WriteString(clip(s, width))
		b.WriteString("\n")
		lines++
	}
	put(head)
	for _, n := range shown {
		put("  " + v.row(n))
	}
	if hidden > 0 {
		put(fmt.Sprintf("  … and %d nodes further ahead", hidden))
	}
	v.lines = lines
	io.WriteString(v.out, b.String())
}

// finish draws the final state.
func (v *progressView) finish(nodes []nodeView, sent int64) { v.draw(nodes, sent) }
