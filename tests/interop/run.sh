#!/bin/bash
# tests/interop/run.sh - rxe-rs against the Linux kernel's rdma_rxe, on the wire.
#
# Boots ONE qemu guest (TCG) running a stock Debian kernel with rdma_rxe, on a
# tap in a private network namespace, and runs every scenario between the
# guest's rxe0 (10.99.0.11) and rxe-rs on the host end of the bridge
# (10.99.0.1, inside the namespace):
#
#   * pingpong: rdma-core's ibv_{rc,uc,ud,srq}_pingpong in the guest against
#     `rxe pingpong --mode rc|uc|ud|srq`, both directions, several sizes, path
#     MTU 1024 on a 1500-byte link, then MTU 4096 on a 9000-byte link;
#   * ops: guest/rxe_peer.c against peer/ (rxe-verbs): SEND/WRITE with
#     immediate, 64 KiB SEND/WRITE/READ, atomics, RNR NAK + retry, NAK for a
#     bad rkey, NAK for a SEND longer than the receive; both directions;
#   * loss: the same programs moving 8 x 64 KiB SENDs, WRITEs and READs while
#     nftables on the bridge drops a few RoCE frames; plus rc pingpong;
#   * icrc self-test: a deliberately corrupted packet must be caught;
#   * drop-in (di-*): Debian's unmodified ibv_*_pingpong and perftest on the
#     host too, over rxe-rs's libibverbs.so.1 (`rxe exec`), against the same
#     binaries in the guest, both directions.
#
# Every scenario is captured on the tap and decoded by `rxe dump --check`
# (every ICRC must be good), and the guest's rxe hw_counters and kernel log
# are compared before/after it. Results are printed as they come and as a
# table at the end; captures and logs stay in $RXE_INTEROP_WORK/runs/<time>.
#
# Needs root (network namespace, tap, apt-get), /dev/net/tun and qemu
# (installed with apt-get when missing). Exit status: 0 all passed,
# 1 a scenario failed, 2 this machine cannot run the suite.
#
# Env: RXE_INTEROP_WORK   work dir (default /var/tmp/rxe-rs-interop): guest
#                         kernel+initramfs (built once), runs/<time>/{pcaps,logs}
#      RXE_INTEROP_ONLY   only scenarios whose id matches this extended regex
#      RXE_INTEROP_NO_APT=1  do not apt-get (fail if something is missing)
#      RXE_INTEROP_KEEP_RUNS  how many old run folders to keep (default 5)
#      RXE_INTEROP_BUDGET  seconds after which no new scenario starts (1200)
#      RXE_INTEROP_REPEAT N  run each scenario N times (the repeats as <id>-r2, <id>-r3...;
#                         with RXE_INTEROP_ONLY, to chase a scenario that fails now and then)
#      RXE_INTEROP_WEDGE  id regex: take the guest's eth0 down before those scenarios, to test
#                         the harness's recovery from a dead guest NIC (a reboot and a second try)
#      TAP_QLEN           the tap's queue length (10000, see below)
#      RXE_INTEROP_HOLD=1 boot the guest, print how to use it by hand, wait for Enter
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${RXE_INTEROP_WORK:-/var/tmp/rxe-rs-interop}
export RXE_INTEROP_WORK=$WORK
T_START=$(date +%s)
OUT="$WORK/runs/$(date +%Y%m%d-%H%M%S)"
PCAPS="$OUT/pcaps"
LOGS="$OUT/logs"
SHARE="$OUT/share"
ONLY=${RXE_INTEROP_ONLY:-}
REPEAT=${RXE_INTEROP_REPEAT:-1}
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "RXE_INTEROP_REPEAT=$REPEAT: a count of runs, at least 1" >&2; exit 2; }
BUDGET=${RXE_INTEROP_BUDGET:-1200}     # seconds; scenarios not started by then fail
WEDGE=${RXE_INTEROP_WEDGE:-}           # id regex: take the guest's eth0 down first (tests guest_nic_dead/guest_reboot)
source "$HERE/lib.sh"
# The tap's queue stands for the wire in front of a NIC that TCG emulates
# slowly. rxe-rs sends a whole message unpaced (1024 frames for 1 MiB at MTU
# 1024); with the default 1000-frame queue the tail is dropped and the run
# turns into retransmission rounds (see docs/interop.md). 10000 keeps the
# loss-free scenarios loss-free; the loss scenarios drop frames on purpose.
export TAP_QLEN=${TAP_QLEN:-10000}

# our side is always the rxe-rs soft stack, never a native device libibverbs finds
export RXE_PROVIDER=soft
RXE="$ROOT/target/release/rxe"
BX="$ROOT/target/release/examples/backend_exchange"
PEER="$ROOT/target/release/rxe-interop-peer"
QEMU_PID="" TCPDUMP_PID="" HOST_PID=""

say() { printf '%s\n' "$*"; }
cannot() { say "interop: CANNOT RUN: $*" >&2; say "interop: (set RXE_SKIP_INTEROP=1 to make .ci/run skip this suite)" >&2; exit 2; }
elapsed() { echo $(( $(date +%s) - T_START )); }

cleanup() {
    set +e
    [ -n "$HOST_PID" ] && kill "$HOST_PID" 2>/dev/null
    [ -n "$TCPDUMP_PID" ] && kill "$TCPDUMP_PID" 2>/dev/null
    if [ -n "$QEMU_PID" ]; then
        gpoweroff 2>/dev/null
        for _ in $(seq 30); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
        kill "$QEMU_PID" 2>/dev/null
        wait "$QEMU_PID" 2>/dev/null
    fi
    net_down
}
trap cleanup EXIT
trap 'say "interop: interrupted"; exit 130' INT TERM

# ---- 0. can this machine run it? -------------------------------------------------
[ "$(id -u)" = 0 ] || cannot "must run as root (network namespace, tap device, apt-get)"
[ -c /dev/net/tun ] || cannot "/dev/net/tun is missing (no tap devices)"

mkdir -p "$WORK" || cannot "cannot create $WORK"
PKGS="qemu-system-x86 rdma-core libibverbs1 ibverbs-providers ibverbs-utils perftest rdmacm-utils
      iproute2 busybox-static kmod tcpdump cpio gzip nftables gcc libc6-dev libibverbs-dev python3
      iputils-ping"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    [ -n "${RXE_INTEROP_NO_APT:-}" ] && cannot "missing packages:$missing"
    say "interop: apt-get install$missing"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing; } \
        >"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log" >&2; cannot "apt-get install failed (log: $WORK/apt.log)"; }
fi
# tshark is optional (handy for reading the captures by hand)
dpkg -s tshark >/dev/null 2>&1 || { [ -z "${RXE_INTEROP_NO_APT:-}" ] &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tshark >/dev/null 2>&1; } || true
# (the drop-in scenarios run Debian's ibverbs-utils and perftest on the host too)
for c in qemu-system-x86_64 tcpdump nft ip gcc ibv_rc_pingpong ib_write_bw ping; do
    command -v "$c" >/dev/null || cannot "$c is not installed"
done

# one run at a time per work dir (the guest build and the run folders are shared)
exec 9>"$WORK/.lock"
flock -w 1200 9 || cannot "another interop run holds $WORK/.lock"
mkdir -p "$PCAPS" "$LOGS" "$SHARE"
# keep the last few runs only: newest first by time (fuzz_kernel.sh's
# standalone runs are named fuzz-<time> and sort after every <time> by
# name, which once made this delete the run just created), never this one
ls -1dt "$WORK"/runs/*/ 2>/dev/null | grep -vxF "$OUT/" | tail -n +"${RXE_INTEROP_KEEP_RUNS:-5}" | xargs -r rm -rf

# ---- 1. build: rxe, the Rust peer, the guest ----------------------------------------
say "== build ($(elapsed)s)"
# (--lib: without it the target filters skip rxe-ibverbs, the drop-in
# libibverbs.so that `rxe exec` runs Debian's programs on, a cdylib)
( cd "$ROOT" && cargo build --release -q -p rxe-verbs -p rxe-ibverbs -p rxe-devview -p rxe-tool --lib --bins --example backend_exchange ) >"$LOGS/build-rxe.log" 2>&1 ||
    { cat "$LOGS/build-rxe.log"; say "interop: building rxe failed"; exit 1; }
[ -f "$ROOT/target/release/libibverbs.so" ] || { say "interop: the build left no target/release/libibverbs.so (rxe-ibverbs)"; exit 1; }
# the peer is its own workspace; share the workspace's lock file and target dir
cp "$ROOT/Cargo.lock" "$HERE/peer/Cargo.lock"
CARGO_TARGET_DIR="$ROOT/target" cargo build --release -q --manifest-path "$HERE/peer/Cargo.toml" \
    >"$LOGS/build-peer.log" 2>&1 || { cat "$LOGS/build-peer.log"; say "interop: building the peer failed"; exit 1; }
"$HERE/build-guest.sh" >"$LOGS/build-guest.log" 2>&1 ||
    { tail -30 "$LOGS/build-guest.log"; say "interop: building the guest failed"; exit 1; }
tail -1 "$LOGS/build-guest.log"

# ---- 2. network namespace and the guest --------------------------------------------
say "== boot ($(elapsed)s)"
net_down
net_up 1500 2>"$LOGS/netns.err" || { cat "$LOGS/netns.err" >&2; cannot "cannot create the network namespace/bridge/tap (need CAP_NET_ADMIN and CAP_SYS_ADMIN)"; }
t0=$(date +%s)
guest_boot
guest_ready 180 || { tail -20 "$SHARE/console.log" 2>/dev/null; tail "$LOGS/qemu.log"; say "interop: the guest did not come up"; exit 1; }
GIDX=$(sed -n 's/^gid_index=//p' "$SHARE/ready")
# the native-backend proof runs this binary in the guest (it dlopen()s the
# guest's libibverbs.so.1; its other libraries are in the initramfs)
cp "$BX" "$SHARE/backend_exchange"
cp "$RXE" "$SHARE/rxe"
KVER=$(sed -n 's/^kernel=//p' "$SHARE/ready")
[ -n "$GIDX" ] || { cat "$SHARE/console.log"; say "interop: rxe0 has no IPv4 GID"; exit 1; }
say "guest up in $(( $(date +%s) - t0 ))s: kernel $KVER, rxe0 on 10.99.0.11, IPv4 GID index $GIDX"
grun devinfo 60 'ibv_devinfo -d rxe0 -v; cat /sys/class/infiniband/rxe0/ports/1/gids/*' >"$LOGS/guest-devinfo.txt" 2>&1
grep -E 'active_mtu|fw_ver|state:' "$LOGS/guest-devinfo.txt" | sed 's/^[[:space:]]*/  guest: /' | head -5

if [ -n "${RXE_INTEROP_HOLD:-}" ]; then
    cat <<EOF
The guest is up; nothing else runs. In another shell (as root):
  export RXE_NETNS=$NS SHARE=$SHARE LOGS=$LOGS RXE_PROVIDER=soft; source $HERE/lib.sh
  grun myjob 60 'ibv_devinfo -v'                       # a command in the guest
  gjob srv 'ibv_rc_pingpong -d rxe0 -g $GIDX -s 4096 -n 5'; nsx $RXE pingpong -d $HOST_IP -s 4096 -n 5 $GUEST_IP; gwait srv
  nsx tcpdump -U --immediate-mode -i $TAP -w /tmp/x.pcap 'udp port 4791'   # then: $RXE dump /tmp/x.pcap
Press Enter (or Ctrl-C) here to power the guest off and remove the namespace.
EOF
    read -r _ || sleep infinity
    exit 0
fi

# ---- 3. the scenario runner ----------------------------------------------------------
# Known issues: scenarios (id regex) that fail because of a reported bug. They
# still run; a failure is shown as KNOWN and does not fail the suite, a pass
# says that the entry can go. Remove an entry when its bug is fixed.
declare -A KNOWN=()
known_issue() { local k; for k in "${!KNOWN[@]}"; do [[ $1 =~ $k ]] && { echo "${KNOWN[$k]}"; return 0; }; done; return 1; }

R_ID=() R_LABEL=() R_VERDICT=() R_SECS=() R_NOTE=()
FAILED=0 KNOWN_SEEN=0

# Counters of the guest's rxe that must not grow in a clean exchange (unless
# a scenario allows them) ...
WATCH="rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err link_downed"
# ... and counters that show retransmissions. These are reported, not failed
# on: under TCG the guest can stall for longer than the ACK timeout (14 =
# 67 ms) with nothing lost, and then either side resends in good faith
# (docs/interop.md, "Retransmissions under emulation"). Losses that matter show up
# as wrong data, failed completions or packets the guest did not accept.
RETX="out_of_seq_request duplicate_request rcvd_seq_err completer_retry_err"

# guest job: counters and kernel log before/after the command. With PORT and
# MARKER, MARKER (a file in /share) appears once something in the guest
# listens on PORT, on TCP or through rdma_cm (a cm_id in state LISTEN, which
# `rdma resource show cm_id` lists), or the command has ended: a client that
# does not retry its connect (Debian's programs on the host) starts only then.
guest_script() {  # CMD TIMEOUT [PORT MARKER]
    cat <<EOF
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
snap() { for f in \$C/*; do echo "\${f##*/} \$(cat \$f)"; done
         echo "dmesg_bad_icrc \$(dmesg | grep -c 'bad ICRC')"; echo "dmesg_rxe \$(dmesg | grep -ci 'rxe')"; }
snap >/tmp/c0
EOF
    if [ -n "${4:-}" ]; then
        cat <<EOF
timeout $2 $1 &
p=\$!
for i in \$(seq 1200); do
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '\$4 == "0A" && \$2 ~ /:$(printf '%04X' "$3")\$/ { f = 1 } END { exit !f }' && break
    rdma resource show cm_id src-port $3 2>/dev/null | grep -q 'state LISTEN' && break
    kill -0 \$p 2>/dev/null || break
    sleep 0.05
done
touch $4
wait \$p
rc=\$?
EOF
    else
        cat <<EOF
timeout $2 $1
rc=\$?
EOF
    fi
    cat <<EOF
sleep 0.3
snap >/tmp/c1
awk 'NR==FNR { a[\$1] = \$2; next } { print "GUESTCNT", \$1, a[\$1], \$2 }' /tmp/c0 /tmp/c1
echo "GUEST_EXIT \$rc"
exit \$rc
EOF
}

# frames the tap could not hand to the guest (its queue overflowed)
tap_drops() { nsx cat "/sys/class/net/$TAP/statistics/tx_dropped" 2>/dev/null || echo 0; }

wait_listen() {  # PORT: until something listens on it in the netns (10 s)
    for _ in $(seq 100); do
        [ -n "$(nsx ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
        kill -0 "$HOST_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# scenario ID LABEL SERVER GUEST_CMD HOST_ARGS...
#   SERVER: guest|host (who listens on TCP); HOST_ARGS: the host command
# Options (globals, reset after each scenario):
#   ALLOW     guest counters allowed to grow ("any" for all)
#   EXPECT    lines "SRC_IP|regex": the capture must hold such a packet from SRC
#   ONLY_OPS  regex: every packet's opcode (rxe dump's name) must match it
#   ONE_WAY=1 traffic in one direction is enough (UC/UD bandwidth tests)
#   MAXLEN    largest RoCE payload expected (path MTU), MAXLEN_EQ=1: must be reached
#   HOSTCHK   function run on success with the host log as $1 (adds to NOTE/fail)
#   GTIMEOUT  guest command timeout (90)
#   HTIMEOUT  host command timeout (120)
#   CM_WAIT   seconds to give an rdma_cm server (which listens on no TCP
#             port) before its client starts
#   GLISTEN=1 guest server: start the host client only once the guest
#             listens on $PORT (Debian's clients do not retry their connect)
#   CM_LISTEN PORT: the same for a guest server that listens through
#             rdma_cm (rping 7174, ucmatose 7471, udaddy 7174, perftest -R
#             18515); with CM_WAIT too, the client starts CM_WAIT seconds
#             after the listener shows (perftest -R's server listens again
#             for its second connection, and a client at once is too soon)
#   RETRY_IF  extended regex: if the scenario fails and a log matches it
#             (a race inside the programs themselves), run it once more
#   RETRIES   how many times RETRY_IF may run it again (1)
# scenario ID LABEL SERVER GCMD HOSTCMD...: one scenario, RXE_INTEROP_REPEAT
# times (the repeats as ID-r2, ID-r3..., with the same options and loss rules)
scenario() {
    local k opts
    if [ "$REPEAT" = 1 ] || { [ -n "$ONLY" ] && ! [[ $1 =~ $ONLY ]]; }; then
        scenario_once "$@"
        return $?
    fi
    # the options, which each run resets when it ends (declared again
    # inside this function they are its locals, which scenario_once sees)
    opts=$(declare -p ALLOW EXPECT ONLY_OPS ONE_WAY MAXLEN MAXLEN_EQ HOSTCHK GTIMEOUT HTIMEOUT GLISTEN CM_LISTEN EXTRA_NOTE CM_WAIT RETRY_IF RETRIES)
    scenario_once "$@"
    for k in $(seq 2 "$REPEAT"); do
        eval "$opts"
        nsx nft list table bridge rxeloss >/dev/null 2>&1 && { lossy_off; lossy_on "${LOSSY[@]}"; }
        scenario_once "$1-r$k" "${@:2}"
    done
}

scenario_once() {
    local id=$1 label=$2 server=$3 gcmd=$4; shift 4
    local pcap="$PCAPS/$id.pcap" hlog="$LOGS/$id.host.log" glog="$LOGS/$id.guest.log"
    local t0 rc=0 hrc grc why="" note=""
    if [ -n "$ONLY" ] && ! [[ $id =~ $ONLY ]]; then reset_opts; return 0; fi
    local skip=""
    [ "$(elapsed)" -gt "$BUDGET" ] && skip="the time budget of ${BUDGET}s is used up"
    kill -0 "$QEMU_PID" 2>/dev/null || skip="the guest is not running (see $SHARE/console.log)"
    if [ -n "$skip" ]; then
        R_ID+=("$id") R_LABEL+=("$label") R_VERDICT+=(FAIL) R_SECS+=(0) R_NOTE+=("not run: $skip")
        FAILED=$((FAILED+1)); say "FAIL $label  (not run: $skip)"; reset_opts; return 0
    fi
    if [ -n "${WEDGE:-}" ] && [ -z "${REBOOTED:-}" ] && [[ $id =~ $WEDGE ]]; then
        # the harness's own test of its recovery: a NIC that sends nothing
        grun "wedge-$id" 20 'ip link set eth0 down' >/dev/null 2>&1
    fi
    local tapdrop0
    tapdrop0=$(tap_drops)
    t0=$(date +%s.%N)
    # immediate mode uses TPACKET_V2, whose ring slots are snaplen-sized: a small
    # snaplen (frames are at most 9018 bytes) and a 64 MiB ring (-B, KiB) keep
    # bursts of hundreds of frames from being dropped
    ip netns exec "$NS" tcpdump -U --immediate-mode -s 9216 -B 65536 -i "$TAP" -w "$pcap" 'udp port 4791' 2>"$LOGS/$id.tcpdump.err" &
    TCPDUMP_PID=$!
    for _ in $(seq 50); do grep -q listening "$LOGS/$id.tcpdump.err" 2>/dev/null && break; sleep 0.1; done

    if [ "$server" = guest ]; then
        if [ -n "${GLISTEN:-}${CM_LISTEN:-}" ]; then
            local mark="out/$id.listening"
            rm -f "$SHARE/$mark"
            gjob "$id" "$(guest_script "$gcmd" "${GTIMEOUT:-90}" "${CM_LISTEN:-$PORT}" "/share/$mark")"
            for _ in $(seq 600); do [ -e "$SHARE/$mark" ] && break; sleep 0.05; done
            # (with CM_LISTEN, CM_WAIT is the time the server gets after
            # its listener shows)
            [ -n "${CM_LISTEN:-}" ] && [ -n "${CM_WAIT:-}" ] && sleep "$CM_WAIT"
        else
            gjob "$id" "$(guest_script "$gcmd" "${GTIMEOUT:-90}")"
            sleep "${CM_WAIT:-0.3}"
        fi
        timeout "${HTIMEOUT:-120}" ip netns exec "$NS" "$@" >"$hlog" 2>&1; hrc=$?
        if [ "$hrc" != 0 ]; then
            # the client failed: a server still waiting for it would only
            # run into its timeout
            for _ in $(seq 50); do [ -e "$SHARE/out/$id.rc" ] && break; sleep 0.1; done
            [ -e "$SHARE/out/$id.rc" ] || gkill "kill0-$id"
        fi
        gwait "$id" 130 >"$glog" 2>&1; grc=$?
    else
        timeout "${HTIMEOUT:-120}" ip netns exec "$NS" "$@" >"$hlog" 2>&1 &
        HOST_PID=$!
        if [ -n "${CM_WAIT:-}" ]; then
            # an rdma_cm server listens with the CM, on no TCP port
            sleep "$CM_WAIT"
            gjob "$id" "$(guest_script "$gcmd" "${GTIMEOUT:-90}")"
            gwait "$id" 130 >"$glog" 2>&1; grc=$?
        elif wait_listen "$PORT"; then
            gjob "$id" "$(guest_script "$gcmd" "${GTIMEOUT:-90}")"
            gwait "$id" 130 >"$glog" 2>&1; grc=$?
        else
            grc=99; why="host server never listened on $PORT"
        fi
        wait "$HOST_PID"; hrc=$?
        HOST_PID=""
    fi
    sleep 0.3
    kill "$TCPDUMP_PID" 2>/dev/null; wait "$TCPDUMP_PID" 2>/dev/null; TCPDUMP_PID=""

    [ "$hrc" = 0 ] || { rc=1; why="$why host exit $hrc: $(grep -E 'RESULT .* FAIL|rror|Failed|failed|invalid data|^rxe-ibverbs:' "$hlog" | head -3 | tr '\n' ' ')"; }
    [ "$grc" = 0 ] || { rc=1; why="$why guest exit $grc: $(grep -E 'RESULT .* FAIL|rror|Failed|failed|invalid data|timed out' "$glog" | head -3 | tr '\n' ' ')"; }
    if grep -q "invalid data" "$hlog" "$glog"; then rc=1; why="$why pingpong --chk found invalid data"; fi

    # the capture: every ICRC good, nothing malformed, traffic both ways
    "$RXE" dump "$pcap" >"$PCAPS/$id.txt" 2>"$PCAPS/$id.summary"
    "$RXE" dump --check -q "$pcap" >"$PCAPS/$id.check" 2>&1; local drc=$?
    local npk nout nin
    npk=$(sed -n 's/.*: \([0-9]*\) RoCE packets.*/\1/p' "$PCAPS/$id.summary")
    nout=$(grep -cE "^ *[0-9]+ +[0-9.]+ +$HOST_IP +→" "$PCAPS/$id.txt")
    nin=$(grep -cE "^ *[0-9]+ +[0-9.]+ +$GUEST_IP +→" "$PCAPS/$id.txt")
    local lost
    lost=$(sed -n 's/^\([0-9]*\) packets dropped by kernel.*/\1/p' "$LOGS/$id.tcpdump.err")
    if [ "${lost:-x}" != 0 ]; then rc=1; why="$why tcpdump lost ${lost:-?} packets: the capture is incomplete"; fi
    if [ "$drc" != 0 ]; then rc=1; why="$why rxe dump --check: $(head -3 "$PCAPS/$id.check" | tr '\n' ' ')"; fi
    if [ "${npk:-0}" = 0 ] || { [ -z "${ONE_WAY:-}" ] && { [ "$nout" = 0 ] || [ "$nin" = 0 ]; }; }; then
        rc=1; why="$why capture: ${npk:-0} packets ($nout from rxe-rs, $nin from the kernel)"
    fi
    note="$nout+$nin pkts, ICRC ok"
    local tapdrop=$(( $(tap_drops) - tapdrop0 ))
    [ "$tapdrop" = 0 ] || note="$note; the tap queue dropped $tapdrop frames to the guest"
    local e src re
    while IFS= read -r e; do
        [ -z "$e" ] && continue
        src=${e%%|*}; re=${e#*|}
        [ "$(grep -E "^ *[0-9]+ +[0-9.]+ +${src//./\\.} +→" "$PCAPS/$id.txt" | grep -cE "$re")" -gt 0 ] ||
            { rc=1; why="$why no packet /$re/ from $src in the capture"; }
    done <<<"${EXPECT:-}"
    if [ -n "${ONLY_OPS:-}" ]; then
        local stray
        stray=$(grep -E "^ *[0-9]+ +[0-9.]+ +[0-9.]+ +→" "$PCAPS/$id.txt" | awk '{print $6}' | grep -vxE "$ONLY_OPS" | sort | uniq -c | tr -s ' \n' ' ')
        [ -z "$stray" ] || { rc=1; why="$why unexpected packets in the capture:$stray"; }
    fi
    if [ -n "${MAXLEN:-}" ]; then
        local ml
        ml=$(grep -oE ' len=[0-9]+' "$PCAPS/$id.txt" | cut -d= -f2 | sort -n | tail -1)
        if [ "${ml:-0}" -gt "$MAXLEN" ]; then rc=1; why="$why payload of $ml bytes > path MTU $MAXLEN"; fi
        if [ -n "${MAXLEN_EQ:-}" ] && [ "${ml:-0}" != "$MAXLEN" ]; then rc=1; why="$why largest payload $ml, expected $MAXLEN"; fi
    fi

    # loss scenarios: the drops must have happened
    if nsx nft list table bridge rxeloss >/dev/null 2>&1; then
        local dropped
        dropped=$(lossy_count)
        note="$note; nft dropped $dropped frames"
        [ "$dropped" -gt 0 ] || { rc=1; why="$why nftables dropped nothing"; }
    fi

    # the guest's counters and kernel log
    local grew="" watched="" name before after
    while read -r _ name before after; do
        [ "$before" = "$after" ] && continue
        case $name in
        dmesg_bad_icrc) rc=1; why="$why guest kernel: $((after-before)) 'bad ICRC' messages" ;;
        dmesg_rxe) grew="$grew $name+$((after-before))" ;;
        *)  grew="$grew $name+$((after-before))"
            if [[ " $WATCH " == *" $name "* ]] && [ "${ALLOW:-}" != any ] && [[ " ${ALLOW:-} " != *" $name "* ]]; then
                rc=1; why="$why guest counter $name grew by $((after-before))"
            elif [[ " $WATCH $RETX " == *" $name "* ]]; then
                watched="$watched $name+$((after-before))"
            fi ;;
        esac
    done < <(grep '^GUESTCNT ' "$glog")
    grep -q '^GUESTCNT ' "$glog" || { rc=1; why="$why no guest counters"; }
    # The kernel counts rcvd_pkts only for packets that passed its header and
    # ICRC checks (rxe_rcv), and sent_pkts for every packet it sent: they must
    # match what the capture on the tap saw (minus frames the tap dropped).
    local grcvd gsent
    grcvd=$(awk '$2 == "rcvd_pkts" { print $4 - $3 }' "$glog")
    gsent=$(awk '$2 == "sent_pkts" { print $4 - $3 }' "$glog")
    # (tx_dropped counts every frame the tap dropped, ARP included: with drops
    # the count is a range)
    # ACKs we sent after the guest's last packet may reach a QP the guest
    # program has already destroyed at exit; the kernel drops those before
    # counting them. They are the only packets allowed to go uncounted. The
    # guest program can also exit before its last SENDs are acknowledged
    # (ibv_srq_pingpong's client posts more SENDs than it waits for), but
    # only after the last data packet we sent it: so when we sent data, the
    # ACKs after our last data packet may go uncounted too.
    local ntrail nlate
    ntrail=$(awk -v h="$HOST_IP" '$3 == h && $6 ~ /ACKNOWLEDGE/ { n++; next } $3 ~ /^[0-9]/ && $4 == "→" { n = 0 } END { print n + 0 }' "$PCAPS/$id.txt")
    nlate=$(awk -v h="$HOST_IP" '$3 == h && $4 == "→" { if ($6 ~ /ACKNOWLEDGE/) n++; else { n = 0; data = 1 } } END { print data ? n + 0 : 0 }' "$PCAPS/$id.txt")
    [ "$nlate" -gt "$ntrail" ] && ntrail=$nlate
    # The guest's own packets to a multicast group come back to it (IP
    # multicast loopback) and count as received when it is in the group.
    local nloop
    nloop=$(awk -v g="$GUEST_IP" '$3 == g && $4 == "→" && $5 ~ /^2(2[4-9]|3[0-9])\./ { n++ } END { print n + 0 }' "$PCAPS/$id.txt")
    note="$note, guest accepted ${grcvd:-?}/$((nout - tapdrop))"
    [ "$nloop" = 0 ] || note="$note (+ its own $nloop to the group)"
    if ! [[ ${grcvd:-x} =~ ^[0-9]+$ ]] || [ "$grcvd" -lt "$((nout - tapdrop - ntrail))" ] || [ "$grcvd" -gt "$((nout + nloop))" ]; then
        rc=1; why="$why the guest accepted ${grcvd:-?} of the $((nout - tapdrop)) packets rxe-rs sent it (bad ICRC or header?)"
    fi
    if [ "${gsent:-x}" != "$nin" ]; then
        rc=1; why="$why the guest sent ${gsent:-?} packets, the capture holds $nin"
    fi
    echo "guest counters:$grew" >>"$glog"
    [ -n "$watched" ] && note="$note; guest counters:$watched"
    if [ "$rc" = 0 ] && [ -n "${HOSTCHK:-}" ]; then
        "$HOSTCHK" "$hlog" "$glog" || rc=1
    fi
    local secs
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    if [ "$rc" != 0 ] && [ -z "${REBOOTED:-}" ] && [ "$GUEST_BOOTS" -le "$MAX_REBOOTS" ] && guest_nic_dead; then
        # not the programs' fault: the emulated NIC stopped (see
        # guest_nic_dead). Once more on a freshly booted guest.
        say "RETRY $label  (${secs}s; the guest's NIC is dead: $NIC_WHY; rebooting the guest)"
        cp "$hlog" "$hlog.try1"; cp "$glog" "$glog.try1"; cp "$pcap" "$pcap.try1" 2>/dev/null
        if guest_reboot; then
            nsx nft list table bridge rxeloss >/dev/null 2>&1 && { lossy_off; lossy_on "${LOSSY[@]}"; }
            say "     guest up again (boot $GUEST_BOOTS); the first try's logs: *.try1, its console: $LOGS/console.boot$((GUEST_BOOTS - 1)).log"
            REBOOTED=1 EXTRA_NOTE="${EXTRA_NOTE:+$EXTRA_NOTE; }second try: the guest's NIC died during the first ($NIC_WHY) and the guest was rebooted"
            scenario_once "$id" "$label" "$server" "$gcmd" "$@"
            return $?
        fi
        why="$why; the guest's NIC died ($NIC_WHY) and the guest did not come back"
    fi
    if [ "$rc" != 0 ] && [ -n "${RETRY_IF:-}" ] && grep -qE "$RETRY_IF" "$hlog" "$glog"; then
        # a race of the programs' own that the scenario names: once more
        # (RETRIES times at most), from scratch (try N's logs are kept as
        # *.tryN)
        local try=${TRY:-1}
        say "RETRY $label  (${secs}s; $(grep -hoE "$RETRY_IF" "$hlog" "$glog" | head -1))"
        gkill "kill-$id"
        cp "$hlog" "$hlog.try$try"; cp "$glog" "$glog.try$try"; cp "$pcap" "$pcap.try$try" 2>/dev/null
        # an rdma_cm server gets 5 s to listen this time (an emulated guest
        # on a busy host can take longer than CM_WAIT's usual second)
        [ -n "${CM_WAIT:-}" ] && CM_WAIT=5
        [ "$try" -ge "${RETRIES:-1}" ] && RETRY_IF=""
        TRY=$((try + 1))
        scenario_once "$id" "$label" "$server" "$gcmd" "$@"
        return $?
    fi
    local verdict=PASS known
    known=$(known_issue "$id")
    if [ "$rc" != 0 ]; then
        note="$why; the tap queue dropped $tapdrop frames"
        if [ -n "$known" ]; then verdict=KNOWN; note="$note [known issue: $known]"; KNOWN_SEEN=$((KNOWN_SEEN+1))
        else verdict=FAIL; FAILED=$((FAILED+1)); fi
    elif [ -n "$known" ]; then
        note="$note [listed as a known issue but passed: remove it from KNOWN in run.sh]"
    fi
    [ -n "${EXTRA_NOTE:-}" ] && note="$note; $EXTRA_NOTE"
    [ -n "${TRY:-}" ] && note="$note; try $TRY: the ones before lost the race named by RETRY_IF"
    R_ID+=("$id") R_LABEL+=("$label") R_VERDICT+=("$verdict") R_SECS+=("$secs") R_NOTE+=("$note")
    printf '%s %s  (%ss; %s)\n' "$verdict" "$label" "$secs" "$note"
    if [ "$verdict" != PASS ]; then
        say "     host log: $hlog"; say "     guest log: $glog"; say "     capture: $pcap"
        # a stuck program must not spoil the next scenario
        gkill "kill-$id"
    fi
    reset_opts
}
# The emulated NIC can stop sending for good (seen once in CI on 2026-11-29,
# half-way through a 64 KiB message of a loss scenario; qemu 7.2, TCG): the
# guest's kernel then logs "NETDEV WATCHDOG: eth0 (virtio_net): transmit
# queue 0 timed out" every 5 s, nothing it sends reaches the tap, and every
# later scenario would fail. A failed scenario asks whether that happened;
# if so the guest is booted again (about 10 s) and the scenario runs once
# more. The summary counts the reboots, so the suite does not hide them;
# after MAX_REBOOTS a dead NIC is no longer taken for bad luck.
GUEST_MTU=1500 GUEST_BOOTS=1 NIC_WHY="" MAX_REBOOTS=3
guest_nic_dead() {  # true (with NIC_WHY set) when the guest's NIC is hung
    if tr '\r' '\n' <"$SHARE/console.log" 2>/dev/null | grep -q 'NETDEV WATCHDOG'; then
        NIC_WHY="'NETDEV WATCHDOG ... transmit queue timed out' in its console log"; return 0
    fi
    # (the loss scenarios' nftables rules drop only UDP port 4791; without
    # ping, checked for at the start, every guest would look dead)
    nsx ping -c 3 -i 0.5 -W 2 -q "$GUEST_IP" >/dev/null 2>&1 && return 1
    NIC_WHY="it answers no ping"; return 0
}
guest_reboot() {  # power the guest off (kill qemu if it does not stop) and boot it again at GUEST_MTU
    cp "$SHARE/console.log" "$LOGS/console.boot$GUEST_BOOTS.log" 2>/dev/null
    GUEST_BOOTS=$((GUEST_BOOTS + 1))
    gpoweroff
    for _ in $(seq 50); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$QEMU_PID" 2>/dev/null; wait "$QEMU_PID" 2>/dev/null
    guest_boot "$GUEST_MTU"
    guest_ready 180 || { say "     the guest did not come back: $(tail -3 "$SHARE/console.log" | tr '\r\n' '  ')"; return 1; }
    cp "$BX" "$SHARE/backend_exchange"; cp "$RXE" "$SHARE/rxe"
    # the scenarios' commands were written with the first boot's GID index
    local g
    g=$(sed -n 's/^gid_index=//p' "$SHARE/ready")
    [ "$g" = "$GIDX" ] || { say "     the rebooted guest's IPv4 GID index is $g, not $GIDX"; return 1; }
}
# end every test program in the guest
gkill() {  # JOB
    grun "$1" 20 'killall -q ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong rxe_peer ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat backend_exchange rxe rping ucmatose udaddy mckey ucx_perftest; true' >/dev/null 2>&1
}
reset_opts() { ALLOW="" EXPECT="" ONLY_OPS="" ONE_WAY="" MAXLEN="" MAXLEN_EQ="" HOSTCHK="" GTIMEOUT="" HTIMEOUT="" GLISTEN="" CM_LISTEN="" EXTRA_NOTE="" CM_WAIT="" RETRY_IF="" RETRIES="" TRY="" REBOOTED=""; }
reset_opts

# The drop-in (DROPIN=1 in front of pp_pair/pt_pair): on the host the same
# Debian program as in the guest, unmodified, over rxe-rs's libibverbs.so.1
# (`rxe exec` puts it first in LD_LIBRARY_PATH and names 10.99.0.1 rxe0,
# whose GID index 0 is ::ffff:10.99.0.1). Ids di-pp-... and di-pt-...; -ks:
# the kernel's program is the server, -rs: the one on rxe-rs is.
# RXE_DEBUG=1: the library says on stderr (the host log) why a verb failed
DROPIN_EXEC=(env RXE_DEBUG=1 "$RXE" exec -d "$HOST_IP" --)
# Debian's clients do not retry their connect, and a stuck program would
# otherwise hold the suite for 90-120 s
dropin_opts() { GLISTEN=1 HTIMEOUT=60 GTIMEOUT=60 HOSTCHK=${1:-check_dropin_log}; }
# what the library said (RXE_DEBUG=1) in a passing scenario goes into the note
check_dropin_log() {  # host log
    local n
    n=$(grep -c '^rxe-ibverbs:' "$1")
    [ "$n" = 0 ] || EXTRA_NOTE="${EXTRA_NOTE:+$EXTRA_NOTE; }the drop-in said ($n lines): $(grep -m1 '^rxe-ibverbs:' "$1")"
    return 0
}

# rxe-rs side of a pingpong; our device's active MTU is 4096 (see docs/interop.md)
pp_pair() {  # MODE SIZE MTU ITERS
    local mode=$1 size=$2 mtu=$3 n=$4 mflag="-m $3" tag
    [ "$mode" = ud ] && mflag=""          # ibv_ud_pingpong has no -m: it uses the port's active MTU
    tag="${mode}-s${size}-m${mtu}"
    PORT=18515
    local gprog="ibv_${mode}_pingpong -d rxe0 -g $GIDX -s $size $mflag -n $n -c"
    if [ -n "${DROPIN:-}" ]; then
        # shellcheck disable=SC2086  # $mflag is empty or two words
        local hprog=("${DROPIN_EXEC[@]}" "ibv_${mode}_pingpong" -d rxe0 -g 0 -s "$size" $mflag -n "$n" -c)
        MAXLEN=$mtu; [ "$size" -ge "$mtu" ] && MAXLEN_EQ=1
        dropin_opts
        scenario "di-pp-$tag-ks" "drop-in: ${mode}_pingpong kernel-server→drop-in-client size=$size mtu=$mtu" guest \
            "$gprog" "${hprog[@]}" "$GUEST_IP"
        MAXLEN=$mtu; [ "$size" -ge "$mtu" ] && MAXLEN_EQ=1
        dropin_opts
        scenario "di-pp-$tag-rs" "drop-in: ${mode}_pingpong drop-in-server→kernel-client size=$size mtu=$mtu" host \
            "$gprog $HOST_IP" "${hprog[@]}"
        return
    fi
    # kernel server, rxe-rs client
    MAXLEN=$mtu; [ "$size" -ge "$mtu" ] && MAXLEN_EQ=1
    scenario "pp-$tag-ks" "${mode}_pingpong kernel-server→rxe-rs-client size=$size mtu=$mtu" guest \
        "$gprog" \
        "$RXE" pingpong --mode "$mode" -d "$HOST_IP" -s "$size" -m "$mtu" -n "$n" -c --timeout 60 "$GUEST_IP"
    # rxe-rs server, kernel client
    MAXLEN=$mtu; [ "$size" -ge "$mtu" ] && MAXLEN_EQ=1
    scenario "pp-$tag-rs" "${mode}_pingpong rxe-rs-server→kernel-client size=$size mtu=$mtu" host \
        "$gprog $HOST_IP" \
        "$RXE" pingpong --mode "$mode" -d "$HOST_IP" -s "$size" -m "$mtu" -n "$n" -c --timeout 60
}

# perftest (ib_*_bw/_lat in the guest) against `rxe perf` (rxe-rs), both
# directions. perftest never checks data, so `rxe perf --dump-buffer` fills
# its buffer with random bytes and saves it before and after, and
# perf_check.py checks the capture against it (check_perf_data).
check_perf_data() {  # host log, guest log; uses $pcap/$id of the scenario
    local out drc flags=""
    [ "$PT_TEST" = write_lat ] && flags=--counter
    out=$(python3 "$HERE/perf_check.py" "$pcap" "$1" --host "$HOST_IP" --peer "$GUEST_IP" --mtu "$PT_MTU" $flags --selftest 2>&1)
    drc=$?
    printf '%s\n' "$out" >"$PCAPS/$id.data"
    EXTRA_NOTE=$(head -1 <<<"$out")
    [ "$drc" = 0 ] || { say "     perf_check.py: $out"; return 1; }
}
# perftest on both sides (the drop-in): neither checks data and there is no
# buffer to compare the capture with; both must at least have printed their
# result line (#bytes #iterations ...)
check_perf_report() {  # host log, guest log
    local f ok=0 row hrow=""
    for f in "$1" "$2"; do
        row=$(grep -m1 -E '^ *[0-9]+ +[0-9]+ +[0-9.]+ +' "$f") || { say "     no result line in $f"; ok=1; }
        [ "$f" = "$1" ] && hrow=$row
    done
    EXTRA_NOTE="host's result line:$(tr -s ' \t' ' ' <<<" $hrow")"
    check_dropin_log "$1"
    return $ok
}
# perftest's opcodes per test: what the requester sends, what the responder answers
pt_ops() {  # TEST SIZE MTU RC|UC|UD -> sets PT_REQ PT_RESP (regexes of rxe dump names)
    local t=$1 size=$2 mtu=$3 c=$4 multi=ONLY
    [ "$size" -gt "$mtu" ] && multi="FIRST|MIDDLE|LAST"
    [ "$size" -gt "$mtu" ] && [ "$size" -le $((2 * mtu)) ] && multi="FIRST|LAST"
    case $t in
    write_*) PT_REQ="${c}_RDMA_WRITE_($multi)" PT_RESP="RC_ACKNOWLEDGE" ;;
    send_*) PT_REQ="${c}_SEND_($multi)" PT_RESP="RC_ACKNOWLEDGE" ;;
    read_*) PT_REQ="RC_RDMA_READ_REQUEST" PT_RESP="RC_RDMA_READ_RESPONSE_($multi)" ;;
    atomic_*) PT_REQ="RC_(FETCH_ADD|COMPARE_SWAP)" PT_RESP="RC_ATOMIC_ACKNOWLEDGE" ;;
    esac
    [ "$c" = RC ] || PT_RESP=""   # UC and UD answer nothing
}
pt_pair() {  # TEST SIZE MTU ITERS [perftest flags...]
    local t=$1 size=$2 mtu=$3 n=$4; shift 4
    local flags=("$@") sflag=(-s "$size") tag ops
    case $t in atomic_*) sflag=() ;; esac     # atomics are 8 bytes, -s is refused
    local conn=RC
    case "${flags[*]}" in *"-c UC"*) conn=UC ;; *"-c UD"*) conn=UD ;; esac
    case "${flags[*]}" in
    *"-c UC"*|*"-c UD"*) tag="$t-$(tr 'A-Z' 'a-z' <<<"$conn")" ;;
    *FETCH_AND_ADD*) tag="$t-faa" ;;
    *CMP_AND_SWAP*) tag="$t-cas" ;;
    *) tag=$t ;;
    esac
    tag="$tag-s${size}-m${mtu}"
    PORT=18515 PT_TEST=$t PT_MTU=$mtu
    pt_ops "$t" "$size" "$mtu" "$conn"
    local common="-d rxe0 -x $GIDX -F -m $mtu ${sflag[*]} -n $n ${flags[*]}"
    local rs_args=(perf "$t" -d "$HOST_IP" -m "$mtu" "${sflag[@]}" -n "$n" "${flags[@]}" --timeout 60)
    local what="$t${flags:+ ${flags[*]}} size=$size mtu=$mtu n=$n"
    local dir req resp
    for dir in ks rs; do
        # the requester is perftest's client, except in the ping-pongs
        if [ "$dir" = ks ]; then req=$HOST_IP resp=$GUEST_IP; else req=$GUEST_IP resp=$HOST_IP; fi
        EXPECT="$req|$PT_REQ${PT_RESP:+
$resp|$PT_RESP}"
        case $t in write_lat|send_lat) EXPECT="$EXPECT
$resp|$PT_REQ${PT_RESP:+
$req|$PT_RESP}" ;; esac
        ONLY_OPS="$PT_REQ${PT_RESP:+|$PT_RESP}"
        # UC/UD bandwidth: nothing comes back
        case $conn-$t in RC-*|*_lat) ;; *) ONE_WAY=1 ;; esac
        # with loss, sequence NAKs (and ACKs of duplicates) come from either side
        [ -n "${PT_LOSS:-}" ] && ONLY_OPS="$ONLY_OPS|RC_ACKNOWLEDGE"
        MAXLEN=$mtu; [ "$size" -ge "$mtu" ] && MAXLEN_EQ=1
        HOSTCHK=check_perf_data
        local id="${PT_LOSS:+loss-}${PT_GUEST:+native-}pt-$tag-$dir" label="${PT_LOSS:+loss: }perftest $what"
        if [ -n "${DROPIN:-}" ]; then
            # perftest on both sides: the host's over the drop-in
            local hprog=("${DROPIN_EXEC[@]}" "ib_$t" -d rxe0 -x 0 -F -m "$mtu" "${sflag[@]}" -n "$n" "${flags[@]}")
            dropin_opts check_perf_report
            if [ "$dir" = ks ]; then
                scenario "di-$id" "drop-in: perftest $what kernel-server→drop-in-client" guest \
                    "ib_$t $common" "${hprog[@]}" "$GUEST_IP"
            else
                scenario "di-$id" "drop-in: perftest $what drop-in-server→kernel-client" host \
                    "ib_$t $common $HOST_IP" "${hprog[@]}"
            fi
            continue
        fi
        # PT_GUEST: another guest program with perftest's flags (rxe perf on
        # the native backend)
        local gprog="${PT_GUEST:-ib_$t}"
        [ -n "${PT_GUEST:-}" ] && label="rxe perf on the native backend (kernel rxe0) $what"
        # PT_LOSS="from guest|to guest": nftables drops those frames
        [ -n "${PT_LOSS:-}" ] && { lossy_on "${PT_LOSS%%|*}" "${PT_LOSS#*|}"; ALLOW=any; }
        if [ "$dir" = ks ]; then
            scenario "$id" "$label kernel-server→rxe-rs-client" guest \
                "$gprog $common" "$RXE" "${rs_args[@]}" --dump-buffer "$LOGS/$id.buf" "$GUEST_IP"
        else
            scenario "$id" "$label rxe-rs-server→kernel-client" host \
                "$gprog $common $HOST_IP" "$RXE" "${rs_args[@]}" --dump-buffer "$LOGS/$id.buf"
        fi
        [ -n "${PT_LOSS:-}" ] && lossy_off
    done
}

# peer/ (rxe-rs) against guest/rxe_peer.c (kernel)
check_peer_counters() {  # host log: our counters must show the losses
    local h=$1 line role
    line=$(grep '^COUNTERS impl=rxe-rs' "$h") || { say "     no COUNTERS line"; return 1; }
    role=$(grep -m1 -oE '^RESULT [a-z_]+ [A-Z]+ [RS]' "$h" | awk '{print $4}')
    v() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$line"; }
    local retx seq
    retx=$(v retransmitted_pkts); seq=$(( $(v send_seq_err) + $(v out_of_seq_request) + $(v duplicate_request) ))
    EXTRA_NOTE="rxe-rs: retransmitted_pkts=$retx send_seq_err=$(v send_seq_err) out_of_seq_request=$(v out_of_seq_request) duplicate_request=$(v duplicate_request) rcvd_seq_err=$(v rcvd_seq_err) retry_timeouts=$(v retry_timeouts)"
    if [ "$role" = R ] && [ "${retx:-0}" = 0 ]; then say "     rxe-rs was the requester but retransmitted nothing"; return 1; fi
    if [ "$role" = S ] && [ "$seq" = 0 ]; then say "     rxe-rs was the responder but saw no sequence error or duplicate"; return 1; fi
    return 0
}

# nftables on the bridge: drop the N-th RoCE frames (not a periodic pattern:
# that livelocks go-back-N). input = guest -> host, output = host -> guest.
lossy_on() {  # "i,j,k" (guest->host) "i,j,k" (host->guest)
    LOSSY=("$1" "$2")   # (a scenario run again starts its frame count afresh)
    nsx nft -f - <<EOF
table bridge rxeloss {
    chain from_guest {
        type filter hook input priority 0; policy accept;
        udp dport 4791 numgen inc mod 1000000 { $1 } counter drop
    }
    chain to_guest {
        type filter hook output priority 0; policy accept;
        udp dport 4791 numgen inc mod 1000000 { $2 } counter drop
    }
}
EOF
}
lossy_count() { nsx nft list table bridge rxeloss 2>/dev/null | grep -oE 'packets [0-9]+' | awk '{s+=$2} END {print s+0}'; }
lossy_off() { nsx nft delete table bridge rxeloss 2>/dev/null || true; }

# The checks must be able to fail: one packet with a good ICRC and one with a
# flipped bit, sent to the guest's QP1 by icrc_probe.py (not by rxe-rs). The
# guest must accept exactly one (rcvd_pkts counts only packets whose ICRC
# checked out; this kernel drops bad ones without a log line) and
# `rxe dump --check` must find exactly one bad ICRC in the capture.
icrc_selftest() {
    local id=icrc-selftest label="icrc self-test: the guest and rxe dump --check catch a flipped ICRC bit"
    local pcap="$PCAPS/$id.pcap" rc=0 why="" b0 b1 t0 secs
    if [ -n "$ONLY" ] && ! [[ $id =~ $ONLY ]]; then return 0; fi
    t0=$(date +%s.%N)
    ip netns exec "$NS" tcpdump -U --immediate-mode -s 9216 -i "$TAP" -w "$pcap" 'udp port 4791' 2>"$LOGS/$id.tcpdump.err" &
    TCPDUMP_PID=$!
    for _ in $(seq 50); do grep -q listening "$LOGS/$id.tcpdump.err" 2>/dev/null && break; sleep 0.1; done
    local C=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts
    b0=$(grun "$id-0" 30 "cat $C")
    nsx python3 "$HERE/icrc_probe.py" "$HOST_IP" "$GUEST_IP" >"$LOGS/$id.host.log" 2>&1 || { rc=1; why="$why probe failed"; }
    sleep 0.5
    b1=$(grun "$id-1" 30 "cat $C")
    kill "$TCPDUMP_PID" 2>/dev/null; wait "$TCPDUMP_PID" 2>/dev/null; TCPDUMP_PID=""
    [ "$((b1 - b0))" = 1 ] || { rc=1; why="$why guest rcvd_pkts grew by $((b1 - b0)), expected 1 (the good packet only)"; }
    "$RXE" dump --check -q "$pcap" >"$PCAPS/$id.check" 2>&1; local drc=$?
    "$RXE" dump "$pcap" >"$PCAPS/$id.txt" 2>"$PCAPS/$id.summary"
    grep -q '2 RoCE packets (1 ICRC BAD, 0 malformed)' "$PCAPS/$id.summary" && [ "$drc" = 1 ] ||
        { rc=1; why="$why rxe dump --check: exit $drc, $(cat "$PCAPS/$id.summary")"; }
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    local verdict=PASS note="guest rcvd_pkts +1 for 2 packets sent; rxe dump --check: 1 of 2 bad, exit 1"
    if [ "$rc" != 0 ]; then verdict=FAIL; FAILED=$((FAILED+1)); note=$why; fi
    R_ID+=("$id") R_LABEL+=("$label") R_VERDICT+=("$verdict") R_SECS+=("$secs") R_NOTE+=("$note")
    printf '%s %s  (%ss; %s)\n' "$verdict" "$label" "$secs" "$note"
}

# ---- 4. scenarios at path MTU 1024 (1500-byte link) ---------------------------------
say "== icrc self-test ($(elapsed)s)"
icrc_selftest

# ---- 4a. the verbs surface, call by call, against the kernel (issue 37) -------------
# tests/c/verbs_diff.c in the guest and over the drop-in, table mode and seeded
# random sequences; any difference that docs/divergences.md does not list fails.
# diff_step ID RUN LABEL: one harness of tests/interop/verbs_diff.sh (RUN) as
# a scenario, its log in $LOGS/ID.log, its outputs in $LOGS/verbs-diff/
diff_step() {
    local id=$1 run=$2 label=$3 t0 v
    [ -z "$ONLY" ] || [[ $id =~ $ONLY ]] || return 0
    say "== $id: the same calls on the kernel and rxe-rs ($(elapsed)s)"
    # shellcheck source=tests/interop/verbs_diff.sh
    source "$HERE/verbs_diff.sh"
    t0=$(date +%s)
    if "$run" >"$LOGS/$id.log" 2>&1; then v=PASS
    elif known_issue "$id" >/dev/null; then v=KNOWN; KNOWN_SEEN=$((KNOWN_SEEN+1))
    else v=FAIL; FAILED=$((FAILED+1)); fi
    sed 's/^/  /' "$LOGS/$id.log" | head -60
    R_ID+=("$id") R_LABEL+=("$label") R_VERDICT+=("$v")
    R_SECS+=($(( $(date +%s) - t0 ))) R_NOTE+=("$(grep -m1 '^verbs_diff: [0-9]' "$LOGS/$id.log"); $LOGS/verbs-diff/")
    say "$v $id (see $LOGS/verbs-diff/)"
}
diff_step verbs-diff verbs_diff_run "verbs_diff: libibverbs calls on kernel rxe and the drop-in, table + random, compared"
diff_step rdmacm-diff rdmacm_diff_run "rdmacm_diff: librdmacm calls on kernel rdma_cm and the drop-in, compared"

say "== pingpong, path MTU 1024 ($(elapsed)s)"
for s in 1 1024 4096 65536; do pp_pair rc "$s" 1024 20; done
pp_pair rc 1048576 1024 3
for s in 1 1024 4096 65536; do pp_pair uc "$s" 1024 20; done
for s in 1 1024; do pp_pair ud "$s" 1024 20; done
for s in 1 1024 4096 65536; do pp_pair srq "$s" 1024 20; done

say "== verbs operations, path MTU 1024 ($(elapsed)s)"
PORT=18516
ALLOW="rcvd_rnr_err send_rnr_err"
EXPECT="$GUEST_IP|RC_SEND_LAST_WITH_IMMEDIATE
$GUEST_IP|RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
$GUEST_IP|RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
$GUEST_IP|RC_FETCH_ADD
$GUEST_IP|RC_COMPARE_SWAP
$HOST_IP|RC_RDMA_READ_RESPONSE_LAST
$HOST_IP|RC_ATOMIC_ACKNOWLEDGE
$HOST_IP|RNR NAK
$HOST_IP|NAK remote access error
$HOST_IP|NAK invalid request"
MAXLEN=1024
scenario ops-kreq-m1024 "verbs ops kernel-requester→rxe-rs-responder mtu=1024" guest \
    "rxe_peer -R -P ops -g $GIDX -m 1024" "$PEER" -S -P ops -d "$HOST_IP" -m 1024 "$GUEST_IP"
PORT=18516
ALLOW="rcvd_rnr_err send_rnr_err"
EXPECT="$HOST_IP|RC_SEND_LAST_WITH_IMMEDIATE
$HOST_IP|RC_RDMA_WRITE_LAST_WITH_IMMEDIATE
$HOST_IP|RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
$HOST_IP|RC_FETCH_ADD
$HOST_IP|RC_COMPARE_SWAP
$GUEST_IP|RC_RDMA_READ_RESPONSE_LAST
$GUEST_IP|RC_ATOMIC_ACKNOWLEDGE
$GUEST_IP|RNR NAK
$GUEST_IP|NAK remote access error
$GUEST_IP|NAK remote operational error"
MAXLEN=1024
scenario ops-rsreq-m1024 "verbs ops rxe-rs-requester→kernel-responder mtu=1024" host \
    "rxe_peer -S -P ops -g $GIDX -m 1024 $HOST_IP" "$PEER" -R -P ops -d "$HOST_IP" -m 1024

# IBTA 1.5's ATOMIC WRITE and FLUSH (plan ext): kernels from 6.2 on perform
# both, 6.1 NAKs them, so only a newer guest runs it (KPKG, docs/interop.md).
# rxe-rs requests and the kernel responds: rdma-core 44 cannot post a FLUSH.
kver_major_minor() { echo "$KVER" | sed -n 's/^\([0-9]*\)\.\([0-9]*\).*/\1 \2/p'; }
read -r KMAJ KMIN <<<"$(kver_major_minor)"
if [ "${KMAJ:-0}" -gt 6 ] || { [ "${KMAJ:-0}" = 6 ] && [ "${KMIN:-0}" -ge 2 ]; }; then
    PORT=18516
    EXPECT="$HOST_IP|RC_ATOMIC_WRITE
$HOST_IP|RC_FLUSH
$GUEST_IP|RC_RDMA_READ_RESPONSE_ONLY
$GUEST_IP|NAK invalid request
$GUEST_IP|NAK remote access error"
    MAXLEN=1024
    scenario ext-rsreq-m1024 "ATOMIC WRITE and FLUSH rxe-rs-requester→kernel-responder mtu=1024" host \
        "rxe_peer -S -P ext -g $GIDX -m 1024 $HOST_IP" "$PEER" -R -P ext -d "$HOST_IP" -m 1024
else
    say "(ATOMIC WRITE and FLUSH: guest kernel $KVER has neither; a 6.2+ guest runs ext-rsreq-m1024)"
fi

say "== perftest against rxe perf, path MTU 1024 ($(elapsed)s)"
pt_pair write_bw 64 1024 200
pt_pair write_bw 65536 1024 10
pt_pair read_bw 4096 1024 50
pt_pair send_bw 4096 1024 50
pt_pair atomic_bw 8 1024 200 -A FETCH_AND_ADD
pt_pair atomic_bw 8 1024 200 -A CMP_AND_SWAP
pt_pair write_lat 64 1024 100
pt_pair read_lat 64 1024 100
pt_pair send_lat 64 1024 100
pt_pair atomic_lat 8 1024 100 -A FETCH_AND_ADD
pt_pair atomic_lat 8 1024 100 -A CMP_AND_SWAP
# UC and UD (perftest's -c)
pt_pair write_bw 4096 1024 50 -c UC
pt_pair send_bw 4096 1024 50 -c UC
pt_pair write_lat 2048 1024 50 -c UC
pt_pair send_lat 64 1024 50 -c UC
pt_pair send_bw 1024 1024 50 -c UD
pt_pair send_lat 64 1024 50 -c UD

say "== native backend: backend_exchange on the kernel's rxe (libibverbs) against the soft stack ($(elapsed)s)"
# The same program on both sides: in the guest RXE_PROVIDER=native opens rxe0
# through libibverbs.so.1 (rxe-verbs/src/native), on the host the soft stack.
check_bx() {  # both logs: all 8 checks passed, each on the backend it should be
    local h=$1 g=$2 ok=0
    grep -q 'all 8 checks passed on the soft backend' "$h" || { say "     host: no 'all 8 checks passed on the soft backend'"; ok=1; }
    grep -q 'all 8 checks passed on the native backend' "$g" || { say "     guest: no 'all 8 checks passed on the native backend'"; ok=1; }
    grep -q '^backend: native (libibverbs device rxe0' "$g" || { say "     guest: not on libibverbs' rxe0"; ok=1; }
    EXTRA_NOTE="8/8 checks on each side; guest $(grep -m1 '^backend:' "$g" | cut -c10-60)"
    return $ok
}
bx_expect() {  # what each side sends when it is the requester, and answers
    local ip
    for ip in "$HOST_IP" "$GUEST_IP"; do
        printf '%s\n' "$ip|RC_SEND_(LAST|ONLY)_WITH_IMMEDIATE" "$ip|RC_RDMA_WRITE_(FIRST|ONLY)" \
            "$ip|RC_RDMA_WRITE_(LAST|ONLY)_WITH_IMMEDIATE" "$ip|RC_RDMA_READ_REQUEST" "$ip|RC_COMPARE_SWAP" \
            "$ip|RC_FETCH_ADD" "$ip|RC_ATOMIC_ACKNOWLEDGE" "$ip|RC_RDMA_READ_RESPONSE_(FIRST|ONLY)"
    done
}
PORT=18600 HOSTCHK=check_bx MAXLEN=1024 MAXLEN_EQ=1
EXPECT=$(bx_expect)
scenario bx-native-server "backend_exchange native (kernel rxe0 via libibverbs) server ← soft client" guest \
    "env RXE_PROVIDER=native /share/backend_exchange server --addr $GUEST_IP --timeout 30" \
    env RXE_PROVIDER=soft "$BX" client --addr "$HOST_IP" --server "$GUEST_IP" --timeout 30
PORT=18600 HOSTCHK=check_bx MAXLEN=1024 MAXLEN_EQ=1
EXPECT=$(bx_expect)
scenario bx-native-client "backend_exchange soft server ← native (kernel rxe0 via libibverbs) client" host \
    "env RXE_PROVIDER=native /share/backend_exchange client --addr $GUEST_IP --server $HOST_IP --timeout 30" \
    env RXE_PROVIDER=soft "$BX" server --addr "$HOST_IP" --timeout 30

# rxe perf itself on the native backend in the guest (perftest's flags),
# against rxe perf on the soft stack, data checked on the host side
PT_GUEST="env RXE_PROVIDER=native /share/rxe perf write_bw" pt_pair write_bw 4096 1024 50
PT_GUEST="env RXE_PROVIDER=native /share/rxe perf atomic_bw" pt_pair atomic_bw 8 1024 100 -A FETCH_AND_ADD

say "== UC and UD with immediate data, path MTU 1024 ($(elapsed)s)"
# rxe_peer/rxe-interop-peer -P ucud: QP 0 UC, QP 1 UD (then one RC SEND on
# QP 2, the only packet the responder answers)
ucud_expect() {  # the requester's IP
    printf '%s\n' "$1|UC_SEND_ONLY_WITH_IMMEDIATE" "$1|UC_SEND_LAST_WITH_IMMEDIATE" \
        "$1|UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE" "$1|UC_RDMA_WRITE_LAST_WITH_IMMEDIATE" \
        "$1|UD_SEND_ONLY_WITH_IMMEDIATE" "$1|UD_SEND_ONLY " "$1|RC_SEND_ONLY_WITH_IMMEDIATE"
}
PORT=18516 MAXLEN=1024 MAXLEN_EQ=1
EXPECT=$(ucud_expect "$GUEST_IP")
ONLY_OPS="UC_SEND_(ONLY|FIRST|MIDDLE|LAST)(_WITH_IMMEDIATE)?|UC_RDMA_WRITE_(ONLY|FIRST|MIDDLE|LAST)(_WITH_IMMEDIATE)?|UD_SEND_ONLY(_WITH_IMMEDIATE)?|RC_SEND_ONLY_WITH_IMMEDIATE|RC_ACKNOWLEDGE"
scenario ucud-kreq-m1024 "UC/UD with immediate kernel-requester→rxe-rs-responder mtu=1024" guest \
    "rxe_peer -R -P ucud -g $GIDX -m 1024" "$PEER" -S -P ucud -d "$HOST_IP" -m 1024 "$GUEST_IP"
PORT=18516 MAXLEN=1024 MAXLEN_EQ=1
EXPECT=$(ucud_expect "$HOST_IP")
ONLY_OPS="UC_SEND_(ONLY|FIRST|MIDDLE|LAST)(_WITH_IMMEDIATE)?|UC_RDMA_WRITE_(ONLY|FIRST|MIDDLE|LAST)(_WITH_IMMEDIATE)?|UD_SEND_ONLY(_WITH_IMMEDIATE)?|RC_SEND_ONLY_WITH_IMMEDIATE|RC_ACKNOWLEDGE"
scenario ucud-rsreq-m1024 "UC/UD with immediate rxe-rs-requester→kernel-responder mtu=1024" host \
    "rxe_peer -S -P ucud -g $GIDX -m 1024 $HOST_IP" "$PEER" -R -P ucud -d "$HOST_IP" -m 1024

say "== drop-in: Debian's programs on both sides, the host's over rxe-rs's libibverbs.so.1, path MTU 1024 ($(elapsed)s)"
# `rxe exec -d 10.99.0.1 -- ibv_rc_pingpong ...` on the host against the same
# binary on the kernel's rxe0, both directions (ids di-pp-*, di-pt-*)
for s in 1 65536; do DROPIN=1 pp_pair rc "$s" 1024 20; done
for s in 1 65536; do DROPIN=1 pp_pair uc "$s" 1024 20; done
for s in 1 1024; do DROPIN=1 pp_pair ud "$s" 1024 20; done
for s in 1 4096; do DROPIN=1 pp_pair srq "$s" 1024 20; done
DROPIN=1 pt_pair write_bw 65536 1024 10
DROPIN=1 pt_pair read_bw 4096 1024 50
DROPIN=1 pt_pair send_bw 4096 1024 50
DROPIN=1 pt_pair atomic_bw 8 1024 100 -A FETCH_AND_ADD
DROPIN=1 pt_pair send_lat 64 1024 50

say "== rdma_cm: rping with the CM's MADs on QP 1, path MTU 1024 ($(elapsed)s)"
# `rxe rping` (rxe_verbs::cm) against librdmacm's rping on the kernel's rdma_cm,
# both directions: REQ/REP/RTU, the RDMA READ and WRITE pings with the data
# checked (-V), then DREQ/DREP.
check_rping() {  # host log, guest log: three pings seen by each side
    local h g
    h=$(grep -c 'ping data: rdma-ping-' "$1"); g=$(grep -c 'ping data: rdma-ping-' "$2")
    [ "$h" -ge 3 ] && [ "$g" -ge 3 ] || { say "     rping: $h pings in the host log, $g in the guest log (3 each expected)"; return 1; }
}
# An rdma_cm server listens on no TCP port: the host's client starts once
# the guest's `rdma resource show cm_id` lists the listener (CM_LISTEN).
# Before that check, a client started a fixed second after the guest's rping
# and, on a busy host, sometimes came first: the guest's kernel rejects such
# a REQ at once (REJ 8, no listener) and rping's clients do not retry. One
# more try is still allowed.
RPING_LISTEN_RACE='(RDMA_CM_EVENT_REJECTED|Rejected), error 8'
# rping's client has a race of its own at exit: its CM thread goes back to
# rdma_get_cm_event after the DISCONNECTED event while the main thread
# destroys the event channel, and a read that comes after the close fails
# (EBADF) and exits 255 after a complete, verified exchange (CI, 2026-12-04,
# the kernel's client against our server). One more try.
RPING_EXIT_RACE='rdma_get_cm_event: Bad file descriptor'
for s in 64 2000; do
    CM_LISTEN=7174 HOSTCHK=check_rping RETRY_IF=$RPING_LISTEN_RACE EXPECT="$HOST_IP|UD_SEND_ONLY
$GUEST_IP|UD_SEND_ONLY
$GUEST_IP|RC_RDMA_READ_REQUEST
$GUEST_IP|RC_RDMA_WRITE"
    scenario "cm-rping-s$s-ks" "rdma_cm: rping kernel-server→rxe-rs-client size=$s" guest \
        "rping -s -a $GUEST_IP -C 3 -S $s -v" \
        "$RXE" rping -c -a "$GUEST_IP" -I "$HOST_IP" -C 3 -S "$s" -v -V --timeout 60
    CM_WAIT=1 HOSTCHK=check_rping RETRY_IF=$RPING_EXIT_RACE EXPECT="$HOST_IP|UD_SEND_ONLY
$GUEST_IP|UD_SEND_ONLY
$HOST_IP|RC_RDMA_READ_REQUEST
$HOST_IP|RC_RDMA_WRITE"
    scenario "cm-rping-s$s-rs" "rdma_cm: rping rxe-rs-server→kernel-client size=$s" host \
        "rping -c -a $HOST_IP -C 3 -S $s -v -V" \
        "$RXE" rping -s -a "$HOST_IP" -S "$s" -v --timeout 60
done

# Debian's rdmacm programs on the host over the drop-in librdmacm.so.1 (rxe
# exec links it next to libibverbs.so.1), against the same programs on the
# kernel's rdma_cm, both directions (ids di-cm-*).
check_status0() {  # host log, guest log: ucmatose's own verdict on both sides
    grep -q 'return status 0' "$1" && grep -q 'return status 0' "$2" ||
        { say "     ucmatose: 'return status 0' missing (host: $(grep -c 'return status 0' "$1"), guest: $(grep -c 'return status 0' "$2"))"; return 1; }
    check_dropin_log "$1"
}
check_perftest_cm() {  # host log, guest log: rdma_cm exchange and a result line on both sides
    local f
    for f in "$1" "$2"; do
        grep -q 'Data ex. method : rdma_cm' "$f" && grep -qE '^ *65536 +10 ' "$f" ||
            { say "     perftest -R: no rdma_cm banner or no result line in $f"; return 1; }
    done
    check_dropin_log "$1"
}
check_rping_dropin() { check_rping "$1" "$2" && check_dropin_log "$1"; }
for s in 64 4000; do
    CM_LISTEN=7174 HOSTCHK=check_rping_dropin GTIMEOUT=60 HTIMEOUT=60 RETRY_IF=$RPING_LISTEN_RACE
    scenario "di-cm-rping-s$s-ks" "drop-in: rping kernel-server→drop-in-client size=$s" guest \
        "rping -s -a $GUEST_IP -C 3 -S $s -v" \
        "${DROPIN_EXEC[@]}" rping -c -a "$GUEST_IP" -C 3 -S "$s" -v -V
    CM_WAIT=1 HOSTCHK=check_rping_dropin GTIMEOUT=60 HTIMEOUT=60 RETRY_IF=$RPING_EXIT_RACE
    scenario "di-cm-rping-s$s-rs" "drop-in: rping drop-in-server→kernel-client size=$s" host \
        "rping -c -a $HOST_IP -C 3 -S $s -v -V" \
        "${DROPIN_EXEC[@]}" rping -s -a "$HOST_IP" -C 3 -S "$s" -v
done
CM_LISTEN=7471 HOSTCHK=check_status0 GTIMEOUT=60 HTIMEOUT=60
scenario di-cm-ucmatose-ks "drop-in: ucmatose kernel-server→drop-in-client, 2 connections" guest \
    "ucmatose -b $GUEST_IP -c 2 -C 10" \
    "${DROPIN_EXEC[@]}" ucmatose -s "$GUEST_IP" -b "$HOST_IP" -c 2 -C 10
CM_WAIT=1 HOSTCHK=check_status0 GTIMEOUT=60 HTIMEOUT=60
scenario di-cm-ucmatose-rs "drop-in: ucmatose drop-in-server→kernel-client, 2 connections" host \
    "ucmatose -s $HOST_IP -b $GUEST_IP -c 2 -C 10" \
    "${DROPIN_EXEC[@]}" ucmatose -b "$HOST_IP" -c 2 -C 10
CM_LISTEN=7174 HOSTCHK=check_status0 GTIMEOUT=60 HTIMEOUT=60 EXPECT="$HOST_IP|ServiceIDResReq 
$GUEST_IP|ServiceIDResReqResp"
scenario di-cm-udaddy-ks "drop-in: udaddy (UD through SIDR) kernel-server→drop-in-client" guest \
    "udaddy -b $GUEST_IP" \
    "${DROPIN_EXEC[@]}" udaddy -s "$GUEST_IP" -b "$HOST_IP"
CM_WAIT=1 HOSTCHK=check_status0 GTIMEOUT=60 HTIMEOUT=60 EXPECT="$GUEST_IP|ServiceIDResReq 
$HOST_IP|ServiceIDResReqResp"
scenario di-cm-udaddy-rs "drop-in: udaddy (UD through SIDR) drop-in-server→kernel-client" host \
    "udaddy -s $HOST_IP -b $GUEST_IP" \
    "${DROPIN_EXEC[@]}" udaddy -b "$HOST_IP"
# UD multicast through rdma_cm: the receiver joins the group (IGMP on
# the kernel, an IP membership on rxe-rs) and waits; the sender joins
# (send-only from the drop-in) and sends 10 messages of 500 bytes to it
CM_WAIT=3 ONE_WAY=1 HOSTCHK=check_status0 GTIMEOUT=60 HTIMEOUT=60
scenario di-cm-mckey-kr "drop-in: mckey kernel-receiver←drop-in-sender, send-only" guest \
    "mckey -m 239.77.7.1 -b $GUEST_IP -C 10 -S 500" \
    "${DROPIN_EXEC[@]}" mckey -m 239.77.7.1 -b "$HOST_IP" -s -o -C 10 -S 500
CM_WAIT=3 ONE_WAY=1 HOSTCHK=check_status0 GTIMEOUT=60 HTIMEOUT=60
scenario di-cm-mckey-rr "drop-in: mckey drop-in-receiver←kernel-sender" host \
    "mckey -m 239.77.7.2 -b $GUEST_IP -s -C 10 -S 500" \
    "${DROPIN_EXEC[@]}" mckey -m 239.77.7.2 -b "$HOST_IP" -C 10 -S 500
# UCX over verbs: ucx_perftest's rc_verbs between the drop-in (with the
# device view, which UCX needs to see the device at all) and the kernel,
# both directions; UCX's own out-of-band exchange is TCP on PORT
check_ucx() {  # host log, guest log: the client's final report, and the drop-in's log
    grep -q '^Final:' "$1" || grep -q '^Final:' "$2" ||
        { say "     ucx_perftest: no 'Final:' report on either side"; return 1; }
    check_dropin_log "$1"
}
if command -v ucx_perftest >/dev/null 2>&1; then
    for t in am_lat put_bw; do
        PORT=13337; dropin_opts check_ucx
        scenario "di-ucx-$t-ks" "drop-in: ucx_perftest rc_verbs $t kernel-server→drop-in-client" guest \
            "ucx_perftest -p 13337 -d rxe0:1 -x rc_verbs -t $t -n 1000" \
            "${DROPIN_EXEC[@]}" ucx_perftest "$GUEST_IP" -p 13337 -d rxe0:1 -x rc_verbs -t "$t" -n 1000
        PORT=13337; dropin_opts check_ucx
        scenario "di-ucx-$t-rs" "drop-in: ucx_perftest rc_verbs $t drop-in-server→kernel-client" host \
            "ucx_perftest $HOST_IP -p 13337 -d rxe0:1 -x rc_verbs -t $t -n 1000" \
            "${DROPIN_EXEC[@]}" ucx_perftest -p 13337 -d rxe0:1 -x rc_verbs -t "$t" -n 1000
    done
fi
# perftest makes two rdma_cm connections to one port (the data exchange,
# then the test QP) and its server listens again in between; a client that
# comes first is rejected (REJ 8) and perftest's retry reuses the ids it
# destroyed, so the run ends. The guest, emulated, is slow to listen again:
# that race is perftest's, and up to three more tries are allowed (the final
# CI run of 2026-11-29 needed the third; one in ten runs needed any).
# (perftest reports the reject two ways: event 8 is RDMA_CM_EVENT_REJECTED)
PERFTEST_CM_RACE='RDMA_CM_EVENT_REJECTED; error: 8|Unexpected CM event bl blka 8'
CM_LISTEN=18515 CM_WAIT=1 HOSTCHK=check_perftest_cm GTIMEOUT=60 HTIMEOUT=60 RETRY_IF=$PERFTEST_CM_RACE RETRIES=3
scenario di-cm-write_bw-ks "drop-in: ib_write_bw -R kernel-server→drop-in-client 64 KiB × 10" guest \
    "ib_write_bw -R -d rxe0 -s 65536 -n 10" \
    "${DROPIN_EXEC[@]}" ib_write_bw -R -d rxe0 -s 65536 -n 10 "$GUEST_IP"
CM_WAIT=1 HOSTCHK=check_perftest_cm GTIMEOUT=60 HTIMEOUT=60 RETRY_IF=$PERFTEST_CM_RACE
scenario di-cm-write_bw-rs "drop-in: ib_write_bw -R drop-in-server→kernel-client 64 KiB × 10" host \
    "ib_write_bw -R -d rxe0 -s 65536 -n 10 $HOST_IP" \
    "${DROPIN_EXEC[@]}" ib_write_bw -R -d rxe0 -s 65536 -n 10

# Faults: a lost REQ and a lost REP (the first RoCE frame each way) are
# sent again after their CM timeouts (about 5 s each) and the connection is
# made once; a REQ to a port nobody listens on gets the kernel's REJ with
# reason 8 (invalid service ID).
check_one_connection() {  # host log, guest log
    check_rping "$1" "$2" || return 1
    # both first frames (the REQ and the REP) were dropped, and each side
    # connected once (the pings checked above ran on one connection)
    local dropped
    dropped=$(lossy_count)
    [ "$dropped" = 2 ] || { say "     nftables dropped $dropped frames (the REQ and the REP: 2 expected)"; return 1; }
}
lossy_on "0" "0"
CM_LISTEN=7174 HOSTCHK=check_one_connection ALLOW=any GTIMEOUT=60 HTIMEOUT=60
scenario cm-rping-lost-req-rep-ks "rdma_cm: rping with the first REQ and REP lost, kernel-server→rxe-rs-client" guest \
    "rping -s -a $GUEST_IP -C 3 -S 64 -v" \
    "$RXE" rping -c -a "$GUEST_IP" -I "$HOST_IP" -C 3 -S 64 -v -V --timeout 40
lossy_off
lossy_on "0" "0"
CM_WAIT=1 HOSTCHK=check_one_connection ALLOW=any GTIMEOUT=60 HTIMEOUT=60
scenario cm-rping-lost-req-rep-rs "rdma_cm: rping with the first REQ and REP lost, rxe-rs-server→kernel-client" host \
    "rping -c -a $HOST_IP -C 3 -S 64 -v -V" \
    "$RXE" rping -s -a "$HOST_IP" -S 64 -v --timeout 40
lossy_off
# A lost RTU (the active side's second frame): the passive side resends its
# REP after its timeout, the active side answers the duplicate REP with the
# RTU again, and the connection is made once.
check_rtu_lost() {  # host log, guest log
    check_rping "$1" "$2" || return 1
    local dropped
    dropped=$(lossy_count)
    [ "$dropped" = 1 ] || { say "     nftables dropped $dropped frames (the RTU: 1 expected)"; return 1; }
}
lossy_on "999999" "1"
CM_LISTEN=7174 HOSTCHK=check_rtu_lost ALLOW=any GTIMEOUT=60 HTIMEOUT=60
scenario cm-rping-lost-rtu-ks "rdma_cm: rping with our RTU lost, kernel-server→rxe-rs-client" guest \
    "rping -s -a $GUEST_IP -C 3 -S 64 -v" \
    "$RXE" rping -c -a "$GUEST_IP" -I "$HOST_IP" -C 3 -S 64 -v -V --timeout 40
lossy_off
lossy_on "1" "999999"
CM_WAIT=1 HOSTCHK=check_rtu_lost ALLOW=any GTIMEOUT=60 HTIMEOUT=60
scenario cm-rping-lost-rtu-rs "rdma_cm: rping with the kernel's RTU lost, rxe-rs-server→kernel-client" host \
    "rping -c -a $HOST_IP -C 3 -S 64 -v -V" \
    "$RXE" rping -s -a "$HOST_IP" -S 64 -v --timeout 40
lossy_off
# A peer that vanishes mid-connection: the guest's answers (its REJ to our
# REQs) never arrive; with a 67 ms response timeout and 2 retries our client
# gives up after three REQs and about 2 s with UNREACHABLE (-ETIMEDOUT).
# The guest reads its counters when its command ends: it waits long enough
# for the third REQ's REJ to be counted even when our client starts slowly.
check_unreachable() {  # host log
    grep -q 'cma event Unreachable, error -110' "$1" || { say "     no 'Unreachable, error -110' in the host log"; return 1; }
    local reqs
    reqs=$(grep -c 'ConnectRequest' "$PCAPS/cm-unreachable-ks.txt")
    [ "$reqs" = 3 ] || { say "     $reqs REQs in the capture (3 expected)"; return 1; }
}
lossy_on "0,1,2,3,4,5,6,7,8,9" "999999"
CM_WAIT=1 HOSTCHK=check_unreachable ALLOW=any ONE_WAY=1
scenario cm-unreachable-ks "rdma_cm: a peer whose answers never come is unreachable after the CM's retries" guest \
    "sleep 8" \
    sh -c "\"$RXE\" rping -c -a $GUEST_IP -I $HOST_IP -p 7998 -C 1 --cm-timeout 14 --cm-retries 2 --timeout 20; [ \$? = 1 ]"
lossy_off
check_rej8() {  # host log: our client got the kernel's REJ, reason 8
    grep -q 'cma event Rejected, error 8' "$1" || { say "     no 'Rejected, error 8' in the host log"; return 1; }
}
CM_WAIT=1 HOSTCHK=check_rej8 EXPECT="$HOST_IP|ConnectRequest
$GUEST_IP|ConnectReject"
# (the guest only waits: long enough for a client slow to start on a busy
# machine, whose REQ came so late once that the kernel's REJ left after
# the guest's counters were read)
scenario cm-rej-unlistened-ks "rdma_cm: a REQ to a port nobody listens on is rejected (reason 8) by the kernel" guest \
    "sleep 6" \
    sh -c "\"$RXE\" rping -c -a $GUEST_IP -I $HOST_IP -p 7999 -C 1 --timeout 20; [ \$? = 1 ]"

say "== loss: nftables drops a few RoCE frames ($(elapsed)s)"
PORT=18516
lossy_on "9, 100, 301" "5, 60, 203"
ALLOW=any HOSTCHK=check_peer_counters
scenario loss-kreq "loss: 8x64KiB SEND/WRITE/READ kernel-requester→rxe-rs-responder mtu=1024" guest \
    "rxe_peer -R -P loss -g $GIDX -m 1024" "$PEER" -S -P loss -d "$HOST_IP" -m 1024 "$GUEST_IP"
lossy_off
lossy_on "9, 100, 301" "5, 60, 203"
ALLOW=any HOSTCHK=check_peer_counters
scenario loss-rsreq "loss: 8x64KiB SEND/WRITE/READ rxe-rs-requester→kernel-responder mtu=1024" host \
    "rxe_peer -S -P loss -g $GIDX -m 1024 $HOST_IP" "$PEER" -R -P loss -d "$HOST_IP" -m 1024
lossy_off
PORT=18515
lossy_on "7, 40" "4, 33"
ALLOW=any
scenario loss-pp-rc-ks "loss: rc_pingpong kernel-server→rxe-rs-client size=65536 mtu=1024" guest \
    "ibv_rc_pingpong -d rxe0 -g $GIDX -s 65536 -m 1024 -n 10 -c" \
    "$RXE" pingpong --mode rc -d "$HOST_IP" -s 65536 -m 1024 -n 10 -c --timeout 60 "$GUEST_IP"
lossy_off
lossy_on "7, 40" "4, 33"
ALLOW=any
scenario loss-pp-rc-rs "loss: rc_pingpong rxe-rs-server→kernel-client size=65536 mtu=1024" host \
    "ibv_rc_pingpong -d rxe0 -g $GIDX -s 65536 -m 1024 -n 10 -c $HOST_IP" \
    "$RXE" pingpong --mode rc -d "$HOST_IP" -s 65536 -m 1024 -n 10 -c --timeout 60
lossy_off

# ---- 5. path MTU 4096 on a 9000-byte link ----------------------------------------------
say "== 9000-byte link, path MTU 4096 ($(elapsed)s)"
net_mtu 9000
GUEST_MTU=9000
grun mtu9000 30 'ip link set eth0 mtu 9000 && sleep 0.5 && ibv_devinfo -d rxe0 | grep active_mtu' >"$LOGS/mtu9000.txt" 2>&1
if ! grep -q 'active_mtu:.*4096' "$LOGS/mtu9000.txt"; then
    say "FAIL the guest's rxe0 did not switch to active_mtu 4096: $(cat "$LOGS/mtu9000.txt")"; FAILED=$((FAILED+1))
    R_ID+=(mtu9000) R_LABEL+=("guest eth0 to 9000 bytes: rxe0 active_mtu 4096") R_VERDICT+=(FAIL) R_SECS+=(0)
    R_NOTE+=("$(tr '\n' ' ' <"$LOGS/mtu9000.txt")")
else
    say "  guest: $(grep active_mtu "$LOGS/mtu9000.txt" | tr -s '\t ' ' ')"
fi
pp_pair rc 65536 4096 10
pp_pair uc 65536 4096 10
pp_pair ud 4096 4096 10
pp_pair srq 65536 4096 10
PORT=18516
ALLOW="rcvd_rnr_err send_rnr_err" MAXLEN=4096 MAXLEN_EQ=1
scenario ops-kreq-m4096 "verbs ops kernel-requester→rxe-rs-responder mtu=4096" guest \
    "rxe_peer -R -P ops -g $GIDX -m 4096" "$PEER" -S -P ops -d "$HOST_IP" -m 4096 "$GUEST_IP"
ALLOW="rcvd_rnr_err send_rnr_err" MAXLEN=4096 MAXLEN_EQ=1
scenario ops-rsreq-m4096 "verbs ops rxe-rs-requester→kernel-responder mtu=4096" host \
    "rxe_peer -S -P ops -g $GIDX -m 4096 $HOST_IP" "$PEER" -R -P ops -d "$HOST_IP" -m 4096

say "== perftest against rxe perf, path MTU 4096 ($(elapsed)s)"
pt_pair write_bw 65536 4096 10
pt_pair read_bw 65536 4096 10
pt_pair send_bw 16384 4096 20
pt_pair send_lat 8192 4096 20

say "== drop-in, path MTU 4096 ($(elapsed)s)"
DROPIN=1 pp_pair rc 65536 4096 10
DROPIN=1 pp_pair ud 4096 4096 10
DROPIN=1 pt_pair write_bw 65536 4096 10

say "== loss at path MTU 4096 ($(elapsed)s)"
PORT=18516
lossy_on "7, 50, 131" "5, 40, 97"
ALLOW=any HOSTCHK=check_peer_counters MAXLEN=4096 MAXLEN_EQ=1
scenario loss-kreq-m4096 "loss: 8x64KiB SEND/WRITE/READ kernel-requester→rxe-rs-responder mtu=4096" guest \
    "rxe_peer -R -P loss -g $GIDX -m 4096" "$PEER" -S -P loss -d "$HOST_IP" -m 4096 "$GUEST_IP"
lossy_off
lossy_on "7, 50, 131" "5, 40, 97"
ALLOW=any HOSTCHK=check_peer_counters MAXLEN=4096 MAXLEN_EQ=1
scenario loss-rsreq-m4096 "loss: 8x64KiB SEND/WRITE/READ rxe-rs-requester→kernel-responder mtu=4096" host \
    "rxe_peer -S -P loss -g $GIDX -m 4096 $HOST_IP" "$PEER" -R -P loss -d "$HOST_IP" -m 4096
lossy_off
# perftest's write_bw through the same kind of loss; the data check sees the
# retransmissions (they must carry the same bytes)
PT_LOSS="6, 45|4, 30" pt_pair write_bw 65536 4096 10
PT_LOSS="6, 45|4, 30" pt_pair read_bw 65536 4096 10

# ---- 5b. rxe fuzz against the kernel (issue 22; tests/interop/fuzz_kernel.sh) ---------
# Four bounded, seeded campaigns (RXE_FUZZ_SECONDS, 30 here, each) of mutated
# RoCE packets, at the guest's ibv_rc_pingpong, rping (through rdma_cm),
# ib_read_bw and ib_read_bw -R; then the fuzzer's oracles, the guest's
# kernel log and a normal exchange must all be fine.
if [ -z "$ONLY" ] || [[ fuzz-kernel =~ $ONLY ]]; then
    say "== rxe fuzz against the kernel's rdma_rxe ($(elapsed)s)"
    if guest_nic_dead; then say "  the guest's NIC is dead ($NIC_WHY): rebooting the guest first"; guest_reboot; fi
    # shellcheck source=tests/interop/fuzz_kernel.sh
    source "$HERE/fuzz_kernel.sh"
    t0=$(date +%s)
    RXE_FUZZ_SECONDS=${RXE_FUZZ_SECONDS:-30} fuzz_kernel >"$LOGS/fuzz-kernel.log" 2>&1
    case $? in
        0) v=PASS ;;
        3) v=KNOWN; KNOWN_SEEN=$((KNOWN_SEEN+1)) ;;   # findings of a kernel bug found before
        *) v=FAIL; FAILED=$((FAILED+1)) ;;
    esac
    sed 's/^/  /' "$LOGS/fuzz-kernel.log" | grep -E 'verdict|sent |guest:|finding ' | head -30
    R_ID+=(fuzz-kernel) R_LABEL+=("rxe fuzz: mutated RoCE packets at the kernel's ibv_rc_pingpong, rping, ib_read_bw (-R), oracles, kernel log") R_VERDICT+=("$v")
    R_SECS+=($(( $(date +%s) - t0 ))) R_NOTE+=("$(grep -c '^verdict .*: ok' "$LOGS/fuzz-kernel.log") verdicts ok; log $LOGS/fuzz-kernel.log")
    say "$v rxe fuzz against the kernel (see $LOGS/fuzz-kernel.log)"
fi

# ---- 6. summary ------------------------------------------------------------------------
grun dmesg 30 'dmesg' >"$LOGS/guest-dmesg.txt" 2>&1
say ""
say "== summary ($(elapsed)s): ${#R_ID[@]} scenarios, $FAILED failed, $KNOWN_SEEN known issues; guest kernel $KVER"
printf '%-5s %-78s %7s\n' result scenario seconds
for i in "${!R_ID[@]}"; do
    printf '%-5s %-78s %7s\n' "${R_VERDICT[$i]}" "${R_LABEL[$i]}" "${R_SECS[$i]}"
done
{
    printf 'result\tid\tscenario\tseconds\tnote\n'
    for i in "${!R_ID[@]}"; do
        printf '%s\t%s\t%s\t%s\t%s\n' "${R_VERDICT[$i]}" "${R_ID[$i]}" "${R_LABEL[$i]}" "${R_SECS[$i]}" "${R_NOTE[$i]}"
    done
} >"$OUT/results.tsv"
say "captures: $PCAPS  (each with its 'rxe dump' text: <id>.txt)"
say "logs:     $LOGS   results: $OUT/results.tsv"
say "interop: $(( ${#R_ID[@]} - FAILED - KNOWN_SEEN )) passed, $FAILED failed"
[ "$KNOWN_SEEN" = 0 ] || say "interop: $KNOWN_SEEN failed as known issues (listed in KNOWN in tests/interop/run.sh)"
[ "$GUEST_BOOTS" = 1 ] || say "interop: the guest was booted $GUEST_BOOTS times: its NIC died $((GUEST_BOOTS - 1)) times (console logs: $LOGS/console.boot*.log)"
[ "$FAILED" = 0 ] && [ "${#R_ID[@]}" -gt 0 ]
exit $?
