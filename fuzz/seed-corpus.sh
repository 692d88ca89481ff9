#!/bin/sh
# Builds the seed corpus of the frame_parser fuzz target from the bundled
# captures: every frame of tests/data/pcaps/*.pcap (classic little-endian
# pcap, Ethernet) becomes one file in fuzz/corpus/frame_parser/, prefixed
# with the link-type selector byte the target reads first (0 = Ethernet).
# The RoCE v2 frames also go in as raw IP (selector 3), Linux cooked v1
# (selector 1) and v2 (selector 2), so every link type starts from real
# traffic. Files are named by their SHA-1, as libFuzzer names its own.
#
# Usage: fuzz/seed-corpus.sh [OUTPUT_DIR]   (python3, standard library only)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/corpus/frame_parser"}
mkdir -p "$out"
exec python3 - "$here/../tests/data/pcaps" "$out" <<'EOF'
import glob, hashlib, os, struct, sys

pcaps, out = sys.argv[1], sys.argv[2]
SEL_ETHERNET, SEL_SLL, SEL_SLL2, SEL_RAW_IP = 0, 1, 2, 3
written = set()

def put(data):
    name = hashlib.sha1(data).hexdigest()
    if name not in written:
        written.add(name)
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)

def frames(path):
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
        incl, = struct.unpack_from("<I", d, off + 8)
        yield d[off + 16:off + 16 + incl]
        off += 16 + incl

def ip_of(frame):
    """(ethertype, IP packet) after the Ethernet header and VLAN tags."""
    et, off = struct.unpack_from("!H", frame, 12)[0], 14
    while et in (0x8100, 0x88A8) and off + 4 <= len(frame):
        et, off = struct.unpack_from("!H", frame, off + 2)[0], off + 4
    return et, frame[off:]

n_files = n_frames = 0
for path in sorted(glob.glob(os.path.join(pcaps, "*.pcap"))):
    n_files += 1
    for frame in frames(path):
        n_frames += 1
        put(bytes([SEL_ETHERNET]) + frame)
        et, ip = ip_of(frame)
        if et not in (0x0800, 0x86DD):
            continue
        put(bytes([SEL_RAW_IP]) + ip)
        # SLL: packet type 0 (to us), ARPHRD_ETHER, 6-byte address, protocol.
        sll = struct.pack("!HHH8sH", 0, 1, 6, frame[6:12], et)
        put(bytes([SEL_SLL]) + sll + ip)
        # SLL2: protocol, reserved, ifindex, ARPHRD_ETHER, type, addr len, addr.
        sll2 = struct.pack("!HHIHBB8s", et, 0, 2, 1, 0, 6, frame[6:12])
        put(bytes([SEL_SLL2]) + sll2 + ip)
print("seed-corpus: %d frames from %d captures -> %d files in %s"
      % (n_frames, n_files, len(written), out))
EOF
