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
# * mad_parser: the CM frames of the captures (UD SEND ONLY to QP 1):
#   each frame with selector 0 (Ethernet), its IP packet with selector 3
#   (raw IP), and its bare 256-byte MAD behind the selector of its
#   message's attribute (so the CM-body reading starts from the real
#   message).
# * cm_agent: each CM MAD of the captures as a "raw MAD into agent B from
#   A" operation (84 00 ff + 256 bytes), all of a capture's MADs in one
#   input, and a few operation scripts (connect, deliver, timers,
#   disconnect) that make a whole connection between the two agents.
# * responder, requester, multi_qp: nothing; their inputs are structured
#   (the `arbitrary` crate) and they find their way from an empty corpus.
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
    "") targets="frame_parser capture_reader mad_parser cm_agent" ;;
    frame_parser | capture_reader | mad_parser | cm_agent) targets=$1; out=${2:-} ;;
    responder | requester | multi_qp) echo "seed-corpus: $1 starts from an empty corpus"; exit 0 ;;
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

def cm_mad(frame):
    """(IP packet, MAD) if the frame is a RoCE v2 UD SEND ONLY to QP 1."""
    et, ip = ip_of(frame)
    if et == 0x0800 and len(ip) >= 20:
        hl = (ip[0] & 0x0F) * 4
    elif et == 0x86DD:
        hl = 40
    else:
        return None
    udp = ip[hl:]
    if len(udp) < 8 + 12 + 8 + 256 or struct.unpack_from("!H", udp, 2)[0] != 4791:
        return None
    bth = udp[8:]
    if bth[0] != 0x64 or bth[5:8] != b"\0\0\1":
        return None
    return ip, bytes(bth[20:20 + 256])

# CM attribute IDs in mad_parser's selector order (REQ ... APR).
CM_ATTRS = [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A]

def cm_agent_scripts():
    """Operation scripts for cm_agent (see its doc): connect from A,
    deliver what is on the wire, let time pass, disconnect."""
    connect = bytes([0x06, 0x00]) + bytes([0, 0, 0, 0x31]) + bytes([0, 0x10, 0, 0]) + bytes([0x6F, 20, 0])
    deliver = bytes([0x00, 0x00])
    lose = bytes([0x01, 0x00])
    dup = bytes([0x02, 0x00])
    wait = bytes([0x05, 0xFF, 30])  # about 4.5 minutes
    later = bytes([0x05, 0x10, 22])  # about 67 ms
    disc_a = bytes([0x06, 0x07, 0x00, 0x00])
    disc_b = bytes([0x86, 0x07, 0x00, 0x00])
    sidr = bytes([0x06, 0x09, 0x00, 0x0F, 20, 0])
    yield connect + deliver * 4
    yield connect + deliver * 4 + disc_a + deliver * 3 + wait
    yield connect + deliver * 4 + disc_b + deliver * 3 + wait
    yield connect + deliver * 4 + disc_a + disc_b + deliver * 4 + wait
    yield connect + lose + later * 70 + deliver * 4
    yield connect + dup + deliver * 6 + disc_a + dup + deliver * 6
    yield connect + later * 20 + deliver * 8
    yield sidr + deliver * 2
    yield sidr + lose + wait

n_files = n_frames = 0
if target == "cm_agent":
    for s in cm_agent_scripts():
        put(s)
for path in sorted(glob.glob(os.path.join(pcaps, "*.pcap"))):
    n_files += 1
    recs = list(records(path))
    n_frames += len(recs)
    if target in ("mad_parser", "cm_agent"):
        mads = [m for m in (cm_mad(f) for _, _, _, f in recs) if m]
        for (ip, mad), (_, _, _, frame) in zip(mads, [r for r in recs if cm_mad(r[3])]):
            if target == "mad_parser":
                put(bytes([SEL_ETHERNET]) + frame)
                put(bytes([SEL_RAW_IP]) + ip)
                attr = struct.unpack_from("!H", mad, 16)[0]
                sel = CM_ATTRS.index(attr) if attr in CM_ATTRS else 0
                put(bytes([sel]) + mad)
            else:
                put(bytes([0x84, 0x00, 0xFF]) + mad)
        if target == "cm_agent" and mads:
            put(b"".join(bytes([0x84, 0x00, 0xFF]) + m for _, m in mads))
        continue
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
