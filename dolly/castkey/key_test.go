package castkey

import "testing"

func TestParseKey(t *testing.T) {
	for _, tt := range []struct {
		text string
		ok   bool
	}{
		{"  0123456789abcdef0123\n", true},
		{"short", false},
		{"   \n", false},
	} {
		_, err := ParseKey(tt.text)
		if (err == nil) != tt.ok {
			t.Errorf("ParseKey(%q) = %v", tt.text, err)
		}
	}
}
