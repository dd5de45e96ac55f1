package castkey

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	random := string(NewKey())
	for _, tt := range []struct {
		text    string
		ok      bool
		asGiven bool // taken as it is, not stretched
	}{
		{"  " + random + "\n", true, true},
		{"0123456789abcdef0123456789abcdef", true, true}, // 128 bits of hex
		{"correct horse battery staple", true, false},    // a passphrase, stretched
		{"0123456789abcdef0123", true, false},            // short hex: a passphrase
		{"too short a phrase", false, false},             // 18 characters
		{"short", false, false},
		{"   \n", false, false},
	} {
		k, err := ParseKey(tt.text)
		if (err == nil) != tt.ok {
			t.Errorf("ParseKey(%q) = %v", tt.text, err)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "dolly key -o FILE") {
				t.Errorf("ParseKey(%q): %v does not say how to make a key", tt.text, err)
			}
			continue
		}
		if given := bytes.Equal(k, []byte(strings.TrimSpace(tt.text))); given != tt.asGiven {
			t.Errorf("ParseKey(%q): taken as given %v, want %v", tt.text, given, tt.asGiven)
		}
		if again, _ := ParseKey(tt.text); !bytes.Equal(again, k) {
			t.Errorf("ParseKey(%q) differs from one call to the next", tt.text)
		}
	}
}

func TestFileWarning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cast.key")
	if err := os.WriteFile(path, []byte(NewKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	if w := FileWarning(path); w != "" {
		t.Errorf("a 0600 key file: %q", w)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if w := FileWarning(path); !strings.Contains(w, "chmod 600") {
		t.Errorf("a 0644 key file: %q", w)
	}
}

// The capture key is the key file's alone: an enrolled node, which holds
// only the shared key, cannot derive it.
func TestCaptureKeyIsNotTheSharedOne(t *testing.T) {
	k := NewKey()
	if bytes.Equal(k.Capture(), k.Shared()) || bytes.Equal(k.Capture(), k) || bytes.Equal(k.Capture(), k.Shared().Capture()) {
		t.Fatal("the capture key is one an enrolled node can derive")
	}
	if !bytes.Equal(k.Capture(), k.Capture()) {
		t.Fatal("the capture key is not stable")
	}
}
