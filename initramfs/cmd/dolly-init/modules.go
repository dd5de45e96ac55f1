//go:build linux

package main

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"

	"dolly/initramfs"
)

// loadModules loads the drivers of the devices the kernel sees, in rounds:
// a driver can bring new devices with it (virtio_pci finds the virtio
// devices that virtio_net and virtio_blk then drive, a USB host controller
// finds the USB NIC), so the devices are scanned again until two scans in a
// row find nothing new to load. A module that fails to load is logged and
// skipped.
func loadModules(log *slog.Logger) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		log.Error("uname", "err", err)
		return
	}
	release := unix.ByteSliceToString(u.Release[:])
	dir := filepath.Join("/lib/modules", release)
	mods, err := initramfs.ReadModules(dir)
	if err != nil {
		log.Warn("no kernel modules for this kernel: relying on built-in drivers", "release", release, "err", err)
		return
	}
	prober, err := kmodule.NewProber(kmodule.ProbeOpts{KVer: release})
	if err != nil {
		log.Warn("kernel modules", "err", err)
		return
	}
	tried := make(map[string]bool)
	load := func(name, why string) bool {
		if tried[name] {
			return false
		}
		tried[name] = true
		for _, pre := range mods.SoftPre(name) {
			if !tried[pre] {
				tried[pre] = true
				if err := prober.Probe(pre, ""); err != nil {
					log.Debug("soft dependency", "module", pre, "of", name, "err", err)
				}
			}
		}
		if err := prober.Probe(name, ""); err != nil {
			log.Warn("loading module", "module", name, "for", why, "err", err)
			return true
		}
		log.Info("loaded module", "module", name, "for", why)
		return true
	}

	start := time.Now()
	quiet := 0
	for round := 0; round < 20 && quiet < 2; round++ {
		loaded := false
		for _, alias := range deviceAliases("/sys/devices") {
			for _, name := range mods.MatchAlias(alias) {
				if load(name, alias) {
					loaded = true
				}
			}
		}
		if loaded {
			quiet = 0
		} else {
			quiet++
		}
		// Give new devices time to show up: probing is asynchronous.
		time.Sleep(500 * time.Millisecond)
	}
	log.Info("drivers loaded", "modules", len(tried), "took", time.Since(start).Round(time.Millisecond))
}

// deviceAliases returns the distinct modalias strings of the devices under
// root (/sys/devices).
func deviceAliases(root string) []string {
	seen := make(map[string]bool)
	var aliases []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "modalias" || !d.Type().IsRegular() {
			return nil // devices come and go while we look
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		a := strings.TrimSpace(string(b))
		if a != "" && !seen[a] {
			seen[a] = true
			aliases = append(aliases, a)
		}
		return nil
	})
	return aliases
}
