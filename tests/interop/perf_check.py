#!/usr/bin/env python3
"""perf_check.py - check the data of a perftest scenario against its capture.

perftest never checks data: it fills its buffers with rand() (zeros for
ib_write_lat) and measures. This checker makes the perftest scenarios of
run.sh assert what moved. `rxe perf --dump-buffer PATH` (the rxe-rs side)
fills its buffer with random bytes, writes it to PATH.init before the test
and to PATH after it, and prints

    RXE_PERF_BUFFER file=PATH va=0x.. len=N local=0x.. target=0x.. remote=0x.. qpn=.. peer_qpn=..

(va: our buffer's first address; local: where our requests take their data
from and where READ responses / atomic results land; target: what we gave
the peer to write into / where our receives are; remote: what the peer gave
us). The checker reads every RoCE v2 packet of the capture (plain pcap,
Ethernet, IPv4, UDP 4791; written independently of rxe-rs) and checks, for
the packets of the two QPs:

  peer -> us  WRITE          the bytes at the RETH address (MIDDLE/LAST by
                             PSN) are in our final buffer (the last write of
                             each byte wins; perftest cycles the RETH address
                             through a page for small messages)
  peer -> us  SEND           the payload is in our receive area (last wins;
                             UD: after the 40-byte GRH area)
  us -> peer  READ request   our READ responses carry our buffer's bytes at
              + our response the requested address
  peer -> us  FETCH_ADD/     per address, in PSN order: the first original
              CMP_SWAP       value is what our buffer held before the test,
              + our ack      each next one is the previous one with the
                             operation applied, the final buffer holds the
                             last one with it applied: every atomic ran
                             exactly once, in order
  us -> peer  WRITE / SEND   the payload is our buffer's bytes (write_lat:
                             all but the last byte of each message, which is
                             perftest's iteration counter: 1, 2, 3, ...)
  peer -> us  READ response  the bytes landed in our buffer (last wins)
  peer -> us  atomic ack     per address the original values chain as above
                             (the peer executed each once, in order), and the
                             last one landed in our buffer

A retransmitted packet must carry the same bytes as the first copy. If
nothing was checked the run fails (no vacuous pass). With --selftest the
checks run a second time against a copy of the final buffer with one
checked byte flipped, and must then fail: the checker can fail.

Exit status 0 = data good, 1 = a mismatch (printed), 2 = bad input.
"""
import argparse
import re
import struct
import sys

OPS = {
    0x00: "SEND_FIRST", 0x01: "SEND_MIDDLE", 0x02: "SEND_LAST", 0x03: "SEND_LAST_IMM",
    0x04: "SEND_ONLY", 0x05: "SEND_ONLY_IMM", 0x06: "WRITE_FIRST", 0x07: "WRITE_MIDDLE",
    0x08: "WRITE_LAST", 0x09: "WRITE_LAST_IMM", 0x0A: "WRITE_ONLY", 0x0B: "WRITE_ONLY_IMM",
    0x0C: "READ_REQ", 0x0D: "READ_RESP_FIRST", 0x0E: "READ_RESP_MIDDLE",
    0x0F: "READ_RESP_LAST", 0x10: "READ_RESP_ONLY", 0x11: "ACK", 0x12: "ATOMIC_ACK",
    0x13: "CMP_SWAP", 0x14: "FETCH_ADD", 0x16: "SEND_LAST_INV", 0x17: "SEND_ONLY_INV",
}
M64 = (1 << 64) - 1


class Bad(Exception):
    pass


def packets(path):
    """(frame, src, dst, opcode, dest_qp, psn, fields, payload) of each RoCE v2 packet."""
    data = open(path, "rb").read()
    if len(data) < 24:
        raise Bad(f"{path}: not a pcap file")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise Bad(f"{path}: not a pcap file (pcapng is not read here)")
    linktype = struct.unpack(e + "I", data[20:24])[0]
    if linktype != 1:
        raise Bad(f"{path}: link type {linktype}, expected Ethernet (1)")
    off, frame = 24, 0
    while off + 16 <= len(data):
        incl = struct.unpack(e + "I", data[off + 8:off + 12])[0]
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        frame += 1
        if len(pkt) < 14 + 20 + 8 + 12:
            continue
        et = struct.unpack("!H", pkt[12:14])[0]
        l3 = 14
        if et == 0x8100:
            et = struct.unpack("!H", pkt[16:18])[0]
            l3 = 18
        if et != 0x0800:
            continue
        ihl = (pkt[l3] & 0xF) * 4
        if pkt[l3 + 9] != 17:
            continue
        tot = struct.unpack("!H", pkt[l3 + 2:l3 + 4])[0]
        src = ".".join(str(b) for b in pkt[l3 + 12:l3 + 16])
        dst = ".".join(str(b) for b in pkt[l3 + 16:l3 + 20])
        udp = l3 + ihl
        if struct.unpack("!H", pkt[udp + 2:udp + 4])[0] != 4791:
            continue
        end = l3 + tot  # drop Ethernet padding
        b = udp + 8
        op = pkt[b]
        pad = (pkt[b + 1] >> 4) & 3
        dqp = int.from_bytes(pkt[b + 5:b + 8], "big")
        psn = int.from_bytes(pkt[b + 9:b + 12], "big")
        h = b + 12
        base, tr = op & 0x1F, op >> 5
        f = {}
        if tr == 3:  # UD: DETH
            h += 8
        if base in (0x06, 0x0A, 0x0B, 0x0C):
            f["va"], f["rkey"], f["len"] = struct.unpack("!QII", pkt[h:h + 16])
            h += 16
        if base in (0x0D, 0x0F, 0x10, 0x11, 0x12):
            f["aeth"] = pkt[h:h + 4]
            h += 4
        if base == 0x12:
            f["orig"] = struct.unpack("!Q", pkt[h:h + 8])[0]
            h += 8
        if base in (0x13, 0x14):
            f["va"], f["rkey"], f["swap_add"], f["compare"] = struct.unpack("!QIQQ", pkt[h:h + 28])
            h += 28
        if base in (0x03, 0x05, 0x09, 0x0B, 0x16, 0x17):
            h += 4
        payload = pkt[h:end - 4 - pad]
        yield frame, src, dst, op, dqp, psn, f, payload


def psn_diff(a, b):
    """a - b in 24-bit PSN arithmetic."""
    d = (a - b) & 0xFFFFFF
    return d - (1 << 24) if d >= 1 << 23 else d


def atomic_next(orig, req):
    if req["op"] == 0x14:
        return (orig + req["swap_add"]) & M64
    return req["swap_add"] if orig == req["compare"] else orig


class Check:
    def __init__(self, a, buf, init, final):
        self.a, self.buf, self.init, self.final = a, buf, init, final
        self.errors = []
        self.counts = {}
        self.first_offset = None

    def err(self, msg):
        if len(self.errors) < 20:
            self.errors.append(msg)

    def count(self, what, n=1):
        self.counts[what] = self.counts.get(what, 0) + n

    def off(self, va, what, n):
        o = va - self.buf["va"]
        if o < 0 or o + n > len(self.final):
            self.err(f"{what}: address {va:#x}+{n} is outside our buffer ({self.buf['va']:#x}+{len(self.final)})")
            return None
        return o

    def compare(self, what, off, expected, frame):
        got = self.final[off:off + len(expected)]
        if self.first_offset is None and len(expected):
            self.first_offset = off
        if got != expected:
            i = next(k for k in range(len(expected)) if k >= len(got) or got[k] != expected[k])
            self.err(f"{what} (frame {frame}): byte {off + i} of our buffer is "
                     f"{got[i] if i < len(got) else None}, the wire carried {expected[i]}")
            return False
        self.count(what + " bytes", len(expected))
        return True

    def run(self, pkts):
        a, me, peer = self.a, self.a.host, self.a.peer
        buf = self.buf
        mtu = a.mtu
        loc = buf["local"]
        seen = {}          # (src, psn, op) -> payload of the first copy
        msg = {}           # src -> [[first psn, va or None, message index, packets or None]]
        nmsg = {me: -1, peer: -1}
        reads = {}         # psn -> READ request (requester src, va, len)
        atom = {}          # psn -> atomic request
        acks = {}          # (executor, va) -> [(psn, orig, frame)]
        image = {}         # offset -> (byte, frame) for writes into our buffer
        for frame, src, dst, op, dqp, psn, f, pl in pkts:
            if {src, dst} != {me, peer}:
                continue
            # only the two QPs of this test (a capture may hold others)
            if dqp != (buf["qpn"] if src == peer else buf["peer_qpn"]):
                continue
            base = op & 0x1F
            name = OPS.get(base, f"op{op:#x}")
            key = (src, psn, base)
            dup = key in seen
            if dup and base not in (0x11,):
                if seen[key] != pl:
                    self.err(f"frame {frame}: retransmitted {name} PSN {psn:#x} carries other bytes")
                self.count("retransmitted packets")
                continue
            seen[key] = pl
            inbound = src == peer
            # --- requests that carry data: SEND and WRITE ---
            if base <= 0x0B:
                write = base >= 0x06
                msgs = msg.setdefault(src, [])
                if base in (0x00, 0x04, 0x05, 0x06, 0x0A, 0x0B):
                    # a new message, unless it is a resend whose first copy the
                    # capture never saw (dropped before the tap)
                    if not any(m[0] == psn for m in msgs):
                        nmsg[src] += 1
                        npk = max(1, -(-f["len"] // mtu)) if "len" in f else None
                        msgs.append([psn, f.get("va"), nmsg[src], npk])
                # the message this packet belongs to: a go-back-N resend can
                # restart in the middle of an earlier one
                m = next((m for m in reversed(msgs)
                          if 0 <= psn_diff(psn, m[0]) < (m[3] or 1 << 23)), None)
                if m is None:
                    self.err(f"frame {frame}: {name} PSN {psn:#x} without the start of its message in the capture")
                    continue
                start, va, k = m[0], m[1], m[2]
                if m[3] is None and base in (0x02, 0x03, 0x04, 0x05, 0x16, 0x17):
                    m[3] = psn_diff(psn, start) + 1  # a SEND's length is known at its end
                o_in_msg = psn_diff(psn, start) * mtu
                last = base in (0x02, 0x03, 0x04, 0x05, 0x08, 0x09, 0x0A, 0x0B)
                kind = ("WRITE" if write else "SEND")
                if inbound:
                    # UD: the receive starts with the 40-byte GRH area
                    grh = 40 if op >> 5 == 3 else 0
                    dest = (va + o_in_msg) if write else (buf["target"] + grh + o_in_msg)
                    o = self.off(dest, f"{kind} from the peer", len(pl))
                    if o is None:
                        continue
                    for i, byte in enumerate(pl):
                        image[o + i] = (byte, frame)
                    self.count(f"{kind} packets from the peer")
                else:
                    src_va = (loc + (va - buf["remote"]) + o_in_msg) if write else (loc + o_in_msg)
                    o = self.off(src_va, f"{kind} from us", len(pl))
                    if o is None:
                        continue
                    data = bytes(pl)
                    if a.counter and last and data:
                        want = (k + 1) & 0xFF
                        if data[-1] != want:
                            self.err(f"{kind} from us (frame {frame}): message {k + 1} ends in {data[-1]}, "
                                     f"the iteration counter {want}")
                        data = data[:-1]
                    self.compare(f"{kind} from us", o, data, frame)
                continue
            if base == 0x0C:
                reads[psn] = (src, f["va"], f["len"])
                continue
            if base in (0x13, 0x14):
                atom[psn] = {"src": src, "op": base, "va": f["va"], "swap_add": f["swap_add"],
                             "compare": f["compare"], "frame": frame}
                continue
            if base in (0x0D, 0x0E, 0x0F, 0x10):
                req = None
                for p0, r in reads.items():
                    n = max(1, -(-r[2] // mtu))
                    if 0 <= psn_diff(psn, p0) < n:
                        req = (p0, r)
                        break
                if req is None:
                    self.err(f"frame {frame}: READ response PSN {psn:#x} answers no READ request in the capture")
                    continue
                p0, (rsrc, va, _) = req
                o_in_msg = psn_diff(psn, p0) * mtu
                if inbound:  # we asked, the data lands in our buffer
                    o = self.off(loc + (va - buf["remote"]) + o_in_msg, "READ response from the peer", len(pl))
                    if o is None:
                        continue
                    for i, byte in enumerate(pl):
                        image[o + i] = (byte, frame)
                    self.count("READ response packets from the peer")
                else:
                    o = self.off(va + o_in_msg, "READ response from us", len(pl))
                    if o is None:
                        continue
                    self.compare("READ response from us", o, bytes(pl), frame)
                    if self.init[o:o + len(pl)] != self.final[o:o + len(pl)]:
                        self.err(f"frame {frame}: the READ target changed during the test")
                continue
            if base == 0x12:
                req = atom.get(psn)
                if req is None:
                    self.err(f"frame {frame}: atomic ack PSN {psn:#x} answers no atomic request in the capture")
                    continue
                acks.setdefault((src, req["va"]), []).append((psn, f["orig"], frame, req))
                if inbound:  # the original value lands in our local buffer
                    o = self.off(loc + (req["va"] - buf["remote"]), "atomic result", 8)
                    if o is not None:
                        for i, byte in enumerate(f["orig"].to_bytes(8, "little")):
                            image[o + i] = (byte, frame)
        # writes into our buffer: the last one of each byte must be there
        for what in ("from the peer",):
            bad = 0
            for o in sorted(image):
                byte, frame = image[o]
                if self.first_offset is None:
                    self.first_offset = o
                if self.final[o] != byte:
                    bad += 1
                    if bad <= 3:
                        self.err(f"byte {o} of our buffer is {self.final[o]}, the last packet that wrote it "
                                 f"(frame {frame}) carried {byte}")
            if bad:
                self.err(f"{bad} of {len(image)} bytes written into our buffer differ from the capture")
            elif image:
                self.count("bytes landed in our buffer as the capture says", len(image))
                changed = sum(1 for o in image if self.init[o] != self.final[o])
                self.count("of them changed by the test", changed)
        # atomics: each executed exactly once, in order
        for (executor, va), lst in acks.items():
            p0 = min(lst, key=lambda t: t[2])[0]  # the first ack in the capture
            lst.sort(key=lambda t: psn_diff(t[0], p0))
            ours = executor == me
            for i in range(1, len(lst)):
                prev, cur = lst[i - 1], lst[i]
                want = atomic_next(prev[1], prev[3])
                if cur[1] != want:
                    self.err(f"atomic at {va:#x}: ack frame {cur[2]} returned {cur[1]:#x}, expected {want:#x} "
                             f"(frame {prev[2]} returned {prev[1]:#x})")
            self.count("atomic acks from " + ("us" if ours else "the peer"), len(lst))
            if ours:
                o = self.off(va, "atomic target", 8)
                if o is None:
                    continue
                before = int.from_bytes(self.init[o:o + 8], "little")
                if lst[0][1] != before:
                    self.err(f"atomic at {va:#x}: the first ack returned {lst[0][1]:#x}, our buffer held {before:#x}")
                after = atomic_next(lst[-1][1], lst[-1][3])
                self.compare("atomic target after the test", o, after.to_bytes(8, "little"), lst[-1][2])
        if not self.counts or not any(k for k in self.counts if "bytes" in k or "atomic" in k):
            self.err("nothing was checked: no data packet of the two QPs in the capture")
        return not self.errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pcap")
    ap.add_argument("hostlog", help="output of rxe perf --dump-buffer (the RXE_PERF_BUFFER line)")
    ap.add_argument("--host", required=True, help="our IP address")
    ap.add_argument("--peer", required=True, help="the peer's IP address")
    ap.add_argument("--mtu", type=int, required=True, help="path MTU")
    ap.add_argument("--counter", action="store_true",
                    help="write_lat: the last byte of each message we send is the iteration counter")
    ap.add_argument("--selftest", action="store_true",
                    help="also run the checks with one byte of the final buffer flipped: they must fail")
    a = ap.parse_args()
    try:
        line = next((l for l in open(a.hostlog, errors="replace") if l.startswith("RXE_PERF_BUFFER ")), None)
        if line is None:
            raise Bad(f"{a.hostlog}: no RXE_PERF_BUFFER line (rxe perf without --dump-buffer, or it failed)")
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        buf = {k: int(kv[k], 16) for k in ("va", "local", "target", "remote", "qpn", "peer_qpn")}
        final = open(kv["file"], "rb").read()
        init = open(kv["file"] + ".init", "rb").read()
        if len(final) != int(kv["len"]) or len(init) != len(final):
            raise Bad("buffer files do not have the length the RXE_PERF_BUFFER line gives")
        pk = list(packets(a.pcap))
    except (Bad, OSError, KeyError, ValueError) as e:
        print(f"perf_check: {e}", file=sys.stderr)
        return 2
    c = Check(a, buf, init, final)
    ok = c.run(pk)
    summary = ", ".join(f"{k} {v}" for k, v in c.counts.items())
    if not ok:
        print("DATA MISMATCH: " + "; ".join(c.errors))
        print(f"checked: {summary}")
        return 1
    if a.selftest:
        if c.first_offset is None:
            print("DATA SELFTEST FAILED: no byte of our buffer was compared")
            return 1
        planted = bytearray(final)
        planted[c.first_offset] ^= 0x01
        c2 = Check(a, buf, init, bytes(planted))
        if c2.run(pk):
            print(f"DATA SELFTEST FAILED: flipping byte {c.first_offset} of our buffer went unnoticed")
            return 1
        summary += f"; a byte flipped at {c.first_offset} is caught"
    print(f"DATA OK: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
