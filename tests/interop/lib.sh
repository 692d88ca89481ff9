# shellcheck shell=bash
# lib.sh - host-side helpers of the interop harness (sourced by run.sh).
#
#   net_up MTU / net_down      the private netns: bridge $BR (10.99.0.1/24) + tap $TAP
#   net_mtu MTU                change the MTU of the bridge and the tap
#   nsx CMD...                 run CMD inside the netns
#   guest_boot [MTU] / guest_ready T   boot the guest (qemu, TCG; eth0 at MTU,
#                              1500 unless given) / wait for /share/ready
#   gjob NAME 'script'         submit a job to the guest's agent (runs in background)
#   gwait NAME [T]             wait for it; prints its log; returns its exit code
#   grun NAME T 'script'       gjob + gwait
#   gpoweroff                  ask the guest to power off

NS=${RXE_NETNS:-rxers-interop-$$}
BR=rxebr0
TAP=rxetap0
HOST_IP=10.99.0.1
GUEST_IP=10.99.0.11
GUEST_MAC=52:54:00:99:00:11

nsx() { ip netns exec "$NS" "$@"; }

net_up() {
    local mtu=$1
    ip netns add "$NS" || return 1
    nsx ip link set lo up &&
    nsx ip link add "$BR" type bridge &&
    nsx ip link set "$BR" type bridge stp_state 0 forward_delay 0 &&
    nsx ip tuntap add "$TAP" mode tap &&
    nsx ip link set "$TAP" mtu "$mtu" txqueuelen "${TAP_QLEN:-1000}" master "$BR" up &&
    nsx ip link set "$BR" mtu "$mtu" up &&
    nsx ip addr add "$HOST_IP/24" dev "$BR"
}
net_mtu() {
    nsx ip link set "$TAP" mtu "$1"
    nsx ip link set "$BR" mtu "$1"
}
net_down() { ip netns del "$NS" 2>/dev/null || true; }

guest_boot() {   # [MTU]  SHARE must be set; starts qemu in the background, sets QEMU_PID
    local g="$WORK/guest" mtu=${1:-1500}
    rm -rf "$SHARE"; mkdir -p "$SHARE"
    # `ip netns exec` execs qemu, so $! is qemu itself
    ip netns exec "$NS" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 1024 -smp 1 \
        -nographic -no-reboot -nodefaults -serial "file:$SHARE/console.log" \
        -kernel "$g/vmlinuz" -initrd "$g/initramfs.cpio.gz" \
        -append "console=ttyS0 panic=-1 quiet rxe.ip=$GUEST_IP/24 rxe.mtu=$mtu" \
        -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=$GUEST_MAC,romfile=" \
        -fsdev "local,id=fs0,path=$SHARE,security_model=none" \
        -device "virtio-9p-pci,fsdev=fs0,mount_tag=share" \
        >"$LOGS/qemu.log" 2>&1 &
    QEMU_PID=$!
}
guest_ready() {
    local t=${1:-120} i=0
    while [ ! -f "$SHARE/ready" ]; do
        kill -0 "$QEMU_PID" 2>/dev/null || { echo "qemu exited" >&2; return 1; }
        sleep 0.2; i=$((i+1))
        if [ $i -ge $((t*5)) ]; then echo "guest not ready after ${t}s" >&2; return 1; fi
    done
    return 0
}
gjob() {
    local j=$1; shift
    rm -f "$SHARE/out/$j.rc" "$SHARE/out/$j.log"
    printf '%s\n' "$*" >"$SHARE/.$j.tmp"
    mv "$SHARE/.$j.tmp" "$SHARE/jobs/$j.sh"
}
gwait() {
    local j=$1 t=${2:-120} i=0
    while [ ! -f "$SHARE/out/$j.rc" ]; do
        sleep 0.1; i=$((i+1))
        if [ $i -ge $((t*10)) ]; then
            echo "job $j timed out after ${t}s" >&2; cat "$SHARE/out/$j.log" 2>/dev/null; return 124
        fi
        if [ -n "${QEMU_PID:-}" ] && ! kill -0 "$QEMU_PID" 2>/dev/null; then
            echo "job $j: the guest is gone" >&2; cat "$SHARE/out/$j.log" 2>/dev/null; return 125
        fi
    done
    cat "$SHARE/out/$j.log"
    return "$(cat "$SHARE/out/$j.rc")"
}
grun() { local j=$1 t=$2; shift 2; gjob "$j" "$*"; gwait "$j" "$t"; }
gpoweroff() { [ -d "$SHARE/jobs" ] && { printf 'x\n' >"$SHARE/.poweroff.tmp"; mv "$SHARE/.poweroff.tmp" "$SHARE/jobs/poweroff.sh"; }; }
