#!/bin/bash
# tests/perf/measure.sh - the measurements of docs/performance.md.
#
# Runs `rxe perf` between two soft devices on loopback (127.0.2.2 client,
# 127.0.2.3 server), each test with its plain-UDP baseline in the same run
# (--baseline), ROUNDS times, and prints one line per run:
#
#   <label> <binary> <RoCE figure> <UDP figure> <RoCE/UDP ratio>
#
# (MB/s for bandwidth, t_typical in us for latency), then the median ratio
# of each label. With RXE_BASE=/path/to/another/rxe the same tests run with
# that binary too, interleaved with this one (base, new, base, new...), so
# that two versions meet the same machine load.
#
#   cargo build --release -p rxe-tool
#   bash tests/perf/measure.sh                 # all groups, 3 rounds
#   ROUNDS=5 PERF_GROUPS="lat bw" bash tests/perf/measure.sh
#   RXE_BASE=../old/target/release/rxe bash tests/perf/measure.sh
#
# PERF_GROUPS: lat (send_lat, write_lat 64 B, with rxe perf's default 50 us
# of polling before sleeping on both the RoCE and the UDP side; send_lat
# again with none, and against a UDP ping-pong that sends an ACK-sized
# datagram with each ping and echo (--udp-acks), this build only), bw
# (write_bw, read_bw, send_bw
# 64 KiB), scale (write_bw 64 KiB with 1, 16, 256, 1024 QPs, the same
# number of bytes in all), fair (write_bw 64 KiB, 12,800 messages over 1
# QP then over 1024 QPs, head to head: the ratio of the two; then 1024 QPs
# with --one-buffer, against the same 1 QP; then the GSO+GRO blast going
# round 1024 buffers against one, the memory footprint's own cost), gso (issue
# 20's GSO rows: write_bw 64 KiB MTU 4096 and send_bw 64 B with RXE_GSO=0
# and RXE_GSO=1, in alternating order, against tests/perf/gso_blast.c, a
# UDP blast of RoCE-sized datagrams as GSO sends of at most 64 segments and
# 64 KiB, received with UDP_GRO, built with cc in the same run: lines
# "<label> gso0|gso1|ref <MB/s or Mpps> <ratio to ref>", and send_bw 64 B
# (GSO as by default) against its --baseline, UDP with one sendto a
# datagram, in M messages/s: the 64-byte row's reference; with RXE_BASE the
# base binary runs the same tests in the same rounds, interleaved, as
# "bgso0|bgso1"; not in the default groups), dropin (Debian's perftest
# over the build's drop-in libibverbs, `rxe exec`, against the same
# build's rxe perf with the same flags: ib_send_bw and ib_write_bw 64 B
# (messages/s), ib_write_bw 64 KiB (MB/s), ib_send_lat 64 B (t_typical);
# lines "<label> <bin> <drop-in> <rxe perf> <drop-in / rxe perf>"; needs
# perftest and a libibverbs.so beside the binary (cargo build --release
# -p rxe-ibverbs); not in the default groups), middleware (issue 32's
# benchmarks over the drop-in and its device view, `rxe exec`: UCX's
# `ucx_perftest -x rc_verbs -t put_bw -s 65536 -D zcopy -O 128` against
# rxe perf write_bw 64 KiB, both with 128 writes in flight (perftest's
# default tx depth; put_bw's own default is one), MB/s; then
# tests/c/mpi_check.c under Open MPI's mpirun over UCX, one rank on each
# of the two devices, its 8-byte ping-pong's mean half round trip (5000
# exchanges after 20 untimed) against rxe perf send_lat -s 8's t_avg, us;
# lines "<label> <bin> <middleware> <rxe perf> <middleware / rxe perf>";
# needs ucx-utils, openmpi-bin, libopenmpi-dev and the drop-in; not in
# the default groups).
# Env: RXE_RECV_MODE=plain|raw as for any device. GSO_BW_N (20000 64 KiB
# writes) and GSO_MSG_N (1000000 64-byte sends) size the gso group.
# PERF_LOAD=N runs N busy loops at normal priority beside every measurement
# (the "loaded" figures of docs/performance.md: a reproducible stand-in for
# a shared machine; 0, the default, runs none).
# PERF_PIN=apart runs every client on CPU 0 and every server on CPU 1 (rxe
# perf's and the blast's), PERF_PIN=together both on CPU 0; unset, the
# scheduler places them. Placement decides bandwidth on the development VM
# more than anything in rxe-rs: the GSO blast moves 5-6 GB/s with both ends
# on one vCPU and 1.2-1.7 GB/s with them on two, rxe perf write_bw 64 KiB
# 1.5-2.0 and 0.7-1.0 GB/s (docs/performance.md, "2026-11-29"); unpinned
# runs land on either side, which is where the bimodal figures came from.
# Sends only to 127.0.2.2 and 127.0.2.3.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NEW=${RXE_BIN:-$HERE/../../target/release/rxe}
BASE=${RXE_BASE:-}
ROUNDS=${ROUNDS:-3}
PERF_GROUPS=${PERF_GROUPS:-lat bw scale fair}
[ -x "$NEW" ] || { echo "build first: cargo build --release -p rxe-tool" >&2; exit 2; }
BLAST=""
LOADERS=()
cleanup() {
    [ ${#LOADERS[@]} -gt 0 ] && kill "${LOADERS[@]}" 2>/dev/null
    [ -n "$BLAST" ] && rm -f "$BLAST"
    [ -n "$MPI_CHECK" ] && rm -f "$MPI_CHECK"
    return 0
}
trap cleanup EXIT
if [[ " $PERF_GROUPS " == *" dropin "* ]]; then
    command -v ib_send_bw >/dev/null || { echo "the dropin group needs perftest (apt-get install perftest)" >&2; exit 2; }
fi
MPI_CHECK=""
if [[ " $PERF_GROUPS " == *" middleware "* ]]; then
    command -v ucx_perftest >/dev/null && command -v mpicc.openmpi >/dev/null ||
        { echo "the middleware group needs ucx-utils, openmpi-bin and libopenmpi-dev" >&2; exit 2; }
    MPI_CHECK=$(mktemp /tmp/mpi_check.XXXXXX)
    mpicc.openmpi -O2 -o "$MPI_CHECK" "$HERE/../c/mpi_check.c" || { echo "cannot build mpi_check.c" >&2; exit 2; }
fi
if [[ " $PERF_GROUPS " == *" gso "* || " $PERF_GROUPS " == *" fair "* ]]; then
    BLAST=$(mktemp /tmp/gso_blast.XXXXXX)
    cc -O2 -o "$BLAST" "$HERE/gso_blast.c" || { echo "cannot build gso_blast.c" >&2; exit 2; }
fi
for _ in $(seq 1 "${PERF_LOAD:-0}"); do
    bash -c 'while :; do :; done' &
    LOADERS+=($!)
done
[ ${#LOADERS[@]} -gt 0 ] && echo "load: ${#LOADERS[@]} busy loops beside every run"
case ${PERF_PIN:-} in
"") CPIN=() SPIN=() ;;
apart) CPIN=(taskset -c 0) SPIN=(taskset -c 1) ;;
together) CPIN=(taskset -c 0) SPIN=(taskset -c 0) ;;
*) echo "PERF_PIN=$PERF_PIN: apart, together or unset" >&2; exit 2 ;;
esac
[ -n "${PERF_PIN:-}" ] && echo "placement: PERF_PIN=$PERF_PIN (client: ${CPIN[*]}, server: ${SPIN[*]})"
# How an idle vCPU waits decides what a sleeping waiter pays to be woken
# (docs/performance.md, "where 64-byte send_bw's time goes"): say it.
if [ -r /sys/devices/system/cpu/cpuidle/current_driver ]; then
    idle="cpuidle: $(cat /sys/devices/system/cpu/cpuidle/current_driver)"
    hp=/sys/module/haltpoll/parameters/guest_halt_poll_ns
    [ -r "$hp" ] && idle="$idle, guest_halt_poll_ns=$(cat "$hp")"
    echo "$idle"
fi
GSO_BW_N=${GSO_BW_N:-20000}
GSO_MSG_N=${GSO_MSG_N:-1000000}

# blast SEG TOTAL: the GSO+GRO UDP blast's "MB/s Mpps"
blast() {
    "${SPIN[@]}" "$BLAST" server 127.0.2.3 18600 "$1" "$2" >/tmp/gso_blast.$$ 2>&1 &
    local srv=$!
    sleep 0.3
    "${CPIN[@]}" timeout 120 "$BLAST" client 127.0.2.2 18600 "$1" "$2" 127.0.2.3
    wait "$srv"
    awk '/^gso_blast/ { for (i = 1; i <= NF; i++) { if ($i == "MB/s") m = $(i - 1); if ($i == "Mpps") p = $(i - 1) } } END { print m, p }' /tmp/gso_blast.$$
    rm -f /tmp/gso_blast.$$
}

# gso_one BIN GSO TEST COL ARGS...: one rxe perf pair with RXE_GSO=GSO;
# prints column COL of the result row (4: MB/s, 5: Mpps)
gso_one() {
    local bin=$1 g=$2 test=$3 col=$4; shift 4
    RXE_GSO=$g "${SPIN[@]}" "$bin" perf "$test" "$@" -d 127.0.2.3 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.4
    RXE_GSO=$g "${CPIN[@]}" timeout 300 "$bin" perf "$test" "$@" -d 127.0.2.2 127.0.2.3 2>&1 |
        awk -v c="$col" '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $c }'
    wait "$srv"
}

gso_round() {  # ROUND
    local ref4k ref64 order g v
    ref4k=$(blast 4112 $((GSO_BW_N * 65536)))
    ref64=$(blast 80 $((GSO_MSG_N * 80)))
    printf '%-22s %-5s %s\n' ref_blast_4112_MBps ref "${ref4k% *}"
    printf '%-22s %-5s %s\n' ref_blast_80_Mpps ref "${ref64#* }"
    # The 64-byte row's own reference (issue 20): UDP's packet rate with
    # one sendto a datagram, rxe perf's --baseline in the same pair
    ONE_COL=5 runs send_bw_64_vs_sendto send_bw -s 64 -n "$GSO_MSG_N" -m 4096
    order="0 1"; [ $(($1 % 2)) = 0 ] && order="1 0"
    bins="new"; [ -n "$BASE" ] && { bins="base new"; [ $(($1 % 2)) = 0 ] && bins="new base"; }
    local bin b tag
    for g in $order; do
        for bin in $bins; do
            b=$NEW tag=gso$g; [ "$bin" = base ] && b=$BASE tag=bgso$g
            v=$(gso_one "$b" "$g" write_bw 4 -s 65536 -n "$GSO_BW_N" -m 4096)
            printf '%-22s %-5s %s %s\n' write_bw_64K_MBps "$tag" "${v:-0}" \
                "$(awk -v x="${v:-0}" -v y="${ref4k% *}" 'BEGIN { if (y > 0 && x > 0) printf "%.3f", x / y; else print "FAILED" }')"
            v=$(gso_one "$b" "$g" send_bw 5 -s 64 -n "$GSO_MSG_N" -m 4096)
            printf '%-22s %-5s %s %s\n' send_bw_64_Mpps "$tag" "${v:-0}" \
                "$(awk -v x="${v:-0}" -v y="${ref64#* }" 'BEGIN { if (y > 0 && x > 0) printf "%.3f", x / y; else print "FAILED" }')"
        done
    done
}

# one TAG BIN LABEL TEST ARGS...: one client/server run with its baseline
one() {
    local tag=$1 bin=$2 label=$3 test=$4; shift 4
    "${SPIN[@]}" "$bin" perf "$test" "$@" -d 127.0.2.3 --baseline >/dev/null 2>&1 &
    local srv=$!
    sleep 0.4
    local out
    out=$("${CPIN[@]}" timeout 300 "$bin" perf "$test" "$@" -d 127.0.2.2 --baseline 127.0.2.3 2>&1)
    wait "$srv"
    local col=${ONE_COL:-4}
    [[ $test == *_lat ]] && col=5
    local figs ratio
    figs=$(awk -v c="$col" '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { printf "%s ", $c }' <<<"$out")
    ratio=$(grep -oE 'ratio: [0-9.]+' <<<"$out" | awk '{ print $2 }')
    printf '%-22s %-5s %s%s\n' "$label" "$tag" "$figs" "${ratio:-FAILED}"
}

# fair_one BIN QPS ITERS [ARGS...]: write_bw 64 KiB MB/s, no baseline
fair_one() {
    local bin=$1 q=$2 n=$3; shift 3
    "${SPIN[@]}" "$bin" perf write_bw -s 65536 -m 4096 -q "$q" -n "$n" "$@" -d 127.0.2.3 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.4
    "${CPIN[@]}" timeout 300 "$bin" perf write_bw -s 65536 -m 4096 -q "$q" -n "$n" "$@" -d 127.0.2.2 127.0.2.3 2>&1 |
        awk '/^ *65536 +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $4 }'
    wait "$srv"
}

# dropin_one BIN COL TEST ARGS...: perftest's ib_TEST over BIN's drop-in
# libibverbs (`rxe exec`), then BIN's rxe perf TEST with the same flags;
# prints column COL of each result row (4: MB/s, 5: Mpps or t_typical)
# and the ratio drop-in / rxe perf.
dropin_one() {
    local bin=$1 col=$2 test=$3; shift 3
    local row='/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/'
    "${SPIN[@]}" "$bin" exec -d 127.0.2.3 -- "ib_$test" -d rxe0 -p 18517 "$@" >/dev/null 2>&1 &
    local srv=$!
    sleep 1
    local d r
    d=$("${CPIN[@]}" timeout 300 "$bin" exec -d 127.0.2.2 -- "ib_$test" -d rxe0 -p 18517 "$@" 127.0.2.3 2>&1 |
        awk -v c="$col" "$row { print \$c; exit }")
    wait "$srv"
    "${SPIN[@]}" "$bin" perf "$test" -p 18517 "$@" -d 127.0.2.3 >/dev/null 2>&1 &
    srv=$!
    sleep 0.4
    r=$("${CPIN[@]}" timeout 300 "$bin" perf "$test" -p 18517 "$@" -d 127.0.2.2 127.0.2.3 2>&1 |
        awk -v c="$col" "$row { print \$c; exit }")
    wait "$srv"
    echo "${d:-0} ${r:-0} $(awk -v x="${d:-0}" -v y="${r:-0}" 'BEGIN { if (x > 0 && y > 0) printf "%.2f", x / y; else print "FAILED" }')"
}

dropin_round() {
    local bin b
    for bin in ${BASE:+base} new; do
        b=$NEW; [ "$bin" = base ] && b=$BASE
        printf '%-22s %-5s %s\n' dropin_send_bw_64_Mpps "$bin" "$(dropin_one "$b" 5 send_bw -s 64 -n 200000)"
        printf '%-22s %-5s %s\n' dropin_write_bw_64_Mpps "$bin" "$(dropin_one "$b" 5 write_bw -s 64 -n 200000)"
        printf '%-22s %-5s %s\n' dropin_write_bw_64K_MBps "$bin" "$(dropin_one "$b" 4 write_bw -s 65536 -n 5000)"
        printf '%-22s %-5s %s\n' dropin_send_lat_64_us "$bin" "$(dropin_one "$b" 5 send_lat -s 64 -n 20000)"
    done
}

# perf_col BIN COL TEST ARGS...: column COL of an rxe perf pair's result
# row (4: MB/s, 6: t_avg)
perf_col() {
    local bin=$1 col=$2 test=$3; shift 3
    "${SPIN[@]}" "$bin" perf "$test" -p 18519 "$@" -d 127.0.2.3 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.4
    "${CPIN[@]}" timeout 300 "$bin" perf "$test" -p 18519 "$@" -d 127.0.2.2 127.0.2.3 2>&1 |
        awk -v c="$col" '/^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+/ { print $c; exit }'
    wait "$srv"
}

middleware_round() {
    local bin b u m r
    for bin in ${BASE:+base} new; do
        b=$NEW; [ "$bin" = base ] && b=$BASE
        "${SPIN[@]}" "$b" exec -d 127.0.2.3 -- ucx_perftest -p 13519 -d rxe0:1 -x rc_verbs \
            -t put_bw -s 65536 -n 5000 -D zcopy -O 128 >/dev/null 2>&1 &
        local srv=$!
        sleep 1.5
        u=$("${CPIN[@]}" timeout 300 "$b" exec -d 127.0.2.2 -- ucx_perftest 127.0.2.3 -p 13519 -d rxe0:1 \
            -x rc_verbs -t put_bw -s 65536 -n 5000 -D zcopy -O 128 2>&1 | awk '/^Final:/ { print $7 }')
        wait "$srv"
        r=$(perf_col "$b" 4 write_bw -s 65536 -n 5000)
        printf '%-22s %-5s %s %s %s\n' ucx_put_bw_64K_MBps "$bin" "${u:-0}" "${r:-0}" \
            "$(awk -v x="${u:-0}" -v y="${r:-0}" 'BEGIN { if (x > 0 && y > 0) printf "%.2f", x / y; else print "FAILED" }')"
        m=$(OMPI_MCA_pml=ucx OMPI_MCA_pml_ucx_devices=any UCX_TLS='^sm,tcp' timeout 300 \
            "$b" exec -d 127.0.2.2 -d 127.0.2.3 -- mpirun --allow-run-as-root --oversubscribe \
            -np 1 -x UCX_TLS -x UCX_NET_DEVICES=rxe0:1 "${CPIN[@]}" "$MPI_CHECK" --iters 5000 : \
            -np 1 -x UCX_TLS -x UCX_NET_DEVICES=rxe1:1 "${SPIN[@]}" "$MPI_CHECK" --iters 5000 2>&1 |
            awk '/pingpong 8 B/ { print $(NF - 4) }')
        r=$(perf_col "$b" 6 send_lat -s 8 -n 5000)
        printf '%-22s %-5s %s %s %s\n' mpi_pingpong_8_us "$bin" "${m:-0}" "${r:-0}" \
            "$(awk -v x="${m:-0}" -v y="${r:-0}" 'BEGIN { if (x > 0 && y > 0) printf "%.2f", x / y; else print "FAILED" }')"
    done
}

runs() {  # LABEL TEST ARGS...
    [ -n "$BASE" ] && one base "$BASE" "$@"
    one new "$NEW" "$@"
}

{
for round in $(seq "$ROUNDS"); do
    for g in $PERF_GROUPS; do
        case $g in
        gso) gso_round "$round" ;;
        middleware) middleware_round ;;
        dropin) dropin_round ;;
        lat)
            runs send_lat_64 send_lat -s 64 -n 5000 -m 4096
            runs write_lat_64 write_lat -s 64 -n 5000 -m 4096
            # Both sides sleep at once (no --spin_us before this build).
            one new "$NEW" send_lat_64_nospin send_lat -s 64 -n 5000 -m 4096 --spin_us 0
            # Against UDP sending RoCE's datagram pattern (an ACK-sized
            # datagram with each ping and echo): the kernel's floor.
            one new "$NEW" send_lat_64_vs_acks send_lat -s 64 -n 5000 -m 4096 --udp-acks ;;
        bw)
            runs write_bw_64K write_bw -s 65536 -n 3000 -m 4096
            runs read_bw_64K read_bw -s 65536 -n 3000 -m 4096
            runs send_bw_64K send_bw -s 65536 -n 3000 -m 4096 ;;
        scale)
            for q in 1 16 256 1024; do
                n=$((6400 / q)); [ "$n" -lt 6 ] && n=6
                runs "write_bw_64K_q$q" write_bw -s 65536 -n "$n" -m 4096 -q "$q"
            done ;;
        fair)
            # Head to head: the same 64 KiB messages (12,800; 13 per QP with
            # 1024) over 1 QP, then over 1024 QPs, no UDP baseline; the
            # last figure is 1024 QPs / 1 QP.
            # Then the same with every QP in QP 0's part of the buffer
            # (--one-buffer, this build only): the stack's cost per QP
            # without the memory footprint (1024 QPs x 64 KiB: 64 MiB read
            # by the client, 64 MiB written by the server, where one QP
            # stays in cache). Then the reference for that footprint:
            # the GSO+GRO blast of the same bytes going round 1024 buffers
            # of 64 KiB on each side against one (BLAST_BUFS).
            ratio() { awk -v x="$1" -v y="$2" 'BEGIN { if (x > 0) printf "%.2f", y / x; else print "FAILED" }'; }
            for bin in ${BASE:+base} new; do
                b=$NEW; [ "$bin" = base ] && b=$BASE
                a1=$(fair_one "$b" 1 12800); a2=$(fair_one "$b" 1024 13)
                printf '%-22s %-5s %s %s %s\n' write_bw_64K_1024_vs_1 "$bin" "$a1" "$a2" "$(ratio "$a1" "$a2")"
            done
            a3=$(fair_one "$NEW" 1024 13 --one-buffer)
            printf '%-22s %-5s %s %s %s\n' write_bw_64K_1024_1buf new "$a1" "$a3" "$(ratio "$a1" "$a3")"
            u1=$(BLAST_BUFS=1 blast 4112 838860800 | cut -d' ' -f1)
            u2=$(BLAST_BUFS=1024 blast 4112 838860800 | cut -d' ' -f1)
            printf '%-22s %-5s %s %s %s\n' blast_1024_bufs_vs_1 ref "$u1" "$u2" "$(ratio "$u1" "$u2")" ;;
        esac
    done
done
} | tee /tmp/rxe-measure.$$
echo "-- median ratio per test and binary (RoCE/UDP; fair: 1024 QPs / 1 QP; gso: to the GSO+GRO blast)"
awk '{ k = $1 " " $2; v[k] = v[k] " " $NF } END { for (k in v) print k, v[k] }' /tmp/rxe-measure.$$ |
    while read -r label bin vals; do
        med=$(tr ' ' '\n' <<<"$vals" | grep -E '^[0-9.]+$' | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }')
        printf '%-22s %-5s median %s  (%s)\n' "$label" "$bin" "${med:-none}" "$vals"
    done | sort
rm -f /tmp/rxe-measure.$$
