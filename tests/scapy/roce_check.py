#!/usr/bin/env python3
"""roce_check.py - independent RoCE v2 ICRC cross-checker built on scapy.

rxe-rs computes and verifies the RoCE v2 Invariant CRC (ICRC) itself.  This
script gives it a second, independent opinion: every ICRC here is computed by
scapy's own code (``scapy.contrib.roce.BTH.compute_icrc``), never by a local
re-implementation.  Only scapy is needed (``pip install scapy``; written
against scapy 2.8.0, Python 3.11).

Command-line contract
---------------------
``python3 roce_check.py gen``
    Prints JSON lines ``{"name": str, "frame_hex": str, "expect_icrc_ok": bool}``
    to stdout.  Each frame_hex is a whole Ethernet frame (no FCS):
    Ether [/ 802.1Q] / IPv4|IPv6 / UDP(dport=4791) / BTH / ... / ICRC.
    Every verdict is checked with scapy before anything is printed; if a
    check fails nothing is printed and the exit status is non-zero.

``python3 roce_check.py verify``
    Reads JSON lines ``{"name": str, "frame_hex": str}`` from stdin and prints
    one JSON line per input:
    ``{"name": str, "icrc_ok": bool, "opcode": int, "dest_qp": int, "psn": int}``.
    icrc_ok is scapy's verdict: scapy recomputes the ICRC over the frame and
    compares it with the last 4 bytes of the UDP payload (which are the last 4
    bytes of the frame unless the frame carries Ethernet padding).  A frame
    that is not RoCE v2 at all gets ``icrc_ok: false``, null opcode/dest_qp/psn
    and an extra ``"error"`` string.  Exit status 0 (2 on malformed input).

``python3 roce_check.py verify --pcap FILE [FILE...]``
    Same output for every RoCE v2 frame (UDP dport 4791) of each Ethernet
    pcap/pcapng file, named ``FILE#N`` (N = 1-based frame number, as in
    Wireshark); other frames (ARP, ...) are skipped.  A per-file summary goes
    to stderr.  Exit status 1 if any RoCE frame fails or no RoCE frame is found.

The ICRC (IBTA RoCE v2 annex A17, Linux drivers/infiniband/sw/rxe/rxe_icrc.c)
------------------------------------------------------------------------------
CRC-32 (IEEE 802.3, reflected; the same as zlib.crc32) over
    8 bytes 0xff (stands in for the masked IB LRH)
  | IPv4 header with TOS = 0xff, TTL = 0xff, header checksum = 0xffff
    (IPv6: traffic class = 0xff, flow label = 0xfffff, hop limit = 0xff)
  | UDP header with checksum = 0xffff
  | BTH with byte 4 (FECN, BECN, 6 reserved bits) = 0xff
  | everything after the BTH up to, excluding, the ICRC,
stored as the last 4 bytes of the UDP payload, least significant byte first.
scapy implements exactly this for both IPv4 and IPv6 (see BTH.compute_icrc).

scapy quirks found (and how this script handles them)
-----------------------------------------------------
1. Ethernet padding.  When a frame shorter than 60 bytes is padded, scapy's
   dissector hangs the padding as a ``Padding`` layer at the end of the chain,
   and ``compute_icrc`` (which serialises ``BTH.payload``) then includes the
   padding bytes in the CRC -> wrong ICRC for a correct padded frame.
   Handled: ``parse_roce`` rebuilds the chain from exactly the UDP payload.
2. UDP payload guessing.  scapy picks the UDP payload class from its port
   bindings, and the source port can win: a RoCE packet with UDP sport 53 is
   dissected as DNS, not BTH.  Handled: the UDP payload is always decoded
   explicitly as BTH when dport == 4791.
3. Byte order of the ``icrc`` field.  BTH.icrc is an FCSField read with
   fmt "!I", i.e. the 4 wire bytes as a big-endian integer, which is the
   byte-swap of the CRC-32 value (the wire format is little-endian).  So
   ``BTH(icrc=zlib.crc32(...))`` would be wrong; this script only ever lets
   scapy fill the field (icrc=None) or copies it from a dissected frame, and
   compares bytes, not integers.
4. Missing header classes.  scapy.contrib.roce has BTH, AETH, CNPPadding (and
   the ``cnp()`` helper) and GRH only.  RETH, DETH, ImmDt, IETH, AtomicETH and
   AtomicAckETH are packed here with struct and put after the BTH as Raw (the
   ICRC is still computed by scapy).  AETH is bound (for dissection) only to
   the ACKNOWLEDGE opcodes, not to ATOMIC ACKNOWLEDGE or RDMA READ responses;
   irrelevant for the ICRC.  The opcode table lacks SEND_*_WITH_INVALIDATE
   (0x16/0x17); the opcode byte is still free-form.
5. GRH is for RoCE v1 (EtherType 0x8915) only; compute_icrc returns 0 (with a
   warning) for anything not below UDP, so RoCE v1 is not covered here.
"""

import argparse
import json
import os
import struct
import sys

try:
    from scapy.compat import raw
    from scapy.config import conf
    from scapy.contrib.roce import AETH, BTH, cnp  # cnp() = BTH / CNPPadding
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw
    from scapy.utils import RawPcapReader
except ImportError:  # pragma: no cover - environment problem, not a bug
    sys.exit("roce_check.py needs scapy: pip install scapy")

ROCE_V2_PORT = 4791
ETH_MIN_FRAME = 60  # minimum Ethernet frame length without FCS

conf.verb = 0  # no chatter from scapy on stdout


class NotRoCE(Exception):
    """The frame is not Ether/[802.1Q]/IP|IPv6/UDP(dport 4791)/BTH.../ICRC."""


# --------------------------------------------------------------------------
# Dissection and scapy's ICRC verdict (shared by gen's self-checks and verify)
# --------------------------------------------------------------------------

def parse_roce(frame):
    """Dissect a whole Ethernet frame with scapy.

    Returns (pkt, ip, udp, bth) where the UDP payload has been decoded as
    BTH (and whatever scapy binds after it) from *exactly* the UDP payload
    bytes: no Ethernet padding (quirk 1), no port-binding guess (quirk 2).
    Raises NotRoCE if the frame is not a RoCE v2 packet.
    """
    pkt = Ether(frame)
    udp = pkt.getlayer(UDP)
    if udp is None:
        raise NotRoCE("no UDP layer")
    if udp.dport != ROCE_V2_PORT:
        raise NotRoCE("UDP dport %d is not %d" % (udp.dport, ROCE_V2_PORT))
    ip = udp.underlayer
    if not isinstance(ip, (IP, IPv6)):
        raise NotRoCE("UDP not directly over IPv4/IPv6 (extension headers?)")
    # udp.original is the datagram as handed to the UDP dissector: already cut
    # to the IP length, so it excludes any Ethernet padding.
    datagram = udp.original
    if udp.len is None or not 8 <= udp.len <= len(datagram):
        raise NotRoCE("bad UDP length")
    ib = bytes(datagram[8:udp.len])
    if len(ib) < 12 + 4:
        raise NotRoCE("UDP payload shorter than BTH + ICRC")
    udp.remove_payload()  # also drops the Padding layer, if any
    udp.add_payload(BTH(ib))  # sets bth.underlayer = udp, as compute_icrc needs
    return pkt, ip, udp, udp[BTH]


def scapy_icrc_ok(frame):
    """scapy's verdict on one frame: (icrc_ok, bth).  Raises NotRoCE."""
    _, _, udp, bth = parse_roce(frame)
    ib = bytes(udp.original[8:udp.len])
    stored = ib[-4:]
    # compute_icrc ignores its argument and rebuilds the masked pseudo-packet
    # from bth.underlayer (UDP) and its underlayer (IP or IPv6).
    computed = bth.compute_icrc(ib)
    return computed == stored, bth


def verdict(name, frame):
    """The JSON object that `verify` prints for one frame."""
    try:
        ok, bth = scapy_icrc_ok(frame)
    except NotRoCE as e:
        return {"name": name, "icrc_ok": False, "opcode": None,
                "dest_qp": None, "psn": None, "error": str(e)}
    return {"name": name, "icrc_ok": ok, "opcode": bth.opcode,
            "dest_qp": bth.dqpn, "psn": bth.psn}


# --------------------------------------------------------------------------
# Extension headers scapy lacks (quirk 4), packed big-endian as on the wire
# --------------------------------------------------------------------------

def reth(va, rkey, dma_len):
    """RDMA Extended Transport Header: VA(8) R_Key(4) DMA Length(4)."""
    return struct.pack("!QII", va, rkey, dma_len)


def deth(qkey, src_qp):
    """Datagram Extended Transport Header: Q_Key(4) reserved(1) SrcQP(3)."""
    return struct.pack("!II", qkey, src_qp & 0xFFFFFF)


def immdt(imm):
    """Immediate Data Extended Transport Header (4 bytes)."""
    return struct.pack("!I", imm)


def ieth(rkey):
    """Invalidate Extended Transport Header: R_Key to invalidate (4 bytes)."""
    return struct.pack("!I", rkey)


def atomic_eth(va, rkey, swap_add, compare):
    """Atomic Extended Transport Header: VA(8) R_Key(4) Swap/Add(8) Compare(8)."""
    return struct.pack("!QIQQ", va, rkey, swap_add, compare)


def atomic_ack_eth(orig):
    """Atomic Acknowledge Extended Transport Header: original remote data (8)."""
    return struct.pack("!Q", orig)


def data(n, seed=0):
    """n bytes of a deterministic, non-repeating-looking payload."""
    return bytes((i * 37 + seed * 101 + 11) & 0xFF for i in range(n))


def padded(payload):
    """(pad count, payload + zero pad) so that the length is a multiple of 4."""
    pad = -len(payload) % 4
    return pad, payload + b"\x00" * pad


# --------------------------------------------------------------------------
# gen: the packet catalogue
# --------------------------------------------------------------------------

SRC_MAC, DST_MAC = "02:00:5e:10:00:01", "02:00:5e:10:00:02"
# Documentation address ranges (RFC 5737 / RFC 3849); frames are never sent.
SRC_V4, DST_V4 = "192.0.2.11", "192.0.2.12"
SRC_V6, DST_V6 = "2001:db8::11", "2001:db8::12"
DEST_QP = 0x0012AB
PSN = 0xABCDEF


def transport_cases():
    """(name, BTH/... stack) pairs: everything above UDP, ICRC left to scapy.

    BTH fields are non-trivial (solicited/migreq/ackreq set, PSN with high
    bits, a non-default P_Key on some) so that mistakes in field placement
    show up.  BTH byte 4 (FECN/BECN/resv) is 0 here; the masked variants
    change it.
    """
    def bth(opcode, payload_len=0, **kw):
        pad = -payload_len % 4
        fields = dict(opcode=opcode, solicited=0, migreq=1, padcount=pad,
                      version=0, pkey=0xFFFF, dqpn=DEST_QP, ackreq=0, psn=PSN)
        fields.update(kw)
        return BTH(**fields)

    cases = []
    # RC SEND ONLY with every pad count (0, 1, 3, 4 bytes) and a full MTU.
    for n in (0, 1, 3, 4, 1024):
        _, body = padded(data(n, seed=n))
        cases.append(("rc_send_only_len%d" % n,
                      bth(0x04, n, solicited=1, ackreq=1) / Raw(body)))
    _, body = padded(data(1024, seed=7))
    cases.append(("rc_send_first_len1024", bth(0x00, 1024) / Raw(body)))
    _, body = padded(data(5, seed=8))
    cases.append(("rc_send_last_len5", bth(0x02, 5, ackreq=1) / Raw(body)))
    _, body = padded(data(6, seed=9))
    cases.append(("rc_send_only_imm_len6",
                  bth(0x05, 6, ackreq=1) / Raw(immdt(0xC0FFEE01) + body)))
    _, body = padded(data(7, seed=10))
    cases.append(("rc_send_only_inv_len7",
                  bth(0x17, 7, ackreq=1) / Raw(ieth(0x00ABCD12) + body)))
    # RDMA WRITE / READ: RETH.
    _, body = padded(data(13, seed=11))
    cases.append(("rc_rdma_write_only_len13",
                  bth(0x0A, 13, ackreq=1)
                  / Raw(reth(0x00007F00DEADB000, 0x1234ABCD, 13) + body)))
    _, body = padded(data(2, seed=12))
    cases.append(("rc_rdma_write_only_imm_len2",
                  bth(0x0B, 2, ackreq=1)
                  / Raw(reth(0x00007F00DEADB100, 0x1234ABCD, 2)
                        + immdt(0x01020304) + body)))
    cases.append(("rc_rdma_read_request",
                  bth(0x0C, ackreq=1)
                  / Raw(reth(0x00007F00DEADC000, 0x00C0FFEE, 4096))))
    _, body = padded(data(511, seed=13))
    cases.append(("rc_rdma_read_response_only_len511",
                  bth(0x10, 511) / AETH(syndrome=0x1F, msn=0x000102) / Raw(body)))
    # Acknowledgements: ACK (credit count 31), NAK PSN sequence error, RNR NAK.
    cases.append(("rc_ack", bth(0x11) / AETH(syndrome=0x1F, msn=0x000345)))
    cases.append(("rc_nak_psn_seq_err", bth(0x11) / AETH(syndrome=0x60, msn=0x000346)))
    cases.append(("rc_rnr_nak", bth(0x11) / AETH(syndrome=0x2E, msn=0x000347)))
    # Atomics.
    cases.append(("rc_compare_swap",
                  bth(0x13, ackreq=1)
                  / Raw(atomic_eth(0x00007F00DEADD008, 0x0BADF00D,
                                   0x1111222233334444, 0x5555666677778888))))
    cases.append(("rc_fetch_add",
                  bth(0x14, ackreq=1)
                  / Raw(atomic_eth(0x00007F00DEADD010, 0x0BADF00D, 0x10, 0))))
    cases.append(("rc_atomic_ack",
                  bth(0x12) / AETH(syndrome=0x1F, msn=0x000348)
                  / Raw(atomic_ack_eth(0x5555666677778888))))
    # UC.
    _, body = padded(data(9, seed=14))
    cases.append(("uc_send_only_len9", bth(0x24, 9) / Raw(body)))
    _, body = padded(data(64, seed=15))
    cases.append(("uc_rdma_write_only_len64",
                  bth(0x2A, 64) / Raw(reth(0x00007F00DEADE000, 0x00000077, 64) + body)))
    # UD: DETH (and ImmDt), a P_Key other than the default, and a GSI (QP1)
    # MAD-sized datagram with the well-known GSI Q_Key.
    _, body = padded(data(30, seed=16))
    cases.append(("ud_send_only_len30",
                  bth(0x64, 30, pkey=0x8001, dqpn=0x000C0D)
                  / Raw(deth(0x11111111, 0x000A0B) + body)))
    _, body = padded(data(3, seed=17))
    cases.append(("ud_send_only_imm_len3",
                  bth(0x65, 3, solicited=1, dqpn=0x000C0D)
                  / Raw(deth(0x11111111, 0x000A0B) + immdt(0xFEEDFACE) + body)))
    cases.append(("ud_send_only_qp1_mad256",
                  bth(0x64, 256, dqpn=1)
                  / Raw(deth(0x80010000, 1) + data(256, seed=18))))
    # CNP, through scapy's own helper (it sets BECN; 16 reserved bytes).
    cases.append(("cnp", cnp(DEST_QP)))
    return cases


def l3_stack(ipver, vlan, udp_csum_zero, sport):
    """Ether [/ Dot1Q] / IP|IPv6 / UDP with non-trivial masked fields."""
    eth = Ether(src=SRC_MAC, dst=DST_MAC)
    if vlan:
        eth = eth / Dot1Q(prio=3, vlan=100)
    if ipver == 4:
        # TOS 0x6a = DSCP 26 + ECT(0); DF set as rxe does; TTL 64.
        l3 = IP(src=SRC_V4, dst=DST_V4, tos=0x6A, ttl=64, id=0x1D2C, flags="DF")
    else:
        # Traffic class 0x6a, flow label nonzero, hop limit 64.
        l3 = IPv6(src=SRC_V6, dst=DST_V6, tc=0x6A, fl=0x5A5A5, hlim=64)
    # chksum=None lets scapy compute the real UDP checksum; 0 = "no checksum"
    # (IPv4 only, as RFC 768 allows).
    udp = UDP(sport=sport, dport=ROCE_V2_PORT, chksum=0 if udp_csum_zero else None)
    return eth / l3 / udp


def offsets(pkt):
    """Byte offsets of the L3, UDP and BTH headers in a frame without padding."""
    total = len(raw(pkt))
    l3 = pkt[IP] if IP in pkt else pkt[IPv6]
    return (total - len(raw(l3)), total - len(raw(pkt[UDP])),
            total - len(raw(pkt[BTH])))


def flip(frame, pos, mask):
    """frame with the bits of mask flipped in byte pos."""
    b = bytearray(frame)
    b[pos] ^= mask
    return bytes(b)


def rebuild(frame, change):
    """Dissect frame, apply change(pkt, ip, udp, bth) and rebuild it.

    All fields of the dissected packet are explicit, ICRC included, so only
    what change() touches differs (it sets chksum=None where scapy should
    recompute the IPv4 header checksum, as a router would).
    """
    pkt, ip, udp, bth = parse_roce(frame)
    change(pkt, ip, udp, bth)
    return raw(pkt)


def set_fields(layer_name, **fields):
    """A change() for rebuild() that sets fields on one of the layers."""
    def change(pkt, ip, udp, bth):
        layer = {"dot1q": pkt.getlayer(Dot1Q), "ip": ip, "udp": udp,
                 "bth": bth}[layer_name]
        for k, v in fields.items():
            setattr(layer, k, v)
    return change


def variants(frame, ipver, vlan):
    """(suffix, frame, expect_icrc_ok) for the copies of one good frame."""
    pkt, ip, udp, bth = parse_roce(frame)
    l3_off, udp_off, bth_off = offsets(pkt)
    last = len(frame) - 5  # last byte covered by the ICRC
    out = []

    # Covered, NOT masked: one bit flipped, old ICRC kept -> must fail.
    src_last = l3_off + (15 if ipver == 4 else 23)  # last byte of source addr
    out.append(("flip:ip-src", flip(frame, src_last, 0x01), False))
    if ipver == 4:
        out.append(("flip:ipv4-id", flip(frame, l3_off + 5, 0x01), False))
    out.append(("flip:udp-sport", flip(frame, udp_off + 1, 0x01), False))
    out.append(("flip:bth-dest-qp", flip(frame, bth_off + 7, 0x01), False))
    # BTH byte 8 (AckReq + 7 reserved bits) is covered, unlike byte 4:
    # catches an implementation that masks the wrong reserved byte.
    out.append(("flip:bth-ackreq", flip(frame, bth_off + 8, 0x80), False))
    # Last covered byte: payload or pad when there is one, else a header.
    out.append(("flip:tail", flip(frame, last, 0x80), False))
    out.append(("flip:icrc", flip(frame, len(frame) - 1, 0x01), False))

    # MASKED fields changed, old ICRC kept -> must still pass.
    if ipver == 4:
        out.append(("mask:ipv4-ttl", rebuild(frame, set_fields("ip", ttl=1, chksum=None)), True))
        # ECN CE marking plus a different DSCP, header checksum fixed up.
        out.append(("mask:ipv4-tos", rebuild(frame, set_fields("ip", tos=0xBB, chksum=None)), True))
        out.append(("mask:ipv4-hdr-chksum",
                    rebuild(frame, set_fields("ip", chksum=ip.chksum ^ 0x5AA5)), True))
    else:
        out.append(("mask:ipv6-hop-limit", rebuild(frame, set_fields("ip", hlim=1)), True))
        out.append(("mask:ipv6-tclass", rebuild(frame, set_fields("ip", tc=0x97)), True))
        out.append(("mask:ipv6-flow-label", rebuild(frame, set_fields("ip", fl=0xA5A5A)), True))
    new_csum = 0x1234 if udp.chksum == 0 else (0 if ipver == 4 else udp.chksum ^ 0xFFFF)
    out.append(("mask:udp-chksum", rebuild(frame, set_fields("udp", chksum=new_csum)), True))
    out.append(("mask:bth-byte4",
                rebuild(frame, set_fields("bth", fecn=1, becn=1, resv6=0x15)), True))

    # Not covered at all (layer 2): must still pass.
    out.append(("l2:src-mac", flip(frame, 11, 0x02), True))
    if vlan:
        out.append(("l2:vlan-pcp", rebuild(frame, set_fields("dot1q", prio=5)), True))
    if len(frame) < ETH_MIN_FRAME:
        # What the wire carries: zero padding up to 60 bytes after the ICRC.
        out.append(("l2:eth-pad60", frame + b"\x00" * (ETH_MIN_FRAME - len(frame)), True))
    return out


def generate():
    """All (name, frame, expect_icrc_ok), each already checked with scapy."""
    records = []
    sport = 0xC000
    for ipver in (4, 6):
        for vlan in (False, True):
            for i, (kind, roce) in enumerate(transport_cases()):
                sport += 1  # rxe derives the source port from the QP: vary it
                # IPv4: alternate a real and a zero UDP checksum.  IPv6: always
                # a real one (zero is not allowed for UDP over IPv6).
                zero_csum = ipver == 4 and i % 2 == 1
                pkt = l3_stack(ipver, vlan, zero_csum, sport) / roce
                frame = raw(pkt)  # scapy fills BTH.icrc (icrc=None)
                base = "v%d%s/%s" % (ipver, "-vlan" if vlan else "", kind)

                # The frame as built must dissect back to what was asked for.
                _, bth = scapy_icrc_ok(frame)
                want = pkt[BTH]
                assert (bth.opcode, bth.dqpn, bth.psn) == (want.opcode, want.dqpn, want.psn), base

                records.append((base, frame, True))
                for suffix, f, expect in variants(frame, ipver, vlan):
                    records.append(("%s~%s" % (base, suffix), f, expect))

    # Self-check: scapy's own verdict must agree with every expectation.
    names = set()
    for name, frame, expect in records:
        assert name not in names, "duplicate name " + name
        names.add(name)
        ok, _ = scapy_icrc_ok(frame)
        if ok != expect:
            raise AssertionError("%s: scapy says icrc_ok=%s, expected %s" % (name, ok, expect))
    return records


def cmd_gen(_args):
    records = generate()  # fully checked before anything is printed
    for name, frame, expect in records:
        print(json.dumps({"name": name, "frame_hex": frame.hex(),
                          "expect_icrc_ok": expect}))
    bad = sum(1 for r in records if not r[2])
    print("gen: %d frames (%d expect icrc ok, %d expect bad)"
          % (len(records), len(records) - bad, bad), file=sys.stderr)
    return 0


# --------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------

def verify_stdin():
    for lineno, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            name, frame = obj["name"], bytes.fromhex(obj["frame_hex"])
        except (ValueError, KeyError, TypeError) as e:
            print("verify: stdin line %d: %s" % (lineno, e), file=sys.stderr)
            return 2
        print(json.dumps(verdict(name, frame)))
    return 0


def verify_pcaps(paths):
    status = 0
    for path in paths:
        reader = RawPcapReader(path)
        if reader.linktype != 1:  # DLT_EN10MB
            print("verify: %s: link type %d is not Ethernet"
                  % (path, reader.linktype), file=sys.stderr)
            status = 1
            continue
        n_roce = n_ok = 0
        for number, (frame, _meta) in enumerate(reader, 1):
            result = verdict("%s#%d" % (os.path.basename(path), number), frame)
            if "error" in result:  # not RoCE v2 (ARP, IPv6 ND, ...): skip
                continue
            n_roce += 1
            n_ok += result["icrc_ok"]
            print(json.dumps(result))
        reader.close()
        print("verify: %s: %d RoCE v2 frames, ICRC ok %d, bad %d"
              % (path, n_roce, n_ok, n_roce - n_ok), file=sys.stderr)
        if n_roce == 0 or n_ok != n_roce:
            status = 1
    return status


def cmd_verify(args):
    return verify_pcaps(args.pcap) if args.pcap else verify_stdin()


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="RoCE v2 ICRC cross-checker built on scapy.contrib.roce")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("gen", help="print test frames as JSON lines").set_defaults(func=cmd_gen)
    v = sub.add_parser("verify", help="scapy's ICRC verdict on frames from "
                       "stdin (JSON lines) or from pcap files")
    v.add_argument("--pcap", nargs="+", metavar="FILE",
                   help="read Ethernet frames from these pcap files instead of stdin")
    v.set_defaults(func=cmd_verify)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
