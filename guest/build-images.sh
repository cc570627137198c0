#!/usr/bin/env bash
# Build unihost's test guest images: one Linux kernel (ELF vmlinux, boots PVH
# on QEMU `microvm`) and one initrd per test application (exit, panic, echo,
# burn, http, fetch), plus one JSON metadata file per image for `unihost image import`.
#
#   guest/build-images.sh            build into $UNIHOST_GUEST_OUT (default guest/out)
#   guest/build-images.sh --force    rebuild even if the cache key matches
#
# Idempotent and cached: nothing is rebuilt when the outputs exist and the
# cache key (sha256 of this script + guest/init/** + the kernel package name
# and version) is unchanged. Needs root on Debian 12 (installs busybox-static,
# cpio, lz4 with apt-get if missing). The kernel package is only downloaded
# (`apt-get download`) and unpacked (`dpkg-deb -x`), never installed.
# The guest side of the boot contract is documented in docs/guest-contract.md.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${UNIHOST_GUEST_OUT:-$HERE/out}
INIT_SRC=$HERE/init
APPS=(exit panic echo burn http fetch httpbench ddbench)
FORCE=0
[ "${1:-}" = --force ] && FORCE=1

# Kernel modules loaded by init, in this order (their depends= are checked and
# missing dependencies are inserted before them). virtio_pci* are only used on
# pc/q35; microvm uses virtio_mmio. button+evdev: ACPI power button for acpid.
# pvpanic+pvpanic_mmio: crash notification to QEMU (ACPI QEMU0001 device).
MODULES=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
	virtio_mmio failover net_failover virtio_net virtio_blk button evdev
	pvpanic pvpanic_mmio)

# Kernel args baked into every image. console=ttyS0: first UART is the log.
# panic=-1 + oops=panic: any oops/panic reboots at once, QEMU -no-reboot exits.
# mitigations=off cryptomgr.notests: ~0.3-0.5 s faster boots under TCG
# (single-application test VMs; nothing to protect from each other inside).
KERNEL_ARGS="console=ttyS0 quiet panic=-1 oops=panic mitigations=off cryptomgr.notests"

log() { echo "build-images: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, dpkg-deb)"

# ---- tools ---------------------------------------------------------------
need_pkgs=()
command -v cpio >/dev/null || need_pkgs+=(cpio)
command -v lz4 >/dev/null || need_pkgs+=(lz4)
command -v gzip >/dev/null || need_pkgs+=(gzip)
command -v sha256sum >/dev/null || need_pkgs+=(coreutils)
dpkg -s busybox-static >/dev/null 2>&1 || need_pkgs+=(busybox-static)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	log "installing ${need_pkgs[*]}"
	apt-get install -y --no-install-recommends "${need_pkgs[@]}" >/dev/null ||
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${need_pkgs[@]}" >/dev/null; } ||
		die "apt-get install ${need_pkgs[*]} failed"
fi
BUSYBOX=$(dpkg -L busybox-static | grep -m1 -E '/bin/busybox$') || die "busybox-static has no /bin/busybox"

# ---- kernel package: resolve name + version -------------------------------
resolve_kernel() {
	local pkg ver
	pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
		awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
	[ -n "$pkg" ] || return 1
	ver=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ { print $2; exit }')
	[ -n "$ver" ] && [ "$ver" != "(none)" ] || return 1
	echo "$pkg $ver"
}
mkdir -p "$OUT"
STAMP=$OUT/.build-stamp
if ! kinfo=$(resolve_kernel); then
	log "apt lists do not know linux-image-cloud-amd64; running apt-get update"
	apt-get update >/dev/null 2>&1 || true
	kinfo=$(resolve_kernel) ||
		{ [ -f "$STAMP" ] && kinfo=$(sed -n 's/^kernel //p' "$STAMP") && [ -n "$kinfo" ] &&
			log "offline: reusing kernel $kinfo from the previous build"; } ||
		die "cannot resolve the kernel package behind linux-image-cloud-amd64"
fi
read -r KPKG KVER <<<"$kinfo"

# ---- cache key -----------------------------------------------------------
key=$( {
	sha256sum "${BASH_SOURCE[0]}"
	(cd "$INIT_SRC" && find . -type f | sort | xargs sha256sum)
	echo "kernel $KPKG $KVER"
	echo "busybox $(dpkg-query -W -f='${Version}' busybox-static)"
} | sed 's|  .*/|  |' | sha256sum | cut -d' ' -f1)
outputs_ok() {
	[ -s "$OUT/vmlinux" ] || return 1
	local a
	for a in "${APPS[@]}"; do [ -s "$OUT/$a.initrd" ] && [ -s "$OUT/$a.json" ] || return 1; done
	[ -s "$OUT/images.json" ]
}
if [ $FORCE = 0 ] && [ -f "$STAMP" ] && grep -qx "key $key" "$STAMP" && outputs_ok; then
	log "up to date ($OUT, kernel $KPKG $KVER)"
	exit 0
fi
t0=$(date +%s%N)

# ---- kernel: download + unpack (never installed) -------------------------
CACHE=$OUT/.cache
mkdir -p "$CACHE"
deb=$(ls "$CACHE/${KPKG}_${KVER//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
	log "downloading $KPKG=$KVER"
	rm -f "$CACHE"/linux-image-*.deb
	(cd "$CACHE" && apt-get download -o APT::Sandbox::User=root "$KPKG=$KVER" >/dev/null) ||
		die "apt-get download $KPKG=$KVER failed"
	deb=$(ls "$CACHE/${KPKG}_"*.deb | head -1)
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/unihost-guest.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
dpkg-deb -x "$deb" "$WORK/k"
KREL=${KPKG#linux-image-}
BZ=$WORK/k/boot/vmlinuz-$KREL
KCONFIG=$WORK/k/boot/config-$KREL
MODDIR=$WORK/k/lib/modules/$KREL
[ -f "$BZ" ] && [ -f "$KCONFIG" ] && [ -d "$MODDIR" ] || die "unexpected layout in $deb"

# ---- vmlinux from bzImage (extract-vmlinux logic) ------------------------
is_elf() { [ "$(head -c4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; }
try_decomp() {  # $1 magic (printf escapes) $2.. decompressor
	local magic=$1 off; shift
	for off in $(grep -abo "$(printf "$magic")" "$BZ" | cut -d: -f1); do
		tail -c +$((off + 1)) "$BZ" | "$@" >"$WORK/vmlinux" 2>/dev/null || true
		is_elf "$WORK/vmlinux" && return 0
	done
	return 1
}
try_decomp '\002\041\114\030' lz4 -dc ||
	try_decomp '\037\213\010' gzip -dc ||
	try_decomp '\050\265\057\375' zstd -dc ||
	try_decomp '\3757zXZ\000' xz -dc ||
	die "cannot extract an ELF vmlinux from $BZ"
cp "$WORK/vmlinux" "$OUT/vmlinux.tmp" && mv -f "$OUT/vmlinux.tmp" "$OUT/vmlinux"

# ---- modules: resolve files, dependencies and order ----------------------
declare -A MODFILE=() BUILTIN=()
while IFS= read -r f; do
	n=${f##*/}; n=${n%%.ko*}; MODFILE[${n//-/_}]=$f
done < <(find "$MODDIR/kernel" -name '*.ko*')
while IFS= read -r f; do
	n=${f##*/}; n=${n%%.ko*}; BUILTIN[${n//-/_}]=1
done <"$MODDIR/modules.builtin"
cfg() { sed -n "s/^CONFIG_$1=//p" "$KCONFIG"; }
# ext4 (volumes): add it and its crc32c soft dependency if they are modules.
[ "$(cfg EXT4_FS)" = m ] && MODULES+=(ext4)
[ "$(cfg EXT4_FS)" = m ] && [ "$(cfg CRYPTO_CRC32C)" = m ] && MODULES=(crc32c_generic "${MODULES[@]}")
[ -n "$(cfg EXT4_FS)" ] || die "kernel has no ext4"
[ "$(cfg SERIAL_8250)" = y ] || die "kernel needs a built-in 8250 UART driver (console + control channel)"

mkdir -p "$WORK/mods"
mod_path() {  # copy (decompressing) module $1 into $WORK/mods, print its path
	local src=${MODFILE[$1]} dst=$WORK/mods/$1.ko
	if [ ! -f "$dst" ]; then
		case $src in
		*.ko) cp "$src" "$dst" ;;
		*.ko.xz) xz -dc "$src" >"$dst" ;;
		*.ko.zst) zstd -qdc "$src" >"$dst" ;;
		*.ko.gz) gzip -dc "$src" >"$dst" ;;
		*) die "unknown module format $src" ;;
		esac
	fi
	echo "$dst"
}
declare -A SEEN=()
ORDER=()
visit() {
	local m=$1 deps d
	[ -n "${SEEN[$m]:-}" ] && return 0
	SEEN[$m]=1
	if [ -z "${MODFILE[$m]:-}" ]; then
		[ -n "${BUILTIN[$m]:-}" ] && return 0
		die "module $m not found in $KPKG"
	fi
	deps=$(tr '\0' '\n' <"$(mod_path "$m")" | sed -n 's/^depends=//p' | head -1)
	for d in ${deps//,/ }; do visit "${d//-/_}"; done
	ORDER+=("$m")
}
for m in "${MODULES[@]}"; do visit "$m"; done

# ---- initrd: base archive + per-application archive -----------------------
ROOT=$WORK/root
mkdir -p "$ROOT"/{bin,dev,proc,sys,run,tmp,mnt,root,var/log,etc/unihost,etc/acpi/PWRF,lib/modules,apps}
cp "$BUSYBOX" "$ROOT/bin/busybox"
for a in $("$BUSYBOX" --list); do
	[ "$a" = busybox ] || ln -sf busybox "$ROOT/bin/$a"
done
ln -sf bin "$ROOT/sbin"
cp "$INIT_SRC/init" "$ROOT/init"
cp "$INIT_SRC/cmdline.awk" "$ROOT/etc/unihost/cmdline.awk"
cp "$INIT_SRC/acpi-powerbtn" "$ROOT/etc/acpi/PWRF/00000080"
cp "$INIT_SRC"/apps/* "$ROOT/apps/"
chmod 0755 "$ROOT/init" "$ROOT/etc/acpi/PWRF/00000080" "$ROOT"/apps/*
for m in "${ORDER[@]}"; do cp "$WORK/mods/$m.ko" "$ROOT/lib/modules/"; done
printf '%s\n' "${ORDER[@]}" >"$ROOT/lib/modules/load-order"
echo "$KPKG $KVER" >"$ROOT/etc/unihost/kernel"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\n' >"$ROOT/etc/group"
: >"$ROOT/etc/resolv.conf"

mkcpio() {  # $1 dir -> stdout: reproducible newc archive, gzip'd
	(cd "$1" && find . -exec touch -h -d @0 {} + && find . | sort |
		cpio -o -H newc --owner=0:0 --reproducible --quiet) | gzip -n -9
}
mkcpio "$ROOT" >"$WORK/base.cpio.gz"

json_str() { local s=$1; s=${s//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
json_arr() { local out="" a; for a in "$@"; do out+="${out:+, }$(json_str "$a")"; done; printf '[%s]' "$out"; }
ksha=$(sha256sum "$OUT/vmlinux" | cut -d' ' -f1)
index=""
for app in "${APPS[@]}"; do
	mkdir -p "$WORK/app-$app/etc/unihost"
	echo "$app" >"$WORK/app-$app/etc/unihost/app"
	# Concatenated cpio archives are unpacked in order by the kernel.
	cat "$WORK/base.cpio.gz" <(mkcpio "$WORK/app-$app") >"$OUT/$app.initrd.tmp"
	mv -f "$OUT/$app.initrd.tmp" "$OUT/$app.initrd"
	case $app in
	exit) args=(0); desc="exits with the code given as first argument" ;;
	panic) args=(); desc="crashes the kernel right after boot (arg: sysrq|segv|abort [delay_s])" ;;
	echo) args=(hello); desc="prints its args and env, runs until stopped, SIGTERM -> exit 0" ;;
	burn) args=(); desc="burns CPU for N seconds (first arg), forever without one" ;;
	http) args=(); desc="busybox httpd serving a fixed page on port 8080 until stopped" ;;
	fetch) args=(); desc="fetches its URL args with wget every FETCH_INTERVAL s, prints ok/failed per attempt" ;;
	httpbench) args=(); desc="times sequential and parallel wget requests to its URL args and to loopback (bench/network)" ;;
	ddbench) args=(); desc="times dd writes with conv=fsync to directories, default /data (bench/network)" ;;
	esac
	ports='[]'; [ $app = http ] && ports='[8080]'
	isha=$(sha256sum "$OUT/$app.initrd" | cut -d' ' -f1)
	cat >"$OUT/$app.json.tmp" <<EOF
{
  "schema": "unihost-guest-image/1",
  "name": "$app",
  "tag": "latest",
  "ref": "$app:latest",
  "description": $(json_str "$desc"),
  "kernel": "vmlinux",
  "initrd": "$app.initrd",
  "paths_relative_to": "this file's directory",
  "kernel_sha256": "$ksha",
  "initrd_sha256": "$isha",
  "kernel_size": $(stat -c %s "$OUT/vmlinux"),
  "initrd_size": $(stat -c %s "$OUT/$app.initrd"),
  "args": $(json_arr "${args[@]}"),
  "env": {},
  "kernel_args": $(json_str "$KERNEL_ARGS"),
  "machine": "microvm",
  "platform": "qemu",
  "architecture": "x86_64",
  "boot_protocol": "pvh",
  "min_memory_mb": 72,
  "default_memory_mb": 128,
  "ports": $ports,
  "contract": "unihost-guest/1",
  "kernel_package": "$KPKG=$KVER",
  "modules": $(json_arr "${ORDER[@]}")
}
EOF
	mv -f "$OUT/$app.json.tmp" "$OUT/$app.json"
	index+="${index:+, }\"$app.json\""
done
printf '{ "schema": "unihost-guest-images/1", "images": [%s] }\n' "$index" >"$OUT/images.json"
{ echo "key $key"; echo "kernel $KPKG $KVER"; } >"$STAMP"
log "built $OUT in $(( ($(date +%s%N) - t0) / 1000000 )) ms (kernel $KPKG $KVER, modules: ${ORDER[*]})"
