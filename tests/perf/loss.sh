#!/usr/bin/env bash
# Goodput of a 64 KiB RC ping-pong under random loss, against the same run
# without loss (issue 33's loss row): two network namespaces joined by a
# veth, nftables in the server's namespace dropping a share of the RoCE
# datagrams in each direction, `rxe pingpong -s 65536` between them.
#
#   tests/perf/loss.sh [RXE] [ROUNDS] [ITERS]
#
# RXE is the rxe binary (default target/release/rxe), ROUNDS how often each
# loss rate runs (default 3), ITERS the ping-pong's iterations (default
# 2000). Prints one line per run (Gbit/s, or the error it ended in) and the
# median ratio of each loss rate to the lossless median. The namespaces
# are this script's own and are removed when it ends.
set -u
RXE=${1:-target/release/rxe}
ROUNDS=${2:-3}
ITERS=${3:-2000}
NS1=rxeloss-s-$$ NS2=rxeloss-c-$$
A=10.97.0.1 B=10.97.0.2
cleanup() { ip netns del "$NS1" 2>/dev/null; ip netns del "$NS2" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$NS1" && ip netns add "$NS2" || exit 2
ip link add veth-s-$$ netns "$NS1" type veth peer name veth-c-$$ netns "$NS2" || exit 2
ip -n "$NS1" addr add $A/24 dev veth-s-$$ && ip -n "$NS1" link set veth-s-$$ up && ip -n "$NS1" link set lo up
ip -n "$NS2" addr add $B/24 dev veth-c-$$ && ip -n "$NS2" link set veth-c-$$ up && ip -n "$NS2" link set lo up

loss() {  # percent, 0 for none
    ip netns exec "$NS1" nft delete table inet rxeloss 2>/dev/null
    [ "$1" = 0 ] && return
    ip netns exec "$NS1" nft -f - <<EOF
table inet rxeloss {
    chain in { type filter hook input priority 0; udp dport 4791 numgen random mod 100 < $1 drop; }
    chain out { type filter hook output priority 0; udp dport 4791 numgen random mod 100 < $1 drop; }
}
EOF
}

run() {  # prints Gbit/s or FAIL
    local out port=$((18600 + RANDOM % 1000))
    ip netns exec "$NS1" timeout 300 "$RXE" pingpong -d $A -p $port -s 65536 -n "$ITERS" >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    out=$(ip netns exec "$NS2" timeout 300 "$RXE" pingpong -d $B -p $port -s 65536 -n "$ITERS" -c $A 2>&1)
    local rc=$?
    wait $srv 2>/dev/null
    if [ $rc = 0 ]; then
        echo "$out" | sed -n 's/.* = \([0-9.]*\) Mbit\/sec/\1/p' | awk '{printf "%.3f\n", $1 / 1000}'
    else
        echo "FAIL($(echo "$out" | grep -o 'IBV_WC_[A-Z_]*' | head -1))"
    fi
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A got
for r in $(seq "$ROUNDS"); do
    for p in 0 1 5; do
        loss "$p"
        g=$(run)
        echo "round $r loss ${p}%: $g Gbit/s"
        got[$p]="${got[$p]:-} $g"
    done
done
loss 0
base=$(echo "${got[0]}" | tr ' ' '\n' | grep -E '^[0-9.]+$' | median)
for p in 0 1 5; do
    m=$(echo "${got[$p]}" | tr ' ' '\n' | grep -E '^[0-9.]+$' | median)
    fails=$(echo "${got[$p]}" | tr ' ' '\n' | grep -c FAIL)
    echo "loss ${p}%: median ${m:-none} Gbit/s, ratio $(awk -v m="${m:-0}" -v b="$base" 'BEGIN {printf "%.2f", m / b}'), $fails of $ROUNDS runs failed"
done
