package server

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// On a small terminal the live view fits: no line wraps (which would
// break the redraw in place), and it shows no more nodes than rows.
func TestLiveViewFitsTheTerminal(t *testing.T) {
	var out bytes.Buffer
	v := newProgressView(&out, true, time.Second, 1<<30)
	v.screen = func() (int, int) { return 40, 10 }
	var nodes []nodeView
	for i := range 20 {
		nodes = append(nodes, nodeView{name: fmt.Sprintf("a-long-node-name-%02d", i), status: stCasting, written: int64(i) << 20, rate: 1e6, elapsed: time.Second})
	}
	v.draw(nodes, 20<<20)
	escapes := regexp.MustCompile("\x1b\\[[0-9]*[A-Z]")
	lines := strings.Split(strings.TrimSuffix(escapes.ReplaceAllString(out.String(), ""), "\n"), "\n")
	if len(lines) > 10-1 {
		t.Errorf("%d lines on a terminal of 10 rows:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > 40 {
			t.Errorf("a line of %d columns on a terminal of 40: %q", n, l)
		}
	}
	if !strings.HasSuffix(lines[len(lines)-2], "…") || !strings.Contains(lines[len(lines)-1], "further ahead") {
		t.Errorf("long lines are not marked as cut, or the hidden nodes not counted:\n%s", strings.Join(lines, "\n"))
	}
}
