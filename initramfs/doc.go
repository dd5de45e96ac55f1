// Package initramfs will build the netboot initramfs around the dolly node
// with u-root: network bring-up, kernel modules, device discovery and the
// after-cast action.
package initramfs
