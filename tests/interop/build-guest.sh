#!/bin/bash
# build-guest.sh - build the interop test guest: a stock Debian kernel (with
# the rdma_rxe module) and a small initramfs holding busybox, rdma-core's
# tools, perftest, rdmacm-utils (rping, ucmatose, udaddy, mckey), tcpdump and our own verbs
# programs (guest/rxe_peer.c, ../c/verbs_diff.c).
#
# Everything comes from Debian packages: the kernel .deb is fetched with
# `apt-get download` and unpacked with `dpkg -x` (never installed, the host
# kernel is untouched); the guest userspace is copied from the host's
# installed packages with every library `ldd` reports.
#
# Output in $RXE_INTEROP_WORK (default /var/tmp/rxe-rs-interop):
#   guest/vmlinuz, guest/initramfs.cpio.gz, guest/KVER, guest/stamp
# The initramfs is rebuilt only when an input changed (the kernel package,
# guest/init.sh, guest/rxe_peer.c, ../c/verbs_diff.c or this script); the kernel .deb is kept.
#
# Env: KPKG=linux-image-...   another kernel (default: what linux-image-amd64
#                             depends on; one the host's suites lack is fetched
#                             from bookworm-backports, e.g. 6.12); FORCE=1
#                             rebuilds regardless.
# Needs root on the host only for apt-get (the caller installs packages).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${RXE_INTEROP_WORK:-/var/tmp/rxe-rs-interop}
OUT="$WORK/guest"
mkdir -p "$WORK/debs" "$OUT"

# --- 1. the guest kernel --------------------------------------------------------
if [ -z "${KPKG:-}" ]; then
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    if [ -z "$KPKG" ]; then
        apt-get update -q >/dev/null
        KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    fi
fi
[ -n "$KPKG" ] || { echo "build-guest: cannot find the kernel package (apt-cache depends linux-image-amd64)" >&2; exit 1; }
KVER=${KPKG#linux-image-}

stamp=$( { echo "$KPKG"; cat "$HERE/build-guest.sh" "$HERE/guest/init.sh" "$HERE/guest/rxe_peer.c" "$HERE/../c/verbs_diff.c" "$HERE/../c/rdmacm_diff.c" "$HERE/../c/diff_lines.h"; } | sha256sum | cut -c1-16)
if [ -z "${FORCE:-}" ] && [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$stamp" ] &&
   [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initramfs.cpio.gz" ]; then
    echo "build-guest: up to date ($KVER, $OUT)"
    exit 0
fi

KDIR="$WORK/kernel-$KVER"
if [ ! -f "$KDIR/boot/vmlinuz-$KVER" ]; then
    ( cd "$WORK/debs" && { ls "${KPKG}"_*.deb >/dev/null 2>&1 || apt-get download -q "$KPKG" 2>&1 | grep -v 'unsandboxed' || true; } )
    if ! ls "$WORK/debs/${KPKG}"_*.deb >/dev/null 2>&1; then
        # Not in the host's suites: try bookworm-backports (Linux 6.12, for
        # KPKG=linux-image-6.12.*-amd64), with a package list of its own so
        # that the host's apt configuration stays as it is.
        A="$WORK/apt-backports"
        mkdir -p "$A/lists/partial"
        echo "deb http://deb.debian.org/debian bookworm-backports main" >"$A/sources.list"
        aopt=(-o "Dir::Etc::SourceList=$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache")
        apt-get "${aopt[@]}" update -q >/dev/null 2>&1 || true
        ( cd "$WORK/debs" && apt-get "${aopt[@]}" download -q "$KPKG" 2>&1 | grep -v 'unsandboxed' || true )
    fi
    ls "$WORK/debs/${KPKG}"_*.deb >/dev/null 2>&1 || { echo "build-guest: apt-get download $KPKG failed" >&2; exit 1; }
    rm -rf "$KDIR"; mkdir -p "$KDIR"
    dpkg -x "$WORK/debs/${KPKG}"_*.deb "$KDIR"
    depmod -b "$KDIR" "$KVER"          # the .deb ships no modules.dep
fi
echo "build-guest: kernel $KVER ($(dpkg-deb -f "$WORK/debs/${KPKG}"_*.deb Version))"

# --- 2. rootfs skeleton (merged /usr like the host) -----------------------------
R="$WORK/rootfs"
rm -rf "$R"
mkdir -p "$R"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,mnt,share,root,var/tmp}
ln -s usr/bin "$R/bin"; ln -s usr/sbin "$R/sbin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"

put() { mkdir -p "$R$(dirname "$1")"; cp -L "$1" "$R$1"; }
put_elf() {   # an executable or library and every library ldd lists for it
    put "$1"
    ldd "$1" 2>/dev/null | awk '/=> \//{print $3} /^[[:space:]]*\//{print $1}' | while read -r lib; do
        [ -e "$R$lib" ] || put "$lib"
    done
}

# --- 3. kernel modules: rdma_rxe and its dependencies, virtio, 9p, crc32 ---------
MODS="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic crc32_pclmul rdma_rxe ib_uverbs rdma_ucm"
for m in $MODS; do
    modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}'
done | sort -u | while read -r ko; do
    rel=${ko#"$KDIR"}
    mkdir -p "$R$(dirname "$rel")"; cp "$ko" "$R$rel"
done
cp "$KDIR/lib/modules/$KVER"/modules.{builtin,builtin.modinfo,order} "$R/lib/modules/$KVER/"
depmod -b "$R" "$KVER"

# --- 4. userspace -----------------------------------------------------------------
BINS="ibv_devinfo ibv_devices ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong
      ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat
      rping ucmatose udaddy mckey
      rdma ip kmod tcpdump bash timeout"
for b in $BINS; do
    p=$(command -v "$b") || { echo "build-guest: $b is not installed on the host" >&2; exit 1; }
    put_elf "$p"
done
for l in modprobe insmod rmmod lsmod modinfo depmod; do ln -sf /usr/bin/kmod "$R/usr/sbin/$l"; done
# libibverbs dlopen()s its provider: rxe.driver names "rxe", the code is librxe-*.so
put /etc/libibverbs.d/rxe.driver
for so in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so; do put_elf "$so"; done
# UCX (ucx-utils): ucx_perftest and the transport modules it dlopen()s
# from its module directory (rc_verbs is in libuct_ib)
if command -v ucx_perftest >/dev/null 2>&1; then
    put_elf "$(command -v ucx_perftest)"
    for so in /usr/lib/x86_64-linux-gnu/ucx/libuct_*.so.0; do put_elf "$so"; done
fi
# glibc dlopen()s libgcc_s for pthread_exit/cancellation; ldd cannot see it
put_elf /usr/lib/x86_64-linux-gnu/libgcc_s.so.1

# our verbs program (SEND/WRITE with immediate, READ, atomics, RNR, error NAKs, loss)
mkdir -p "$WORK/bin"
gcc -O2 -Wall -Wextra -Werror -o "$WORK/bin/rxe_peer" "$HERE/guest/rxe_peer.c" -libverbs
put_elf "$WORK/bin/rxe_peer"
cp "$WORK/bin/rxe_peer" "$R/usr/bin/rxe_peer"
# the differential harness (tests/c/verbs_diff.c; tests/interop/verbs_diff.sh runs it on both stacks)
gcc -O1 -Wall -Wextra -Wno-missing-field-initializers -o "$WORK/bin/verbs_diff" "$HERE/../c/verbs_diff.c" -libverbs
cp "$WORK/bin/verbs_diff" "$R/usr/bin/verbs_diff"
gcc -O1 -Wall -Wextra -Wno-missing-field-initializers -o "$WORK/bin/rdmacm_diff" "$HERE/../c/rdmacm_diff.c" -lrdmacm -libverbs
put_elf "$WORK/bin/rdmacm_diff"
cp "$WORK/bin/rdmacm_diff" "$R/usr/bin/rdmacm_diff"

# busybox for the rest, never shadowing the real binaries copied above
cp /bin/busybox "$R/usr/bin/busybox"
for a in $("$R/usr/bin/busybox" --list-full); do
    b=${a##*/}
    [ -e "$R/usr/bin/$b" ] || [ -e "$R/usr/sbin/$b" ] || [ -L "$R/usr/sbin/$b" ] ||
        ln -s /usr/bin/busybox "$R/usr/${a#usr/}" 2>/dev/null || true
done

echo 'root:x:0:0:root:/root:/bin/sh' >"$R/etc/passwd"
echo 'root:x:0:' >"$R/etc/group"
printf '127.0.0.1 localhost\n' >"$R/etc/hosts"
printf 'hosts: files\n' >"$R/etc/nsswitch.conf"
[ -f /etc/services ] && cp /etc/services "$R/etc/" || true
[ -f /etc/protocols ] && cp /etc/protocols "$R/etc/" || true
install -m 0755 "$HERE/guest/init.sh" "$R/init"

# --- 5. pack ----------------------------------------------------------------------
cp "$KDIR/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
( cd "$R" && find . -print0 | cpio --null -o -H newc --quiet ) | gzip -1 >"$OUT/initramfs.cpio.gz.tmp"
mv "$OUT/initramfs.cpio.gz.tmp" "$OUT/initramfs.cpio.gz"
rm -rf "$R"
echo "$KVER" >"$OUT/KVER"
echo "$stamp" >"$OUT/stamp"
echo "build-guest: $(du -h "$OUT/initramfs.cpio.gz" | cut -f1) $OUT/initramfs.cpio.gz"
