#!/bin/sh
# Builds the seed corpora of the fuzz targets from the bundled captures
# (tests/data/pcaps/*.pcap: real Linux rdma_rxe traffic), in
# fuzz/corpus/TARGET/ (or DIR):
#
# * frame_parser: every frame of every capture, prefixed with the
#   link-type selector byte the target reads first (0 = Ethernet); the
#   RoCE v2 frames also go in as raw IP (selector 3), Linux cooked v1 (1)
#   and v2 (2), so every link type starts from real traffic.
# * capture_reader: whole capture files, cut to their first few frames
#   (under 4 KiB each, libFuzzer's default input size): the captures as
#   they are (little-endian pcap, microseconds), and each rewritten as
#   big-endian pcap, nanosecond pcap, raw-IP / SLL / SLL2 pcap, and pcapng
#   (either byte order; enhanced, simple and obsolete packet blocks; an
#   if_tsresol option; two sections).
# * responder, requester: nothing; their inputs are structured (the
#   `arbitrary` crate) and they find their way from an empty corpus.
#
# Files are named by their SHA-1, as libFuzzer names its own.
#
# Usage: fuzz/seed-corpus.sh [TARGET [DIR]]   (python3, standard library only)
#        fuzz/seed-corpus.sh DIR              (old form: frame_parser into DIR)
#        default: every target with seeds, into fuzz/corpus/TARGET/
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=
case "${1:-}" in
    "") targets="frame_parser capture_reader" ;;
    frame_parser | capture_reader) targets=$1; out=${2:-} ;;
    responder | requester) echo "seed-corpus: $1 starts from an empty corpus"; exit 0 ;;
    *) targets=frame_parser; out=$1 ;;
esac
for t in $targets; do
    dir=${out:-"$here/corpus/$t"}
    mkdir -p "$dir"
    python3 - "$here/../tests/data/pcaps" "$dir" "$t" <<'EOF'
import glob, hashlib, os, struct, sys

pcaps, out, target = sys.argv[1], sys.argv[2], sys.argv[3]
SEL_ETHERNET, SEL_SLL, SEL_SLL2, SEL_RAW_IP = 0, 1, 2, 3
written = set()

def put(data):
    name = hashlib.sha1(data).hexdigest()
    if name not in written:
        written.add(name)
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)

def records(path):
    """(ts_sec, ts_usec, orig_len, frame) of a little-endian classic pcap."""
    with open(path, "rb") as f:
        d = f.read()
    magic, = struct.unpack_from("<I", d, 0)
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit("%s: not a little-endian classic pcap file" % path)
    linktype, = struct.unpack_from("<I", d, 20)
    if linktype != 1:
        sys.exit("%s: link type %d is not Ethernet" % (path, linktype))
    off = 24
    while off + 16 <= len(d):
        sec, usec, incl, orig = struct.unpack_from("<IIII", d, off)
        yield sec, usec, orig, d[off + 16:off + 16 + incl]
        off += 16 + incl

def ip_of(frame):
    """(ethertype, IP packet) after the Ethernet header and VLAN tags."""
    et, off = struct.unpack_from("!H", frame, 12)[0], 14
    while et in (0x8100, 0x88A8) and off + 4 <= len(frame):
        et, off = struct.unpack_from("!H", frame, off + 2)[0], off + 4
    return et, frame[off:]

def sll(frame):
    et, ip = ip_of(frame)
    return struct.pack("!HHH8sH", 0, 1, 6, frame[6:12], et) + ip

def sll2(frame):
    et, ip = ip_of(frame)
    return struct.pack("!HHIHBB8s", et, 0, 2, 1, 0, 6, frame[6:12]) + ip

def pcap(recs, e="<", nanos=False, link=1, snaplen=262144):
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    b = struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, link)
    for sec, usec, orig, frame in recs:
        frac = usec * 1000 if nanos else usec
        b += struct.pack(e + "IIII", sec, frac, len(frame), orig) + frame
    return b

def block(e, type_, body):
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(e + "II", type_, n) + body + struct.pack(e + "I", n)

def pcapng(recs, e="<", tsresol=None, link=1):
    shb = block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))
    opts = b""
    if tsresol is not None:
        opts = struct.pack(e + "HH", 9, 1) + bytes([tsresol]) + b"\0\0\0"
        opts += struct.pack(e + "HH", 0, 0)
    idb = block(e, 1, struct.pack(e + "HHI", link, 0, 0) + opts)
    b = shb + idb
    for i, (sec, usec, orig, frame) in enumerate(recs):
        units = sec * 1000000 + usec
        if tsresol == 9:
            units *= 1000
        if i % 4 == 3:
            b += block(e, 3, struct.pack(e + "I", orig) + frame)  # simple
        elif i % 4 == 2:
            body = struct.pack(e + "HHIIII", 0, 0, units >> 32, units & 0xFFFFFFFF,
                               len(frame), orig)
            b += block(e, 2, body + frame)  # obsolete packet block
        else:
            body = struct.pack(e + "IIIII", 0, units >> 32, units & 0xFFFFFFFF,
                               len(frame), orig)
            b += block(e, 6, body + frame)  # enhanced
    return b

def first(recs, budget=3500):
    """As many leading records as fit in about `budget` bytes (at least one,
    cut to the budget)."""
    out, used = [], 0
    for sec, usec, orig, frame in recs:
        frame = frame[:budget]
        if out and used + len(frame) + 16 > budget:
            break
        out.append((sec, usec, orig, frame))
        used += len(frame) + 16
    return out

n_files = n_frames = 0
for path in sorted(glob.glob(os.path.join(pcaps, "*.pcap"))):
    n_files += 1
    recs = list(records(path))
    n_frames += len(recs)
    if target == "frame_parser":
        for _, _, _, frame in recs:
            put(bytes([SEL_ETHERNET]) + frame)
            et, ip = ip_of(frame)
            if et not in (0x0800, 0x86DD):
                continue
            put(bytes([SEL_RAW_IP]) + ip)
            put(bytes([SEL_SLL]) + sll(frame))
            put(bytes([SEL_SLL2]) + sll2(frame))
    else:
        few = first(recs)
        put(pcap(few))
        put(pcap(few, e=">"))
        put(pcap(few, nanos=True))
        put(pcap(few, snaplen=64))
        ip = [(s, u, o, ip_of(f)[1]) for s, u, o, f in few]
        put(pcap(ip, link=101))
        put(pcap([(s, u, o, sll(f)) for s, u, o, f in few], link=113))
        put(pcap([(s, u, o, sll2(f)) for s, u, o, f in few], link=276))
        put(pcapng(few))
        put(pcapng(few, e=">", tsresol=9))
        put(pcapng(few, tsresol=0x86))
        put(pcapng(ip, link=101) + pcapng(few[:1]))
if target == "capture_reader":
    put(b"")
print("seed-corpus: %s: %d frames from %d captures -> %d files in %s"
      % (target, n_frames, n_files, len(written), out))
EOF
done
