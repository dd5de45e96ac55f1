package cli

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

func TestLongDash(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("image", "", "")
	fs.Bool("chain", false, "")
	fs.Int("tree", 0, "")
	fs.BoolP("yes", "y", false, "")
	fs.String("max-rate", "", "")
	tests := []struct {
		in, want []string
	}{
		{[]string{"-image", "nt.img", "-chain"}, []string{"--image", "nt.img", "--chain"}},
		{[]string{"--image=nt.img", "-tree=2"}, []string{"--image=nt.img", "--tree=2"}},
		{[]string{"-max-rate", "20MB/s", "-y"}, []string{"--max-rate", "20MB/s", "-y"}},
		{[]string{"-image", "-chain-ish.img"}, []string{"--image", "-chain-ish.img"}},
		{[]string{"-bogus", "--", "-image"}, []string{"--bogus", "--", "-image"}}, // so the error names -bogus whole
		{[]string{"-yy", "-5"}, []string{"-yy", "-5"}},
		// A value that begins with "-" stays as typed, even one that looks like a flag.
		{[]string{"-image", "-Hwp0Rhc", "-chain"}, []string{"--image", "-Hwp0Rhc", "--chain"}},
		{[]string{"--max-rate", "-chain", "-y"}, []string{"--max-rate", "-chain", "-y"}},
		{[]string{"-chain", "-tree"}, []string{"--chain", "--tree"}},
		{[]string{"-image=-x", "-chain"}, []string{"--image=-x", "--chain"}},
	}
	for _, tt := range tests {
		if got := LongDash(fs, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("LongDash(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	fs2 := pflag.NewFlagSet("x", pflag.ContinueOnError)
	img := fs2.String("image", "", "")
	chain := fs2.Bool("chain", false, "")
	if err := fs2.Parse(LongDash(fs2, []string{"-image", "nt.img", "-chain"})); err != nil {
		t.Fatal(err)
	}
	if *img != "nt.img" || !*chain {
		t.Fatalf("parsed image=%q chain=%v", *img, *chain)
	}
}
