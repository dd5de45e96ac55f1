// Package initramfs builds the netboot initramfs around the dolly node:
// Build writes the archive (init, rescue shell, kernel modules for NICs and
// disks), ParseCmdline reads the dolly.* boot parameters, and Modules reads
// a kernel's module index, for the builder to choose modules and for the
// init to find the drivers of the devices it sees. The init itself is
// initramfs/cmd/dolly-init; initramfs/cmd/mkinitramfs builds the archive.
package initramfs
