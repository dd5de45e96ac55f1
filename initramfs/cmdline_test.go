package initramfs

import (
	"slices"
	"strings"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		name    string
		cmdline string
		want    Boot
		err     string // in the error; "" for none
	}{
		{
			name:    "server only",
			cmdline: "BOOT_IMAGE=vmlinuz console=ttyS0 dolly.server=198.18.0.1:9700 quiet\n",
			want:    Boot{Server: "198.18.0.1:9700"},
		},
		{
			name:    "everything",
			cmdline: "console=tty0 dolly.server=10.0.0.1:9701 dolly.target=disk:largest dolly.name=pc07 dolly.key=s3cret dolly.after=poweroff dolly.debug",
			want:    Boot{Server: "10.0.0.1:9701", Target: "disk:largest", Name: "pc07", Key: "s3cret", After: "poweroff", Debug: true},
		},
		{
			name:    "server key",
			cmdline: "dolly.server=198.18.0.1:9700 dolly.serverkey=Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg",
			want:    Boot{Server: "198.18.0.1:9700", ServerKey: "Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg"},
		},
		{
			name:    "capture",
			cmdline: "dolly.server=198.18.0.1 dolly.capture=disk:first dolly.after=poweroff",
			want:    Boot{Server: "198.18.0.1:9700", Capture: "disk:first", After: "poweroff"},
		},
		{
			name:    "default port",
			cmdline: "dolly.server=imgsrv",
			want:    Boot{Server: "imgsrv:9700"},
		},
		{
			name:    "IPv6 without port",
			cmdline: "dolly.server=[fd00::1]",
			want:    Boot{Server: "[fd00::1]:9700"},
		},
		{
			name:    "IPv6 with port",
			cmdline: "dolly.server=[fd00::1]:9800",
			want:    Boot{Server: "[fd00::1]:9800"},
		},
		{
			name:    "quoted value with blanks",
			cmdline: `dolly.server=s:1 dolly.target="disk:model=Samsung SSD*,largest" ro`,
			want:    Boot{Server: "s:1", Target: "disk:model=Samsung SSD*,largest"},
		},
		{
			name:    "last one wins",
			cmdline: "dolly.server=a:1 dolly.server=b:2",
			want:    Boot{Server: "b:2"},
		},
		{
			name:    "unknown parameters are kept for a warning",
			cmdline: "dolly.server=s:1 dolly.tagret=/dev/sda dolly.debug=0",
			want:    Boot{Server: "s:1", Unknown: []string{"dolly.tagret=/dev/sda"}},
		},
		{
			name:    "look-alikes are not ours",
			cmdline: "dolly.server=s:1 xdolly.name=x dollyname=y",
			want:    Boot{Server: "s:1"},
		},
		{
			name:    "no server",
			cmdline: "console=ttyS0 dolly.target=/dev/sda",
			want:    Boot{Target: "/dev/sda"},
			err:     "no dolly.server",
		},
		{
			name:    "empty command line",
			cmdline: "",
			err:     "no dolly.server",
		},
		{
			name:    "empty host",
			cmdline: "dolly.server=:9700",
			want:    Boot{Server: ":9700"},
			err:     "no host",
		},
		{
			name:    "bad after",
			cmdline: "dolly.server=s:1 dolly.after=halt",
			want:    Boot{Server: "s:1"},
			err:     "dolly.after=halt: use reboot, poweroff, shell",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCmdline(tt.cmdline)
			if tt.err == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v, want one saying %q", err, tt.err)
			}
			if got.Server != tt.want.Server || got.Target != tt.want.Target || got.Name != tt.want.Name ||
				got.Key != tt.want.Key || got.After != tt.want.After || got.Debug != tt.want.Debug ||
				!slices.Equal(got.Unknown, tt.want.Unknown) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestSplitCmdline(t *testing.T) {
	got := splitCmdline(" a=1  b=\"x y\"\tc \"d=e f\"\n")
	want := []string{"a=1", "b=x y", "c", "d=e f"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
