# dolly — see README.md. Every target works on a fresh checkout.
GO  ?= go
BIN ?= bin
# VERSION is what --version reports: a release (make build VERSION=1.2.0)
# or, by default, the commit the tree is at ("-dirty" with changes).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-ldflags "-X dolly/internal/cli.version=$(VERSION)")

.PHONY: all build test demo bench bench-quick bench-relay initramfs clean

all: build

## build: the node (bin/dolly) and the server (bin/dolly-server)
build:
	$(GO) build $(LDFLAGS) -o $(BIN)/ ./dolly/cmd/dolly ./server/cmd/dolly-server

## test: vet and every test (root-only tests skip themselves without root)
test:
	$(GO) vet ./...
	# What ARM64 PCs run (make initramfs-arm64) builds for them too.
	GOARCH=arm64 $(GO) vet ./dolly/... ./initramfs/...
	cd bench && $(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...
	cd bench && $(GO) test -count=1 ./...

## fuzz: run every fuzz target for FUZZTIME each, one after the other
FUZZTIME ?= 60s
# Go minimizes each new interesting input for up to a minute by default,
# which stalls fuzzing on stream-sized inputs; a bounded count keeps the
# time for fuzzing.
FUZZMINIMIZE ?= 2000x
FUZZ = $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE)
# fuzz1 runs target $(1) of package $(2). Go 1.26's fuzz coordinator may fail
# a clean run with "context deadline exceeded" just as FUZZTIME ends
# (go.dev/issue/75804, fixed in Go 1.27): without a failing input written,
# that is no crash.
fuzz1 = out=$$($(FUZZ) -fuzz '^$(1)$$' ./$(2) 2>&1); rc=$$?; printf '%s\n' "$$out"; \
	if [ $$rc -ne 0 ] && ! printf '%s' "$$out" | grep -q 'Failing input written' && \
		printf '%s' "$$out" | grep -q 'context deadline exceeded'; then \
		echo "$(1): passed; ignoring Go's end-of-fuzztime race (go.dev/issue/75804)"; rc=0; fi; exit $$rc
.PHONY: fuzz
fuzz:
	@$(call fuzz1,FuzzReadMessage,dolly/control)
	@$(call fuzz1,FuzzParseStreamHeader,dolly/stream)
	@$(call fuzz1,FuzzReceive,dolly/stream)
	@$(call fuzz1,FuzzDetect,imaging)
	@$(call fuzz1,FuzzOpenImage,imaging)
	@$(call fuzz1,FuzzSparseWriter,imaging)
	@$(call fuzz1,FuzzDecode,imaging/blockmap)
	@$(call fuzz1,FuzzParsePacket,boot)
	@$(call fuzz1,FuzzTFTPRequest,boot)

## demo: cast a sample ext4 image to 24 local nodes and verify every target
demo: build
	$(GO) run ./internal/demo -bin $(BIN)

## bench: the emulated-lab matrix, dolly against udpcast and nc (root, about an hour)
# The bench is a module of its own (bench/go.mod): its plotting stays out
# of the product's binaries.
bench: build
	cd bench && $(GO) run ./labbench -bin $(abspath $(BIN)) -out out

## bench-quick: the lab subset CI can afford (root, ~5 min)
bench-quick: build
	cd bench && $(GO) run ./labbench -bin $(abspath $(BIN)) -out out -quick
	# The status page in a browser during a cast in the lab: bench/out/status-page.png
	DOLLY_SCREENSHOTS=$(CURDIR)/bench/out $(GO) test -count=1 -run TestStatusPageDuringALabCast ./internal/lab

## bench-relay: CPU per GB of a relay node, dolly against nc | tee | nc
bench-relay: build
	$(GO) run ./internal/benchrelay -bin $(BIN)

## initramfs: the netboot initramfs (bin/initramfs.cpio.gz) for the newest /boot/vmlinuz-*
initramfs:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/dolly-init ./initramfs/cmd/dolly-init
	CGO_ENABLED=0 GOBIN=$(abspath $(BIN)) $(GO) install github.com/u-root/u-root/cmds/core/gosh@$$($(GO) list -m -f '{{.Version}}' github.com/u-root/u-root)
	$(GO) build -o $(BIN)/mkinitramfs ./initramfs/cmd/mkinitramfs
	$(BIN)/mkinitramfs -o $(BIN)/initramfs.cpio.gz -init $(BIN)/dolly-init -shell $(BIN)/gosh

## initramfs-arm64: the initramfs for ARM64 UEFI PCs (bin/arm64/initramfs.cpio.gz); MODULES_ARM64=DIR adds NIC and disk modules from an ARM64 kernel's /lib/modules/VERSION
.PHONY: initramfs-arm64
initramfs-arm64:
	CGO_ENABLED=0 GOARCH=arm64 $(GO) build -o $(BIN)/arm64/dolly-init ./initramfs/cmd/dolly-init
	CGO_ENABLED=0 GOARCH=arm64 GOBIN= $(GO) install github.com/u-root/u-root/cmds/core/gosh@$$($(GO) list -m -f '{{.Version}}' github.com/u-root/u-root)
	cp "$$($(GO) env GOPATH)/bin/linux_arm64/gosh" $(BIN)/arm64/gosh
	$(GO) build -o $(BIN)/mkinitramfs ./initramfs/cmd/mkinitramfs
	$(BIN)/mkinitramfs -o $(BIN)/arm64/initramfs.cpio.gz -init $(BIN)/arm64/dolly-init -shell $(BIN)/arm64/gosh $(if $(MODULES_ARM64),-modules $(MODULES_ARM64),-no-modules)

## netboot-test: qemu VMs (2 BIOS, 1 UEFI; then 1 UEFI with Secure Boot; then one refusing a tampered kernel; then a lab service sending a PC to its disk; then a golden PC captured) PXE-boot from dolly-server -boot, clone an image and are sent to their disks (root, qemu, ovmf, shim-signed, grub-efi-amd64-signed, ~3 min)
.PHONY: netboot-test
netboot-test: build initramfs
	DOLLY_NETBOOT=1 DOLLY_BIN=$(abspath $(BIN)) $(GO) test -count=1 -v -run 'TestNetboot(Cast|SecureBoot|SecureBootRefusesTamperedKernel|ServeBootsTheDisk|Capture)$$' -timeout 20m ./internal/netboot

clean:
	rm -rf $(BIN)
