#!/usr/bin/env bash
# Makes every figure of the guide (docs/guide/figures/) from the commands the
# chapters show: the lesson captures (`rxe lesson`, seeded, on the simulated
# network), their dumps, ladder diagrams and --explain excerpts, and the
# same for two bundled kernel captures (tests/data/pcaps).
#
#   bash docs/guide/make-figures.sh RXE_BINARY [OUT_DIR]
#
# OUT_DIR defaults to docs/guide/figures; every file in it is replaced.
# tests/guide.rs runs this into a temporary directory and fails if the
# result differs from the committed figures, so nothing here is edited by
# hand: change a lesson or a command, run this, commit the figures.
#
# The commands below run in a scratch directory that has the repository's
# tests/data/pcaps, so each reads exactly as the guide shows it.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 RXE_BINARY [OUT_DIR]" >&2
    exit 2
fi
RXE=$(realpath "$1")
GUIDE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$GUIDE/../.." && pwd)
OUT=${2:-$GUIDE/figures}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
mkdir -p tests/data
ln -s "$REPO/tests/data/pcaps" tests/data/pcaps

rxe() { "$RXE" "$@"; }

# The lessons, one line each.
rxe lesson --list > lessons.txt

# Each lesson: its capture, what it did, its packets, its ladder.
rxe lesson send -w send.pcap > send-lesson.txt
rxe dump -q send.pcap > send-dump.txt
rxe dump -q --ladder send.svg send.pcap

rxe lesson write -w write.pcap > write-lesson.txt
rxe dump -q write.pcap > write-dump.txt
rxe dump -q --ladder write.svg write.pcap

rxe lesson read -w read.pcap > read-lesson.txt
rxe dump -q read.pcap > read-dump.txt
rxe dump -q --ladder read.svg read.pcap

rxe lesson atomic -w atomic.pcap > atomic-lesson.txt
rxe dump -q atomic.pcap > atomic-dump.txt
rxe dump -q --ladder atomic.svg atomic.pcap

rxe lesson loss -w loss.pcap > loss-lesson.txt
rxe dump -q loss.pcap > loss-dump.txt
rxe dump -q --ladder loss.svg loss.pcap

rxe lesson rnr -w rnr.pcap > rnr-lesson.txt
rxe dump -q rnr.pcap > rnr-dump.txt
rxe dump -q --ladder rnr.svg rnr.pcap

rxe lesson duplicate -w duplicate.pcap > duplicate-lesson.txt
rxe dump -q duplicate.pcap > duplicate-dump.txt
rxe dump -q --ladder duplicate.svg duplicate.pcap

rxe lesson bad-rkey -w bad-rkey.pcap > bad-rkey-lesson.txt
rxe dump -q bad-rkey.pcap > bad-rkey-dump.txt
rxe dump -q --ladder bad-rkey.svg bad-rkey.pcap

rxe lesson window -w window.pcap > window-lesson.txt
rxe dump -q window.pcap > window-dump.txt
rxe dump -q --ladder window.svg window.pcap

rxe lesson uc -w uc.pcap > uc-lesson.txt
rxe dump -q uc.pcap > uc-dump.txt
rxe dump -q --ladder uc.svg uc.pcap

rxe lesson ud -w ud.pcap > ud-lesson.txt
rxe dump -q ud.pcap > ud-dump.txt
rxe dump -q --ladder ud.svg ud.pcap

# Another seed of the loss lesson: the last SEND is lost (exercises).
rxe lesson loss --seed 18 -w loss-18.pcap > loss-18-lesson.txt
rxe dump -q loss-18.pcap > loss-18-dump.txt
rxe dump -q --ladder loss-18.svg loss-18.pcap

# Single packets, every field (the chapters on packets, transports,
# reliability and memory).
rxe dump -q --explain --frames 1 send.pcap > send-explain-1.txt
rxe dump -q --explain --frames 6 send.pcap > send-explain-6.txt
rxe dump -q --explain --frames 1 write.pcap > write-explain-1.txt
rxe dump -q --explain --frames 2 read.pcap > read-explain-2.txt
rxe dump -q --explain --frames 1,3 atomic.pcap > atomic-explain-1-3.txt
rxe dump -q --explain --frames 3,10,11 loss.pcap > loss-explain-3-10-11.txt
rxe dump -q --explain --frames 2 rnr.pcap > rnr-explain-2.txt
rxe dump -q --explain --frames 4,5,10 duplicate.pcap > duplicate-explain-4-5-10.txt
rxe dump -q --explain --frames 5 bad-rkey.pcap > bad-rkey-explain-5.txt
rxe dump -q --explain --frames 2 window.pcap > window-explain-2.txt
rxe dump -q --explain --frames 2 ud.pcap > ud-explain-2.txt

# Bundled kernel captures: rdma_cm's connection (rping) and
# ibv_rc_pingpong between two kernel rdma_rxe devices.
rxe dump -q tests/data/pcaps/rping.pcap > rping-dump.txt
rxe dump -q --ladder rping.svg tests/data/pcaps/rping.pcap
rxe dump -q --explain --frames 1 tests/data/pcaps/rping.pcap > rping-explain-1.txt
rxe dump -q tests/data/pcaps/rc_pingpong_small.pcap > rc_pingpong_small-dump.txt
rxe dump -q --ladder rc_pingpong_small.svg tests/data/pcaps/rc_pingpong_small.pcap
rxe dump -q --explain --frames 1-4 tests/data/pcaps/rc_pingpong_small.pcap > rc_pingpong_small-explain-1-4.txt
# A coalesced ACK from the kernel's rdma_rxe (ib_write_bw with losses).
rxe dump -q --explain --frames 44 tests/data/pcaps/loss_write_bw_4096.pcap > loss_write_bw_4096-explain-44.txt

rm -rf tests
find "$OUT" -maxdepth 1 -type f -delete
cp -- * "$OUT"/
