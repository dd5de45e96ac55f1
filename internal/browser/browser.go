// Package browser starts a headless chromium for tests of the status
// page. It is a package of its own so that only those tests need chromedp.
package browser

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Headless starts a headless chromium for the test, its actions bounded
// by limit, or skips the test where there is none. The browser is up when
// it returns.
func Headless(t testing.TB, limit time.Duration) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skip("no chromium: apt-get install chromium to test the status page in a browser")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	ctx, cancelTime := context.WithTimeout(ctx, limit)
	t.Cleanup(cancelTime)
	// The browser starts now, not at the test's first page: on a busy
	// machine its start takes seconds, and a short cast would be over.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("chromium %s did not start: %v", path, err)
	}
	return ctx
}
