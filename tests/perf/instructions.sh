#!/bin/bash
# tests/perf/instructions.sh - user-space instructions per message of one
# side of an `rxe perf` pair, counted by callgrind: a figure the machine's
# load does not move, for A/B decisions on a shared host (docs/performance.md,
# "This round").
#
#   tests/perf/instructions.sh SIDE GSO N1 N2 TEST ARGS...
#   tests/perf/instructions.sh client 1 20000 60000 send_bw -s 64
#   RXE_BIN=/tmp/old-rxe tests/perf/instructions.sh server 1 2000 6000 write_bw -s 65536
#
# Runs the pair twice on loopback ($NET.2 client, $NET.3 server, NET
# default 127.0.250; TCP port $PORT, default 18590: none of them used by
# the test suite, so this can run beside it, and two runs with different
# NET and PORT beside each other) with
# RXE_GSO=GSO, N1 then N2 iterations, SIDE (client or server) under
# `valgrind --tool=callgrind`, the other side native, and prints
# (Ir(N2) - Ir(N1)) / (N2 - N1): what one more message costs, every thread
# of the process, start-up and handshakes cancelled out. The report's work
# after the timed loop, which grows faster than the message count (the
# bandwidth client's `peak_delta`, the latency tests' `lat_stats` sort), is
# left out. The profiles stay in
# $OUT (default /tmp/rxe-instructions) for callgrind_annotate.
# Sends only to $NET.2 and $NET.3 (NET must be in 127.0.0.0/8).
set -uo pipefail
[ $# -ge 5 ] || { sed -n 2,20p "$0" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${RXE_BIN:-$HERE/../../target/release/rxe}
SIDE=$1 G=$2 N1=$3 N2=$4
shift 4
OUT=${OUT:-/tmp/rxe-instructions}
PORT=${PORT:-18590}
NET=${NET:-127.0.250}
[[ $NET =~ ^127\.[0-9]+\.[0-9]+$ ]] || { echo "NET=$NET is not 127.X.Y" >&2; exit 2; }
mkdir -p "$OUT"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }

# run N FILE: one pair, SIDE under callgrind; prints Ir less the report's
run() {
    local n=$1 f=$2 vg="valgrind --tool=callgrind --callgrind-out-file=$2"
    shift 2
    local s="" c=""
    if [ "$SIDE" = server ]; then s=$vg; else c=$vg; fi
    RXE_GSO=$G $s "$BIN" perf "$@" -n "$n" -p "$PORT" --timeout 60 -d $NET.3 >"$f.server" 2>&1 &
    local srv=$!
    # The server under valgrind takes a few seconds to listen.
    sleep 3
    RXE_GSO=$G $c "$BIN" perf "$@" -n "$n" -p "$PORT" --timeout 60 -d $NET.2 $NET.3 >"$f.client" 2>&1
    local crc=$?
    wait "$srv"
    local src=$?
    # A pair that failed (a retry-exceeded error under valgrind on a busy
    # host, say) counted instructions for work it did not do: no figure.
    if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
        echo "$n iterations: the client exited $crc, the server $src (see $f.client, $f.server)" >&2
        return 1
    fi
    local total after
    total=$(awk '/^summary:/ { print $2 }' "$f")
    # What the report costs after the timed loop, which grows faster than
    # the message count: the bandwidth client's peak computation and the
    # latency tests' sort of their samples.
    after=$(callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$f" 2>/dev/null |
        awk '/^ *[0-9,]+ .*(bw::peak_delta|lat::lat_stats|stats::lat_stats)( |$)/ { gsub(",", "", $1); s += $1 } END { print s + 0 }')
    echo $((total - ${after:-0}))
}

TAG="$SIDE-gso$G-$1"
a=$(run "$N1" "$OUT/$TAG.$N1" "$@")
b=$(run "$N2" "$OUT/$TAG.$N2" "$@")
[ -n "$a" ] && [ -n "$b" ] || { echo "a run failed: see $OUT/$TAG.*" >&2; exit 1; }
echo "$SIDE RXE_GSO=$G $*: $(((b - a) / (N2 - N1))) instructions per message" \
    "(Ir $a at $N1, $b at $N2)"
