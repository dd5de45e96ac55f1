// Package boot holds dolly-server's netboot services, which bring lab PCs
// from PXE firmware to the dolly node:
//
//   - DHCP: proxyDHCP by default, which answers only PXE clients, with
//     boot information and never an address, next to the site's DHCP
//     server; or full DHCP leasing a range, for an isolated lab switch.
//     Requests to the PXE boot server port 4011 are answered too.
//   - TFTP (read-only): iPXE, undionly.kpxe for BIOS clients, ipxe.efi
//     for x86-64 UEFI clients and, with Config.ARM64, ipxe-arm64.efi for
//     ARM64 UEFI clients.
//   - HTTP: the iPXE script, the kernel and the initramfs (ARM64's under
//     /arm64, its script at boot.ipxe?arch=arm64).
//
// Firmware loads iPXE over TFTP; iPXE asks DHCP again, recognisably, and
// is sent the script's URL instead, so it boots the kernel over HTTP with
// dolly.server= on the command line rather than loading itself again.
//
// Under Config.SecureBoot a UEFI PC gets signed loaders instead, all over
// TFTP: Shim, which loads GRUB, which reads a generated configuration and
// loads the (signed) kernel and the initramfs (see secureboot.go).
package boot
