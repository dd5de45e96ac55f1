package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A file that took the image's name while the capture ran is not
// overwritten, and the image is kept under its .partial name.
func TestPublishNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	partial, out := filepath.Join(dir, "g.zst.partial"), filepath.Join(dir, "g.zst")
	os.WriteFile(partial, []byte("image"), 0o644)
	os.WriteFile(out, []byte("someone else's"), 0o644)
	if err := publish(partial, out); !errors.Is(err, errAppeared) {
		t.Fatalf("got %v, want errAppeared", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "someone else's" {
		t.Error("the file at the image's name was overwritten")
	}
	if b, _ := os.ReadFile(partial); string(b) != "image" {
		t.Error("the image is gone")
	}
	os.Remove(out)
	if err := publish(partial, out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); string(b) != "image" {
		t.Error("the image is not at its name")
	}
	if _, err := os.Stat(partial); err == nil {
		t.Error("the .partial file is left")
	}
}
