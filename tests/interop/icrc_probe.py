#!/usr/bin/env python3
"""icrc_probe.py - the negative control of the suite's ICRC checks.

Sends two RoCE v2 packets from the host end of the bridge to the guest's
rxe0: UD SEND_ONLY to QP1 (the GSI QP the kernel creates for every port),
P_Key 0xFFFF, Q_Key 0x80010000, 64 bytes of zeros. The first carries the
right ICRC, the second the same ICRC with one bit flipped. The kernel
checks the ICRC after the QP and key checks and before anything else, so:

  * the guest logs "bad ICRC from 10.99.0.1" for the second packet only
    (run.sh counts those lines in dmesg before and after);
  * `rxe dump --check` on the capture must report exactly one bad ICRC.

The ICRC is computed here independently of rxe-rs (zlib's CRC-32 over the
masked headers, as rxe_icrc.c does), over the IPv4 header as Linux sends it
from an unconnected UDP socket with IP_PMTUDISC_DO: IP ID 0, DF, TTL 64.

Usage (inside the test netns): icrc_probe.py SRC_IP DST_IP
"""
import socket
import struct
import sys
import time
import zlib

IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2
UD_SEND_ONLY = 0x64
GSI_QKEY = 0x80010000


def icrc(ip_hdr, udp_hdr, ib):
    ip = bytearray(ip_hdr)
    ip[1] = 0xFF                       # TOS
    ip[8] = 0xFF                       # TTL
    ip[10:12] = b"\xff\xff"            # header checksum
    udp = bytearray(udp_hdr)
    udp[6:8] = b"\xff\xff"             # UDP checksum
    ib = bytearray(ib)
    ib[4] = 0xFF                       # BTH resv8a
    return zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(ib))


def main():
    src, dst = sys.argv[1], sys.argv[2]
    payload = bytes(64)
    bth = struct.pack(">BBHII", UD_SEND_ONLY, 0, 0xFFFF, 1, 0x123456)
    deth = struct.pack(">II", GSI_QKEY, 0x4242)
    ib = bth + deth + payload
    udp_len = 8 + len(ib) + 4
    ip_hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                         socket.inet_aton(src), socket.inet_aton(dst))
    udp_hdr = struct.pack(">HHHH", 4791, 4791, udp_len, 0)
    good = icrc(ip_hdr, udp_hdr, ib)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    s.bind((src, 4791))
    s.sendto(ib + struct.pack("<I", good), (dst, 4791))
    time.sleep(0.3)
    s.sendto(ib + struct.pack("<I", good ^ 0x00010000), (dst, 4791))
    print("sent a UD SEND to QP1 with ICRC 0x%08x (right) and 0x%08x (one bit flipped)"
          % (good, good ^ 0x00010000))


if __name__ == "__main__":
    main()
