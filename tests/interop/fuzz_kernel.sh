#!/bin/bash
# tests/interop/fuzz_kernel.sh - `rxe fuzz` against the kernel's rdma_rxe in
# the interop guest (issue 22).
#
# Four campaigns, one after the other, each at a server the guest restarts
# in a loop (every NAK that ends its QP ends the program; the loop starts it
# again, so that the fuzzer's liveness oracle can ask for a fresh
# connection), each a bounded, seeded `rxe fuzz` run from the host:
#   * pingpong: rdma-core's `ibv_rc_pingpong -g $GIDX -n 100000000` (posted
#     receives, a QP without remote access);
#   * rping: librdmacm's `rping -s -S 64`, connected through rdma_cm (the
#     kernel's CM answers the fuzzer's REQ; rping's server READs our buffer
#     and WRITEs it back: the data oracle);
#   * perftest: perftest's `ib_read_bw -x $GIDX -s 4096` (a buffer registered
#     for remote READ only, whose address and key perftest's exchange hands
#     over: the fuzzer's canary, data and rkey oracles watch it);
#   * perftest-cm: the same with `-R` (the exchange and the test QP through
#     rdma_cm).
# Then the verdicts:
#   * each campaign's oracles (liveness: a fresh connection still answers a
#     valid probe; sanity; peer-wire; for perftest also canary: the READ-only
#     buffer never changes, and data: READs return its bytes) - the exit
#     status of each `rxe fuzz`;
#   * the guest's kernel log since the campaigns began has no oops, BUG,
#     WARNING, KASAN report, hung task, soft lockup or RCU stall;
#   * the guest still runs a normal ibv_rc_pingpong exchange (100 iterations
#     against `rxe pingpong` on the host) and is still up.
# Each campaign's output, the pcap of every packet sent (+ .meta, replayable
# with `rxe fuzz --replay`) and any finding go to $OUT/fuzz/NAME/, the
# guest's log to $OUT/fuzz/.
#
# Two ways to run it:
#   * sourced by run.sh once the guest is up (it uses run.sh's RXE, OUT,
#     LOGS, SHARE, NS, QEMU_PID, GIDX, HOST_IP, GUEST_IP, gjob/gwait/grun,
#     nsx), then `fuzz_kernel` is a function returning 0 (all verdicts ok),
#     1 (a finding or a failure), or 3 (findings that follow a kernel bug
#     found before: KNOWN_KERNEL_BUGS below), printing one line per
#     verdict; in run.sh, after the last scenario and before the summary
#     (the guest must still be up): `source "$HERE/fuzz_kernel.sh"`, then
#     `fuzz_kernel`, and PASS, FAIL or KNOWN from its status
#     (about 6 minutes with the default 60-second campaigns);
#   * standalone, as root: `bash tests/interop/fuzz_kernel.sh` builds
#     target/release/rxe, boots the guest as run.sh does (same work dir and
#     lock, the guest built by build-guest.sh), runs `fuzz_kernel`, and
#     exits 0/1 (2: cannot run here).
# Env: RXE_FUZZ_SECONDS (60; the pingpong campaign), RXE_FUZZ_PT_SECONDS and
#      RXE_FUZZ_RPING_SECONDS (the perftest and rping campaigns; default
#      RXE_FUZZ_SECONDS), RXE_FUZZ_PEERS ("pingpong rping perftest": which
#      campaigns), RXE_FUZZ_SEED (1), RXE_FUZZ_PORT (18700 for pingpong; the
#      check exchange uses the next port, perftest the one after, rping the
#      one after that), RXE_FUZZ_WINDOW_MS (40), RXE_FUZZ_ARGS (more
#      arguments for rxe fuzz, e.g. -v), RXE_FUZZ_PLANT_KMSG=1 (plants a
#      WARNING line in the guest's kernel log before it is read, to show
#      that the guest-kernel-log verdict fires: exit 1).

# One seeded campaign at one of the guest's servers, restarted in a loop.
#   fuzz_campaign NAME SECONDS PORT 'GUEST SERVER COMMAND' RXE-FUZZ-TARGET-ARGS...
# Prints the campaign's summary and one verdict line; returns 0 (ok), 1 (a
# finding) or 2 (rxe fuzz did not run to its end).
fuzz_campaign() {
    local name=$1 secs=$2 port=$3 srv=$4; shift 4
    local seed=${RXE_FUZZ_SEED:-1} win=${RXE_FUZZ_WINDOW_MS:-40}
    local dir="$OUT/fuzz/$name" frc
    mkdir -p "$dir"
    rm -f "$SHARE/fuzz.stop"
    echo "== fuzz $name: rxe fuzz --seed $seed --seconds $secs $* (guest: $srv)"
    # the server loop: a new server whenever the last one ends
    gjob "fuzz-$name" "end=\$((\$(date +%s) + $secs + 120)); n=0
while [ \$(date +%s) -lt \$end ] && [ ! -e /share/fuzz.stop ]; do
    timeout 90 $srv >/tmp/fuzz-srv.out 2>&1
    echo \"run \$n: exit \$?: \$(tail -1 /tmp/fuzz-srv.out)\"; n=\$((n+1))
done
echo SERVER_RUNS \$n"
    sleep 1
    timeout $((secs + 300)) ip netns exec "$NS" "$RXE" fuzz -d "$HOST_IP" "$@" \
        --seed "$seed" --seconds "$secs" --window-ms "$win" --liveness-timeout 30 \
        --out "$dir" --save ${RXE_FUZZ_ARGS:-} >"$dir/campaign.log" 2>&1
    frc=$?
    touch "$SHARE/fuzz.stop"
    grun fuzz-kill 20 "killall -q ${srv%% *}; true" >/dev/null 2>&1
    gwait "fuzz-$name" 150 >"$dir/guest-server.log" 2>&1
    sed -n '/^sent /,$p' "$dir/campaign.log"
    echo "  guest: $(grep -c '^run ' "$dir/guest-server.log") ${srv%% *} runs; exits: $(sed -n 's/^run [0-9]*: exit \([0-9]*\).*/\1/p' "$dir/guest-server.log" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
    case $frc in
        0) echo "verdict fuzz-$name: ok" ;;
        1) echo "verdict fuzz-$name: FINDING (see $dir/campaign.log)"; return 1 ;;
        *) echo "verdict fuzz-$name: FAIL (rxe fuzz exit $frc; see $dir/campaign.log)"; tail -5 "$dir/campaign.log"; return 2 ;;
    esac
}

# Kernel bugs the campaigns have found before, as "regex on the kernel's
# log|what it is": when the guest's log holds one of them and nothing else
# the log verdict looks for, the campaigns' findings and a failed check
# exchange are taken for its consequences, printed in full as before, and
# fuzz_kernel returns 3 (run.sh: KNOWN, not a failure) instead of 1. A
# finding with none of them in the log, a headline of the log that matches
# none of them, or an rxe fuzz that failed to run still fail.
# RXE_FUZZ_STRICT=1 counts them as failures too (docs/fuzz-peers.md).
KNOWN_KERNEL_BUGS=(
    'rxe_pool\.c:[0-9]+ __rxe_cleanup|rdma_rxe 6.1: a destroyed QP whose last reference never went (WARNING in __rxe_cleanup), after its responder stopped half-way through answering a READ (CI, 2026-11-29; docs/fuzz-peers.md)'
    'rxe_comp\.c:[0-9]+ rxe_completer|rdma_rxe 6.1: a WARN_ON in the completer (rxe_comp.c:756 on 6.1.0-57) as the pingpong campaign'"'"'s mutated packets reached ibv_rc_pingpong'"'"'s QP; every oracle fine, the guest still works (a full CI run of 7722031, 2026-12-02; docs/fuzz-peers.md)'
)

# known_kernel_bug FILE: the description of the first known bug whose
# regex FILE matches (nothing, status 1, if none does)
known_kernel_bug() {
    local k
    for k in "${KNOWN_KERNEL_BUGS[@]}"; do
        grep -qE "${k%%|*}" "$1" && { echo "${k#*|}"; return 0; }
    done
    return 1
}

# The kernel log's lines that say something went wrong (a call trace
# follows some of them and is part of the same report)
KERNEL_TROUBLE='Oops|BUG:|WARNING:|KASAN|UBSAN|hung_task|blocked for more than|soft lockup|rcu.*stall|general protection|kernel panic'

fuzz_kernel() {
    local secs=${RXE_FUZZ_SECONDS:-60} port=${RXE_FUZZ_PORT:-18700}
    local pt_secs=${RXE_FUZZ_PT_SECONDS:-$secs} rp_secs=${RXE_FUZZ_RPING_SECONDS:-$secs}
    local ptcm_secs=${RXE_FUZZ_PTCM_SECONDS:-$secs}
    local peers=${RXE_FUZZ_PEERS:-pingpong rping perftest perftest-cm}
    local dir="$OUT/fuzz" n0 bad found=0 hard=0 known unknown
    # a campaign's status: 1 a finding, anything else a failure to run
    note_rc() { if [ "$1" = 1 ]; then found=1; else hard=1; fi; }
    mkdir -p "$dir"
    # where the kernel log stands before the campaigns
    n0=$(grun fuzz-mark 30 'dmesg | wc -l' 2>/dev/null | tail -1)
    [[ $n0 =~ ^[0-9]+$ ]] || n0=0
    if [[ " $peers " == *" pingpong "* ]]; then
        # ibv_rc_pingpong: posted receives, a QP without remote access
        fuzz_campaign pingpong "$secs" "$port" \
            "ibv_rc_pingpong -d rxe0 -g $GIDX -p $port -n 100000000" \
            --pingpong "$GUEST_IP:$port" || note_rc $?
    fi
    if [[ " $peers " == *" rping "* ]]; then
        # rping's server through rdma_cm: the kernel's CM answers the
        # fuzzer's REQ; rping's requester READs and WRITEs our buffers
        fuzz_campaign rping "$rp_secs" "$((port + 3))" \
            "rping -s -a $GUEST_IP -p $((port + 3)) -S 64" \
            --rdma-cm "$GUEST_IP:$((port + 3))" --size 64 || note_rc $?
    fi
    if [[ " $peers " == *" perftest-cm "* ]]; then
        # ib_read_bw -R: the same canary, with perftest's exchange and the
        # test QP both connected through rdma_cm
        fuzz_campaign perftest-cm "$ptcm_secs" "$((port + 4))" \
            "ib_read_bw -R -d rxe0 -x $GIDX -F -s 4096 -p $((port + 4))" \
            --perftest "$GUEST_IP:$((port + 4))" --cm --size 4096 || note_rc $?
    fi
    if [[ " $peers " == *" perftest "* ]]; then
        # ib_read_bw: a 4 KiB buffer registered for remote READ only (the
        # canary) and its address and key handed over by perftest's exchange
        fuzz_campaign perftest "$pt_secs" "$((port + 2))" \
            "ib_read_bw -d rxe0 -x $GIDX -F -s 4096 -p $((port + 2))" \
            --perftest "$GUEST_IP:$((port + 2))" --size 4096 || note_rc $?
    fi

    # RXE_FUZZ_PLANT_KMSG=1 (a check of this verdict, never in CI): a
    # WARNING line written into the guest's kernel log, as a kernel bug
    # would print it, must make the verdict below a FINDING
    if [ "${RXE_FUZZ_PLANT_KMSG:-0}" = 1 ]; then
        grun fuzz-plant 30 'echo "WARNING: CPU: 0 PID: 1 at planted by fuzz_kernel.sh (RXE_FUZZ_PLANT_KMSG)" >/dev/kmsg' >/dev/null 2>&1
    fi
    # the kernel's log since the campaigns began
    grun fuzz-dmesg 30 "dmesg | tail -n +$((n0 + 1))" >"$dir/guest-dmesg.txt" 2>&1
    bad=$(grep -E "$KERNEL_TROUBLE|Call Trace" "$dir/guest-dmesg.txt" | head -20)
    if [ -n "$bad" ]; then
        echo "verdict guest-kernel-log: FINDING ($dir/guest-dmesg.txt)"; echo "$bad" | sed 's/^/  /'; found=1
        # a report that no known bug explains is not forgiven
        local k known_re=""
        for k in "${KNOWN_KERNEL_BUGS[@]}"; do known_re="$known_re${known_re:+|}${k%%|*}"; done
        unknown=$(grep -E "$KERNEL_TROUBLE" "$dir/guest-dmesg.txt" | grep -vE "${known_re:-^\$}")
        [ -n "$unknown" ] && hard=1
    else
        echo "verdict guest-kernel-log: ok ($(wc -l <"$dir/guest-dmesg.txt") new lines, $(grep -ci rxe "$dir/guest-dmesg.txt") about rxe)"
    fi
    grep -iE 'rxe|rdma' "$dir/guest-dmesg.txt" | sort | uniq -c | sort -rn | head -5 | sed 's/^/  guest log: /'

    # a normal exchange still works
    local pport=$((port + 1)) prc=1 hlog="$dir/check-host.log"
    gjob fuzz-check "timeout 60 ibv_rc_pingpong -d rxe0 -g $GIDX -p $pport -n 100"
    for _ in 1 2 3; do
        sleep 1
        timeout 60 ip netns exec "$NS" "$RXE" pingpong -d "$HOST_IP" -p "$pport" -n 100 --timeout 20 "$GUEST_IP" >"$hlog" 2>&1 && { prc=0; break; }
        grep -q "Couldn't connect" "$hlog" || break
    done
    gwait fuzz-check 90 >"$dir/check-guest.log" 2>&1 || prc=1
    if [ "$prc" = 0 ] && kill -0 "$QEMU_PID" 2>/dev/null; then
        echo "verdict guest-still-works: ok ($(grep -m1 'iters in' "$hlog"))"
    else
        echo "verdict guest-still-works: FAIL (host: $(tail -1 "$hlog"); guest: $(tail -1 "$dir/check-guest.log"))"; found=1
    fi
    [ "$found$hard" = 00 ] && return 0
    if [ "$hard" = 0 ] && [ "${RXE_FUZZ_STRICT:-0}" = 0 ] && known=$(known_kernel_bug "$dir/guest-dmesg.txt"); then
        echo "verdict known-kernel-bug: KNOWN: the findings above follow a kernel bug found before: $known"
        return 3
    fi
    return 1
}

# ---- standalone: boot the guest as run.sh does, then fuzz -----------------------------
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    HERE=$(cd "$(dirname "$0")" && pwd)
    ROOT=$(cd "$HERE/../.." && pwd)
    WORK=${RXE_INTEROP_WORK:-/var/tmp/rxe-rs-interop}
    OUT="$WORK/runs/fuzz-$(date +%Y%m%d-%H%M%S)"
    LOGS="$OUT/logs" SHARE="$OUT/share"
    RXE="$ROOT/target/release/rxe"
    QEMU_PID=""
    export RXE_PROVIDER=soft
    source "$HERE/lib.sh"
    cannot() { echo "fuzz_kernel: CANNOT RUN: $*" >&2; exit 2; }
    [ "$(id -u)" = 0 ] || cannot "must run as root (network namespace, tap device)"
    [ -c /dev/net/tun ] || cannot "/dev/net/tun is missing"
    for c in qemu-system-x86_64 ip cargo; do command -v "$c" >/dev/null || cannot "$c is not installed (run tests/interop/run.sh once)"; done
    mkdir -p "$WORK" "$LOGS" "$SHARE" || cannot "cannot create $OUT"
    exec 9>"$WORK/.lock"
    flock -w 1200 9 || cannot "another interop run holds $WORK/.lock"
    cleanup() {
        set +e
        if [ -n "$QEMU_PID" ]; then
            gpoweroff 2>/dev/null
            for _ in $(seq 30); do kill -0 "$QEMU_PID" 2>/dev/null || break; sleep 0.1; done
            kill "$QEMU_PID" 2>/dev/null; wait "$QEMU_PID" 2>/dev/null
        fi
        net_down
    }
    trap cleanup EXIT
    trap 'echo "fuzz_kernel: interrupted"; exit 130' INT TERM
    ( cd "$ROOT" && cargo build --release -q -p rxe-tool ) >"$LOGS/build-rxe.log" 2>&1 ||
        { cat "$LOGS/build-rxe.log"; echo "fuzz_kernel: building rxe failed"; exit 1; }
    "$HERE/build-guest.sh" >"$LOGS/build-guest.log" 2>&1 ||
        { tail -30 "$LOGS/build-guest.log"; cannot "building the guest failed"; }
    net_down
    net_up 1500 2>"$LOGS/netns.err" || { cat "$LOGS/netns.err" >&2; cannot "cannot create the network namespace"; }
    guest_boot
    guest_ready 180 || { tail -20 "$SHARE/console.log" 2>/dev/null; echo "fuzz_kernel: the guest did not come up"; exit 1; }
    GIDX=$(sed -n 's/^gid_index=//p' "$SHARE/ready")
    [ -n "$GIDX" ] || { echo "fuzz_kernel: rxe0 has no IPv4 GID"; exit 1; }
    echo "guest up: kernel $(sed -n 's/^kernel=//p' "$SHARE/ready"), rxe0 on $GUEST_IP, IPv4 GID index $GIDX; results in $OUT/fuzz"
    fuzz_kernel
    exit $?
fi
