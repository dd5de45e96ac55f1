// Package boot will hold dolly-server's netboot services: proxyDHCP (and
// full DHCP for an isolated lab switch), TFTP for iPXE and HTTP for the
// kernel, the initramfs and the iPXE script.
package boot
