//! Everything here sends to loopback addresses only (127.0.0.0/8, ::1).

use super::gso::*;
use super::sys::*;
use super::transport::SocketDefaults;
use super::*;
use rxe_core::engine::IcrcStatus;
use rxe_core::engine::{CqId, Engine, EngineConfig, MrKeys, PdId, QpInit, RegionMemory, VecMemory};
use rxe_core::psn::Psn;
use rxe_core::types::*;
use rxe_core::wire::icrc;
use rxe_core::wire::icrc::IdDeltas;
use rxe_core::wire::{BthRepr, FrameRepr, IpRepr, Opcode, PacketRepr, UdpChecksum};
use rxe_core::wire::{RoceFrame, BTH_LEN, ICRC_LEN, ROCE_V2_PORT};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Binds on `preferred`, or on a stand-in 127.x address if another run
/// of these tests holds it.
fn bind_loopback(preferred: Ipv4Addr, mode: RecvMode) -> io::Result<UdpTransport> {
    let [_, _, c, d] = preferred.octets();
    let mut last = None;
    for k in 0..32u8 {
        let a = if k == 0 {
            preferred
        } else {
            Ipv4Addr::new(127, 100 + k, c, d)
        };
        match UdpTransport::bind_with(IpAddr::V4(a), mode) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            r => return r,
        }
    }
    Err(last.expect("tried"))
}

fn lo(d: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, d)
}

/// `None` (with a note) if raw sockets are not permitted here.
fn bind_raw(preferred: Ipv4Addr, test: &str) -> Option<UdpTransport> {
    match bind_loopback(preferred, RecvMode::Raw) {
        Ok(t) => {
            assert_eq!(t.recv_mode(), RecvMode::Raw);
            Some(t)
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            println!("SKIPPED {test}: no CAP_NET_RAW ({e})");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn bth(psn: u32) -> BthRepr {
    BthRepr {
        opcode: Opcode::RC_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x12,
        ack_req: true,
        psn: Psn::new(psn),
    }
}

/// A UDP payload (BTH through ICRC) with the ICRC `compute_udp` gives.
fn roce(src: IpAddr, dst: IpAddr, src_port: u16, psn: u32, data: &[u8]) -> Vec<u8> {
    let mut p = PacketRepr::new(bth(psn));
    p.payload = data;
    let mut buf = vec![0; p.buffer_len()];
    let n = p.emit(&mut buf).unwrap();
    buf.truncate(n);
    let crc = icrc::compute_udp(src, dst, src_port, &buf[..n - ICRC_LEN]).unwrap();
    buf[n - ICRC_LEN..].copy_from_slice(&crc.to_le_bytes());
    buf
}

fn transmit(from: &UdpTransport, dst: IpAddr, psn: u32, data: &[u8]) -> Transmit {
    Transmit {
        src: from.addr(),
        dst,
        src_port: from.src_port(),
        traffic_class: 0,
        hop_limit: 64,
        payload: roce(from.addr(), dst, from.src_port(), psn, data),
    }
}

/// Flips one payload bit after the ICRC was computed.
fn corrupt(mut t: Transmit) -> Transmit {
    t.payload[BTH_LEN + 1] ^= 0x10;
    t
}

/// Receives until `n` datagrams arrived (or 2 s passed); also returns
/// how many each call returned.
fn recv_n(t: &mut UdpTransport, n: usize) -> (Vec<Received>, Vec<usize>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    let (mut out, mut calls) = (Vec::new(), Vec::new());
    while out.len() < n && Instant::now() < deadline {
        let k = t
            .recv_batch(Some(Duration::from_millis(100)), &mut out)
            .unwrap();
        if k > 0 {
            calls.push(k);
        }
    }
    (out, calls)
}

fn assert_nothing_queued(t: &mut UdpTransport) {
    let mut out = Vec::new();
    assert_eq!(
        t.recv_batch(Some(Duration::from_millis(20)), &mut out)
            .unwrap(),
        0,
        "{out:?}"
    );
}

/// Sends a whole IPv4 packet through an `IPPROTO_RAW` socket (IP_HDRINCL).
fn send_ip_hdrincl(pkt: &[u8], dst: Ipv4Addr) -> io::Result<()> {
    let s = socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW)?;
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = to_sockaddr(SocketAddr::new(IpAddr::V4(dst), 0), &mut ss);
    // SAFETY: pkt and ss are valid for the lengths given.
    let r = unsafe {
        libc::sendto(
            s.as_raw_fd(),
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    assert_eq!(r as usize, pkt.len());
    Ok(())
}

/// A whole IPv4 packet as the kernel's rxe builds it: any IP ID, DF,
/// UDP checksum 0, a QP-hashed source port, a correct ICRC.
fn rxe_style_ipv4(src: Ipv4Addr, dst: Ipv4Addr, id: u16, psn: u32, data: &[u8]) -> Vec<u8> {
    let f = FrameRepr {
        eth: None,
        ip: IpRepr::V4 {
            src,
            dst,
            tos: 0,
            id,
            dont_fragment: true,
            ttl: 64,
        },
        udp_src_port: 50596,
        udp_checksum: UdpChecksum::Zero,
    };
    let mut p = PacketRepr::new(bth(psn));
    p.payload = data;
    let mut buf = vec![0; f.buffer_len(p.buffer_len())];
    let n = f.emit(&p, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn ipv4_plain_exchange_and_verdicts() {
    let mut a = bind_loopback(lo(4), RecvMode::Plain).unwrap();
    let mut b = bind_loopback(lo(5), RecvMode::Plain).unwrap();
    assert_eq!(a.recv_mode(), RecvMode::Plain);
    assert_eq!(a.src_port(), 4791);
    assert_eq!(a.local_addr(), SocketAddr::new(a.addr(), 4791));
    let (aa, ba) = (a.addr(), b.addr());
    let pkts = [
        transmit(&a, ba, 1, b"first packet"),
        corrupt(transmit(&a, ba, 2, b"second packet")),
        Transmit {
            traffic_class: 0x2e << 2,
            hop_limit: 3,
            ..transmit(&a, ba, 3, b"third packet, other TOS and TTL")
        },
        Transmit {
            hop_limit: 0,
            ..transmit(&a, ba, 4, b"fourth, default TTL")
        },
    ];
    assert_eq!(a.send_batch(&pkts).unwrap(), 4);
    let (got, _) = recv_n(&mut b, 4);
    let verdicts: Vec<_> = got.iter().map(|r| r.meta.icrc).collect();
    assert_eq!(
        verdicts,
        [
            // The corrupted one: no IPv4 ID explains its ICRC.
            IcrcStatus::Ok,
            IcrcStatus::Bad,
            IcrcStatus::Ok,
            IcrcStatus::Ok
        ]
    );
    for (r, t) in got.iter().zip(&pkts) {
        assert_eq!(r.data, t.payload);
        assert_eq!(
            r.meta,
            RecvMeta {
                src: aa,
                dst: ba,
                src_port: 4791,
                icrc: r.meta.icrc
            }
        );
    }
    assert_eq!(b.stats().icrc_bad, 1);
    assert_eq!(b.stats().icrc_unverified, 0);
    assert_eq!(b.stats().icrc_ok, 3);
    assert_eq!(b.stats().rx_packets, 4);
    assert_eq!(a.stats().tx_packets, 4);
    // And back.
    assert_eq!(b.send_batch(&[transmit(&b, aa, 9, b"reply")]).unwrap(), 1);
    let (got, _) = recv_n(&mut a, 1);
    assert_eq!(got[0].meta.icrc, IcrcStatus::Ok);
    assert_eq!(got[0].meta.src, ba);
    assert_nothing_queued(&mut a);
    assert_nothing_queued(&mut b);
}

#[test]
fn batch_of_64_through_sendmmsg_and_recvmmsg() {
    let mut a = bind_loopback(lo(6), RecvMode::Plain).unwrap();
    let mut b = bind_loopback(lo(7), RecvMode::Plain).unwrap();
    let pkts: Vec<_> = (0..64u32)
        .map(|i| {
            let data: Vec<u8> = (0..100 + 17 * i).map(|j| (i + j) as u8).collect();
            transmit(&a, b.addr(), i, &data)
        })
        .collect();
    assert_eq!(a.send_batch(&pkts).unwrap(), 64);
    let (got, calls) = recv_n(&mut b, 64);
    println!(
        "64 datagrams came in {} recvmmsg batches: {calls:?}",
        calls.len()
    );
    assert_eq!(got.len(), 64);
    for (r, t) in got.iter().zip(&pkts) {
        assert_eq!(r.data, t.payload);
        assert_eq!(r.meta.icrc, IcrcStatus::Ok);
    }
    assert!(calls.iter().any(|&k| k > 1), "no batching: {calls:?}");
    // More than one sendmmsg worth in one call.
    let many: Vec<_> = (0..200).map(|i| transmit(&a, b.addr(), i, b"x")).collect();
    assert_eq!(a.send_batch(&many).unwrap(), 200);
    let (got, calls) = recv_n(&mut b, 200);
    assert_eq!(got.len(), 200);
    // BATCH datagrams a call; with GSO each may hold up to 64 packets.
    let most = if b.gso() {
        BATCH * GSO_MAX_SEGMENTS
    } else {
        BATCH
    };
    assert!(calls.iter().all(|&k| k <= most), "{calls:?}");
    assert_eq!(a.stats().tx_packets, 264);
}

#[test]
fn recv_timeout_returns_zero_on_nothing() {
    // Auto: raw with CAP_NET_RAW, plain without; both must time out.
    let mut t = bind_loopback(lo(8), RecvMode::Auto).unwrap();
    println!("auto mode on {}: {}", t.addr(), t.recv_mode());
    assert_ne!(t.recv_mode(), RecvMode::Auto);
    let mut out = Vec::new();
    let start = Instant::now();
    assert_eq!(t.recv_batch(Some(Duration::ZERO), &mut out).unwrap(), 0);
    assert_eq!(
        t.recv_batch(Some(Duration::from_millis(50)), &mut out)
            .unwrap(),
        0
    );
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(50), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(out.is_empty());
    // A huge timeout does not overflow; something to read ends it.
    let addr = t.addr();
    assert_eq!(
        t.send_batch(&[transmit(&t, addr, 1, b"to self")]).unwrap(),
        1
    );
    assert_eq!(t.recv_batch(Some(Duration::MAX), &mut out).unwrap(), 1);
    assert_eq!(out[0].meta.icrc, IcrcStatus::Ok);
    assert!(t.wait_writable(Some(Duration::ZERO)).unwrap());
    let (rcv, snd) = t.buffer_sizes().unwrap();
    println!("socket buffers: rcv {rcv}, snd {snd}");
    // What was granted depends on privileges and net.core.[rw]mem_max.
    assert!(rcv > 0 && snd > 0);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    for a in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "ff02::1"] {
        let e = UdpTransport::bind(a.parse().unwrap()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{a}: {e}");
    }
    let e = UdpTransport::bind_with("::1".parse().unwrap(), RecvMode::Raw).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    // Not a local address: nothing is sent, bind just fails.
    let e = UdpTransport::bind("192.0.2.1".parse().unwrap()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable, "{e}");
    assert!(e.to_string().starts_with("bind 192.0.2.1:4791: "), "{e}");

    let mut t = bind_loopback(lo(12), RecvMode::Plain).unwrap();
    // Another transport shares the address (crate::share); a socket
    // that does not share it (no SO_REUSEPORT) keeps it to itself.
    let other = UdpTransport::bind(t.addr()).unwrap();
    assert_ne!(other.qpn_prefix(), t.qpn_prefix());
    drop(other);
    let hold = std::net::UdpSocket::bind((lo(14), ROCE_V2_PORT)).unwrap();
    let e = UdpTransport::bind(lo(14).into()).unwrap_err();
    drop(hold);
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("bind {}:4791: ", lo(14))), "{msg}");
    assert!(std::error::Error::source(e.get_ref().unwrap()).is_some());

    let me = t.addr();
    let good = transmit(&t, me, 1, b"ok");
    let wrong_src = Transmit {
        src: IpAddr::V4(lo(99)),
        ..good.clone()
    };
    let wrong_port = Transmit {
        src_port: 50000,
        ..good.clone()
    };
    let wrong_family = Transmit {
        dst: "::1".parse().unwrap(),
        ..good.clone()
    };
    for bad in [&wrong_src, &wrong_port, &wrong_family] {
        let e = t.send_batch(std::slice::from_ref(bad)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
    assert!(t
        .send_batch(std::slice::from_ref(&wrong_port))
        .unwrap_err()
        .to_string()
        .contains("udp_src_port"));
    // A bad packet after good ones: the good ones go, the next call
    // reports the bad one.
    let batch = [good.clone(), good.clone(), wrong_src.clone(), good.clone()];
    assert_eq!(t.send_batch(&batch).unwrap(), 2);
    assert!(t.send_batch(&batch[2..]).is_err());
    assert_eq!(t.send_batch(&batch[3..]).unwrap(), 1);
    assert_eq!(t.send_batch(&[]).unwrap(), 0);
    // One the kernel refuses (larger than a UDP datagram can be; the
    // loopback MTU is 64 KiB, so EMSGSIZE from path MTU discovery cannot
    // be shown here): the packets before it go, then it is the error.
    let mut huge = good.clone();
    huge.payload = vec![0; 70_000];
    let batch = [good.clone(), huge, good.clone()];
    assert_eq!(t.send_batch(&batch).unwrap(), 1);
    let e = t.send_batch(&batch[1..]).unwrap_err();
    assert_eq!(e.raw_os_error(), None, "wrapped with context");
    assert!(
        e.to_string()
            .starts_with(&format!("send to {me}:4791 from {me}:4791: ")),
        "{e}"
    );
    assert_eq!(t.send_batch(&batch[2..]).unwrap(), 1);

    // Garbage in: short and non-RoCE datagrams are handed out, never a panic.
    let (got, _) = recv_n(&mut t, 5);
    assert_eq!(got.len(), 5);
    assert!(got.iter().all(|r| r.meta.icrc == IcrcStatus::Ok));
    let junk = std::net::UdpSocket::bind((lo(1), 0)).unwrap();
    for len in [0usize, 1, 15, 16, 100] {
        junk.send_to(&vec![0xa5; len], t.local_addr()).unwrap();
    }
    let (got, _) = recv_n(&mut t, 5);
    assert_eq!(got.len(), 5);
    for r in &got {
        // Too short for an ICRC, or one no IPv4 ID explains.
        assert_eq!(r.meta.icrc, IcrcStatus::Bad, "{} bytes", r.data.len());
        assert_eq!(r.meta.src, IpAddr::V4(lo(1)));
        assert_eq!(r.meta.src_port, junk.local_addr().unwrap().port());
    }
}

/// ::1 is one address: IPv6 checks run in this one test, with the
/// transport sending to itself.
#[test]
fn ipv6_verdicts_and_zero_checksum() {
    let me: IpAddr = "::1".parse().unwrap();
    let mut tries = 0;
    let mut t = loop {
        match UdpTransport::bind_with(me, RecvMode::Auto) {
            Ok(t) => break t,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 60 => {
                tries += 1; // another run of this test
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                println!("SKIPPED ipv6_verdicts_and_zero_checksum: no ::1 ({e})");
                return;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(t.recv_mode(), RecvMode::Plain, "auto is plain for IPv6");
    let pkts = [
        transmit(&t, me, 1, b"v6 good"),
        corrupt(transmit(&t, me, 2, b"v6 bad")),
        Transmit {
            traffic_class: 0xb8,
            hop_limit: 1,
            ..transmit(&t, me, 3, b"v6 tclass and hop limit")
        },
    ];
    assert_eq!(t.send_batch(&pkts).unwrap(), 3);
    let (got, _) = recv_n(&mut t, 3);
    let verdicts: Vec<_> = got.iter().map(|r| r.meta.icrc).collect();
    assert_eq!(verdicts, [IcrcStatus::Ok, IcrcStatus::Bad, IcrcStatus::Ok]);
    assert_eq!(got[0].meta.src, me);
    assert_eq!(got[0].meta.dst, me);
    assert_eq!(got[0].meta.src_port, 4791);

    // Zero-checksum UDP, as the kernel's rxe sends over IPv6, from an
    // ephemeral port. A socket without UDP_NO_CHECK6_RX drops it.
    let zero = std::net::UdpSocket::bind((me, 0)).unwrap();
    setsockopt_int(
        zero.as_raw_fd(),
        libc::IPPROTO_UDP,
        libc::UDP_NO_CHECK6_TX,
        1,
    )
    .unwrap();
    let normal = std::net::UdpSocket::bind((me, 0)).unwrap();
    let control = std::net::UdpSocket::bind((me, 0)).unwrap();
    control
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let zport = zero.local_addr().unwrap().port();
    let payload = roce(me, me, zport, 7, b"zero checksum");
    zero.send_to(b"zero checksum to control", control.local_addr().unwrap())
        .unwrap();
    zero.send_to(&payload, t.local_addr()).unwrap();
    normal
        .send_to(b"checksummed", control.local_addr().unwrap())
        .unwrap();
    let mut buf = [0u8; 64];
    let n = control.recv(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        b"checksummed",
        "the control socket should have dropped the zero-checksum datagram"
    );
    let (got, _) = recv_n(&mut t, 1);
    assert_eq!(got.len(), 1, "zero-checksum datagram not received");
    assert_eq!(got[0].data, payload);
    assert_eq!(got[0].meta.src_port, zport);
    assert_eq!(got[0].meta.icrc, IcrcStatus::Ok);
    assert_eq!(t.stats().icrc_unverified, 0);
}

#[test]
fn ancillary_data_only_where_the_socket_differs() {
    let t = bind_loopback(lo(12), RecvMode::Plain).unwrap();
    let d = SocketDefaults { tos: 0, ttl: 64 };
    let (tos, ttl) = (libc::IP_TOS, libc::IP_TTL);
    let pkt = |traffic_class, hop_limit| Transmit {
        traffic_class,
        hop_limit,
        ..transmit(&t, t.addr(), 1, b"x")
    };
    let n = |p: Transmit| d.ancillary(&p, tos, ttl);
    assert_eq!(n(pkt(0, 64)).1, 0);
    assert_eq!(n(pkt(0, 0)).1, 0, "0: the socket's default TTL");
    let (c, k) = n(pkt(0xb8, 64));
    assert_eq!((k, c[0]), (1, (tos, 0xb8)));
    let (c, k) = n(pkt(0, 7));
    assert_eq!((k, c[0]), (1, (ttl, 7)));
    let (c, k) = n(pkt(0x02, 1));
    assert_eq!((k, c), (2, [(tos, 2), (ttl, 1)]));
    // A fresh socket's own: TOS 0 and the system's default TTL (1..=255).
    assert_eq!(t.defaults.tos, 0);
    assert!(t.defaults.ttl >= 1, "{:?}", t.defaults);
}

#[test]
fn raw_mode_verifies_every_ipv4_packet() {
    let Some(mut rx) = bind_raw(lo(9), "raw_mode_verifies_every_ipv4_packet") else {
        return;
    };
    let mut tx = bind_loopback(lo(10), RecvMode::Plain).unwrap();
    let mut plain_rx = bind_loopback(lo(11), RecvMode::Plain).unwrap();
    let (rxa, txa) = (rx.addr(), tx.addr());
    let (IpAddr::V4(rx4), IpAddr::V4(tx4), IpAddr::V4(plain4)) = (rxa, txa, plain_rx.addr()) else {
        unreachable!()
    };

    // From our own unconnected IP_PMTUDISC_DO socket: ID 0, DF, Ok.
    let pkts = [
        transmit(&tx, rxa, 1, b"from a UDP socket"),
        corrupt(transmit(&tx, rxa, 2, b"corrupted")),
    ];
    assert_eq!(tx.send_batch(&pkts).unwrap(), 2);
    // From "the kernel's rxe": a nonzero ID, zero UDP checksum, another port.
    let kernel_like = rxe_style_ipv4(tx4, rx4, 0x1234, 3, b"nonzero IP ID");
    send_ip_hdrincl(&kernel_like, rx4).unwrap();
    let mut bad_kernel_like = rxe_style_ipv4(tx4, rx4, 0x1235, 4, b"nonzero IP ID, bad");
    let last = bad_kernel_like.len() - ICRC_LEN - 1;
    bad_kernel_like[last] ^= 1;
    send_ip_hdrincl(&bad_kernel_like, rx4).unwrap();
    // Not RoCE: another port. The raw socket's filter keeps it out.
    let other = std::net::UdpSocket::bind((tx4, 0)).unwrap();
    other.send_to(b"not for 4791", (rx4, 9)).unwrap();

    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < 4 && Instant::now() < deadline {
        rx.recv_with(Some(Duration::from_millis(100)), |d| {
            let ip = d.ip_packet.expect("raw mode gives the IP packet").to_vec();
            got.push((d.meta, d.payload.to_vec(), ip));
        })
        .unwrap();
    }
    assert_eq!(got.len(), 4, "{got:?}");
    let id = |ip: &[u8]| u16::from_be_bytes([ip[4], ip[5]]);
    let df = |ip: &[u8]| ip[6] & 0x40 != 0;
    for (i, (meta, payload, ip)) in got.iter().enumerate() {
        assert_eq!(meta.dst, rxa);
        assert_eq!(meta.src, txa);
        assert_eq!(&ip[ip.len() - payload.len()..], &payload[..]);
        assert!(df(ip), "packet {i}: DF");
    }
    let (m, p, ip) = &got[0];
    assert_eq!(id(ip), 0, "unconnected IP_PMTUDISC_DO socket: IP ID 0");
    assert_eq!(m.icrc, IcrcStatus::Ok);
    assert_eq!(m.src_port, 4791);
    assert_eq!(p, &pkts[0].payload);
    assert_eq!(got[1].0.icrc, IcrcStatus::Bad);
    let (m, p, ip) = &got[2];
    assert_eq!(id(ip), 0x1234);
    assert_eq!(m.icrc, IcrcStatus::Ok, "a kernel-rxe-style packet verifies");
    assert_eq!(m.src_port, 50596);
    assert_eq!(&p[..], &kernel_like[28..]);
    assert_eq!(got[3].0.icrc, IcrcStatus::Bad);
    assert_eq!(rx.stats().icrc_unverified, 0);
    assert_eq!(rx.stats().icrc_ok, 2);
    assert_eq!(rx.stats().icrc_bad, 2);

    // The UDP socket queued nothing (its filter drops everything).
    let mut b = [0u8; 16];
    // SAFETY: b is valid for writes of its length.
    let r = unsafe {
        libc::recv(
            rx.udp.as_raw_fd(),
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_DONTWAIT,
        )
    };
    assert_eq!(r, -1);
    assert_eq!(
        io::Error::last_os_error().raw_os_error(),
        Some(libc::EAGAIN)
    );
    assert_nothing_queued(&mut rx);

    // The same kernel-style packet to a plain socket: Unverified.
    let to_plain = rxe_style_ipv4(tx4, plain4, 0x1234, 5, b"nonzero IP ID");
    send_ip_hdrincl(&to_plain, plain4).unwrap();
    let (got, _) = recv_n(&mut plain_rx, 1);
    assert_eq!(got[0].meta.icrc, IcrcStatus::Unverified);
    assert_eq!(got[0].meta.src_port, 50596);
    // Raw mode also sends (through the UDP socket).
    assert_eq!(rx.send_batch(&[transmit(&rx, txa, 1, b"back")]).unwrap(), 1);
    let (got, _) = recv_n(&mut tx, 1);
    assert_eq!(got[0].meta.icrc, IcrcStatus::Ok);

    // Per-packet TOS and TTL (ancillary data) reach the wire and do not
    // disturb the ICRC (both are masked). Packets with the socket's
    // own values go without ancillary data; one packet's values do
    // not stay for the next.
    let default_ttl = tx.defaults.ttl;
    let pkts = [
        Transmit {
            traffic_class: 0xb8,
            hop_limit: 7,
            ..transmit(&tx, rxa, 9, b"DSCP EF, TTL 7")
        },
        Transmit {
            hop_limit: default_ttl,
            ..transmit(&tx, rxa, 10, b"the socket's TOS and TTL")
        },
        Transmit {
            traffic_class: 0x02,
            hop_limit: 0,
            ..transmit(&tx, rxa, 11, b"ECT(0), the default TTL")
        },
        Transmit {
            hop_limit: default_ttl.wrapping_sub(1).max(1),
            ..transmit(&tx, rxa, 12, b"TOS 0, another TTL")
        },
    ];
    assert_eq!(tx.send_batch(&pkts).unwrap(), 4);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while seen.len() < 4 && Instant::now() < deadline {
        rx.recv_with(Some(Duration::from_millis(100)), |d| {
            let ip = d.ip_packet.unwrap();
            seen.push((d.meta.icrc, ip[1], ip[8], id(ip)));
        })
        .unwrap();
    }
    let ok = IcrcStatus::Ok;
    assert_eq!(
        seen,
        [
            (ok, 0xb8, 7, 0),
            (ok, 0, default_ttl, 0),
            (ok, 0x02, default_ttl, 0),
            (ok, 0, default_ttl.wrapping_sub(1).max(1), 0),
        ]
    );
}

/// One soft device for the end-to-end tests.
struct Dev {
    e: Engine,
    t: UdpTransport,
    cq: CqId,
    pd: PdId,
    mem: Arc<VecMemory>,
    mr: MrKeys,
    pending: Vec<Transmit>,
}

const IOVA: u64 = 0x1000_0000;

fn dev(t: UdpTransport, seed: u64) -> Dev {
    let mut config = EngineConfig::new(t.addr(), seed);
    config.udp_src_port = Some(t.src_port());
    let mut e = Engine::new(config);
    let pd = e.alloc_pd();
    let cq = e.create_cq(4096).unwrap();
    let mem = Arc::new(VecMemory::new(1 << 20));
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = e.reg_mr(pd, mem.clone(), IOVA, access).unwrap();
    Dev {
        e,
        t,
        cq,
        pd,
        mem,
        mr,
        pending: Vec::new(),
    }
}

fn create_rc_qp(d: &mut Dev) -> u32 {
    let cap = QpCap {
        max_send_wr: 256,
        max_recv_wr: 256,
        ..QpCap::default()
    };
    d.e.create_qp(QpInit {
        qp_type: QpType::Rc,
        pd: d.pd,
        send_cq: d.cq,
        recv_cq: d.cq,
        srq: None,
        cap,
        sq_sig_all: false,
    })
    .unwrap()
}

fn bring_up(d: &mut Dev, qpn: u32, remote: IpAddr, remote_qpn: u32, rq: u32, sq: u32) {
    let a = QpAttr {
        state: QpState::Init,
        port: 1,
        pkey_index: 0,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        ..QpAttr::default()
    };
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    d.e.modify_qp(qpn, &a, m).unwrap();
    let a = QpAttr {
        state: QpState::Rtr,
        av: Some(AddressVector::to(remote)),
        path_mtu: Mtu::Mtu1024,
        dest_qpn: remote_qpn,
        rq_psn: Psn::new(rq),
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    d.e.modify_qp(qpn, &a, m).unwrap();
    let a = QpAttr {
        state: QpState::Rts,
        sq_psn: Psn::new(sq),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::SQ_PSN
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    d.e.modify_qp(qpn, &a, m).unwrap();
}

/// Drives both devices over real sockets until each has `want`
/// completions (or 10 s pass); returns them.
fn run_until(devs: &mut [Dev; 2], want: [usize; 2]) -> [Vec<Completion>; 2] {
    run_until_dropping(devs, want, &mut |_| false)
}

/// [`run_until`], with the datagrams `lose` says true for lost on
/// arrival.
fn run_until_dropping(
    devs: &mut [Dev; 2],
    want: [usize; 2],
    lose: &mut dyn FnMut(&Datagram<'_>) -> bool,
) -> [Vec<Completion>; 2] {
    let mut done: [Vec<Completion>; 2] = [Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && (0..2).any(|i| done[i].len() < want[i]) {
        for d in devs.iter_mut() {
            let now = Instant::now();
            if d.e.next_timeout().is_some_and(|t| t <= now) {
                d.e.handle_timeout(now);
            }
            while let Some(t) = d.e.poll_transmit(now) {
                d.pending.push(t);
            }
            while !d.pending.is_empty() {
                match d.t.send_batch(&d.pending) {
                    Ok(0) => break, // full: later
                    Ok(n) => drop(d.pending.drain(..n)),
                    Err(e) => panic!("{e}"),
                }
            }
        }
        for (i, d) in devs.iter_mut().enumerate() {
            let Dev { e, t, cq, .. } = d;
            t.recv_with(Some(Duration::from_micros(200)), |dg| {
                if !lose(&dg) {
                    e.handle_datagram(Instant::now(), dg.meta, dg.payload)
                }
            })
            .unwrap();
            e.poll_cq(*cq, usize::MAX, &mut done[i]).unwrap();
        }
    }
    done
}

fn engines_over_udp(a: UdpTransport, b: UdpTransport) {
    let mode = a.recv_mode();
    let mut devs = [dev(a, 11), dev(b, 12)];
    let (aa, ba) = (devs[0].t.addr(), devs[1].t.addr());
    let qa = create_rc_qp(&mut devs[0]);
    let qb = create_rc_qp(&mut devs[1]);
    bring_up(&mut devs[0], qa, ba, qb, 5000, 100);
    bring_up(&mut devs[1], qb, aa, qa, 100, 5000);

    // RC SEND of 100 KB.
    const LEN: usize = 100 * 1024;
    let data: Vec<u8> = (0..LEN as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    assert!(devs[0].mem.write(0, &data));
    let rlkey = devs[1].mr.lkey;
    devs[1]
        .e
        .post_recv(
            qb,
            RecvWr {
                wr_id: 7,
                sg_list: vec![Sge {
                    addr: IOVA + 4096,
                    length: LEN as u32,
                    lkey: rlkey,
                }],
            },
        )
        .unwrap();
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![Sge {
        addr: IOVA,
        length: LEN as u32,
        lkey: devs[0].mr.lkey,
    }];
    devs[0].e.post_send(qa, wr).unwrap();
    let [ca, cb] = run_until(&mut devs, [1, 1]);
    assert_eq!(ca.len(), 1, "{ca:?}");
    assert_eq!(ca[0].status, WcStatus::Success);
    assert_eq!(cb.len(), 1, "{cb:?}");
    assert_eq!(cb[0].status, WcStatus::Success);
    assert_eq!(cb[0].byte_len as usize, LEN);
    assert!(devs[1].mem.snapshot()[4096..4096 + LEN] == data[..]);

    // RDMA WRITE of 100 KB (plus an odd tail) to another place.
    const WLEN: usize = LEN + 13;
    let wdata: Vec<u8> = (0..WLEN as u32).map(|i| (i ^ (i >> 7)) as u8).collect();
    assert!(devs[0].mem.write(300_000, &wdata));
    let mut wr = SendWr::new(2, SendOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: IOVA + 300_000,
        length: WLEN as u32,
        lkey: devs[0].mr.lkey,
    }];
    wr.remote_addr = IOVA + 600_001;
    wr.rkey = devs[1].mr.rkey;
    devs[0].e.post_send(qa, wr).unwrap();
    let [ca, _] = run_until(&mut devs, [1, 0]);
    assert_eq!(ca.len(), 1, "{ca:?}");
    assert_eq!(ca[0].status, WcStatus::Success);
    let snap = devs[1].mem.snapshot();
    assert!(snap[600_001..600_001 + WLEN] == wdata[..]);
    assert!(snap[600_000] == 0 && snap[600_001 + WLEN] == 0);

    for d in &devs {
        let (c, s) = (d.e.counters(), d.t.stats());
        println!(
            "{mode} {}: engine sent {} rcvd {} retransmitted {}; udp tx {} rx {} \
             (icrc ok {}, bad {}, unverified {}), tx_full {}",
            d.t.addr(),
            c.sent_pkts,
            c.rcvd_pkts,
            c.retransmitted_pkts,
            s.tx_packets,
            s.rx_packets,
            s.icrc_ok,
            s.icrc_bad,
            s.icrc_unverified,
            s.tx_full,
        );
        assert_eq!(c.icrc_unverified, 0);
        assert!(!c
            .drops
            .contains_key(&rxe_core::engine::DropReason::IcrcError));
        assert_eq!(s.icrc_ok, s.rx_packets);
        assert!(s.rx_packets > 0);
    }
}

#[test]
fn engines_rc_send_and_write_over_real_udp() {
    let a = bind_loopback(lo(2), RecvMode::Plain).unwrap();
    let b = bind_loopback(lo(3), RecvMode::Plain).unwrap();
    engines_over_udp(a, b);
}

#[test]
fn engines_rc_send_and_write_over_real_udp_raw_mode() {
    let test = "engines_rc_send_and_write_over_real_udp_raw_mode";
    let Some(a) = bind_raw(lo(13), test) else {
        return;
    };
    let Some(b) = bind_raw(lo(14), test) else {
        return;
    };
    engines_over_udp(a, b);
}

// ---- GSO and GRO ----

/// Packets of `len` bytes of data each (a different QP every other
/// one), then one shorter: a run of equal lengths whose last is shorter.
fn gso_run_pkts(from: &UdpTransport, dst: IpAddr, n: usize, len: usize) -> Vec<Transmit> {
    let mut v: Vec<Transmit> = (0..n)
        .map(|i| {
            let data: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            let mut t = transmit(from, dst, 100 + i as u32, &data);
            if i % 2 == 1 {
                // Another QP: BTH bytes 5..8 are the destination QP.
                t.payload[7] = 0x34;
                let end = t.payload.len() - ICRC_LEN;
                let c = icrc::compute_udp(t.src, t.dst, t.src_port, &t.payload[..end]).unwrap();
                t.payload[end..].copy_from_slice(&c.to_le_bytes());
            }
            t
        })
        .collect();
    v.push(transmit(from, dst, 100 + n as u32, b"short last"));
    v
}

/// The ID-per-segment rule against a segment list: the packet that
/// becomes segment k of a GSO send leaves with the ICRC for IPv4 ID k,
/// which verifies against segment k's real header (ID k, DF, its own
/// lengths) and not against ID 0.
#[test]
fn gso_segment_k_carries_the_icrc_for_ip_id_k() {
    let (src, dst) = (Ipv4Addr::new(10, 1, 2, 3), Ipv4Addr::new(10, 1, 2, 4));
    let mut deltas = IdDeltas::default();
    for (n, len) in [(2usize, 16usize), (5, 1024), (64, 200), (15, 4096)] {
        let mut pkts: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let data: Vec<u8> = (0..len).map(|j| (i ^ j) as u8).collect();
                roce(src.into(), dst.into(), 4791, i as u32, &data)
            })
            .collect();
        pkts.push(roce(src.into(), dst.into(), 4791, 99, b"last"));
        let ts: Vec<Transmit> = pkts
            .iter()
            .map(|p| Transmit {
                src: src.into(),
                dst: dst.into(),
                src_port: 4791,
                traffic_class: 0,
                hop_limit: 64,
                payload: p.clone(),
            })
            .collect();
        let run = gso_run(&ts, &[]);
        assert_eq!(run, (n + 1).min(GSO_MAX_SEGMENTS), "n {n}");
        for (k, p) in pkts.iter().enumerate().take(run) {
            // What send_gso puts on the wire for segment k.
            let body = &p[..p.len() - ICRC_LEN];
            let carried = u32::from_le_bytes(p[p.len() - ICRC_LEN..].try_into().unwrap());
            let crc = carried ^ deltas.delta(body.len(), k as u16);
            // Segment k as the kernel writes it.
            let seg = |id: u16| {
                let mut ip = Vec::new();
                ip.extend_from_slice(&[0x45, 0]);
                ip.extend_from_slice(&((28 + p.len()) as u16).to_be_bytes());
                ip.extend_from_slice(&id.to_be_bytes());
                ip.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]);
                ip.extend_from_slice(&src.octets());
                ip.extend_from_slice(&dst.octets());
                ip.extend_from_slice(&4791u16.to_be_bytes());
                ip.extend_from_slice(&4791u16.to_be_bytes());
                ip.extend_from_slice(&((8 + p.len()) as u16).to_be_bytes());
                ip.extend_from_slice(&[0, 0]);
                ip.extend_from_slice(body);
                ip.extend_from_slice(&crc.to_le_bytes());
                ip
            };
            assert!(icrc::verify(&seg(k as u16)).unwrap(), "n {n}, segment {k}");
            if k > 0 {
                assert!(!icrc::verify(&seg(0)).unwrap(), "n {n}, segment {k}");
            }
        }
    }
    // What ends a run: another destination, TOS, a longer packet, the
    // segment and byte limits.
    let t = |dst: u8, tc: u8, len: usize| Transmit {
        src: src.into(),
        dst: IpAddr::V4(Ipv4Addr::new(10, 1, 2, dst)),
        src_port: 4791,
        traffic_class: tc,
        hop_limit: 64,
        payload: vec![0; len],
    };
    assert_eq!(gso_run(&[t(4, 0, 100), t(4, 0, 100), t(5, 0, 100)], &[]), 2);
    assert_eq!(gso_run(&[t(4, 0, 100), t(4, 4, 100)], &[]), 1);
    assert_eq!(gso_run(&[t(4, 0, 100), t(4, 0, 101)], &[]), 1);
    assert_eq!(gso_run(&[t(4, 0, 100), t(4, 0, 50), t(4, 0, 50)], &[]), 2);
    assert_eq!(gso_run(&vec![t(4, 0, 100); 80], &[]), 64);
    assert_eq!(gso_run(&vec![t(4, 0, 4112); 20], &[]), 15);
    assert_eq!(gso_run(&vec![t(4, 0, 100); 3], &[t(4, 0, 0).dst]), 1);
    assert_eq!(gso_run(&[t(4, 0, 8), t(4, 0, 8)], &[]), 1, "not RoCE");
}

/// Two transports on one address (`crate::share`): the kernel hands
/// all of one sender's datagrams to one of them, which passes the
/// other's on. A receiver that never waits (non-blocking receives
/// only, as a spinning poller makes them) still gets what was passed
/// on to it: the forward socket is looked at every `FWD_EVERY`th
/// receive even when no wait saw it readable.
#[test]
fn forwarded_datagrams_reach_a_receiver_that_never_waits() {
    let mut a = UdpTransport::bind_with(lo(43).into(), RecvMode::Plain).unwrap();
    let mut b = UdpTransport::bind_with(lo(43).into(), RecvMode::Plain).unwrap();
    let mut tx = UdpTransport::bind(lo(44).into()).unwrap();
    let to = |prefix: u8, i: u32| {
        let mut t = transmit(&tx, a.addr(), i, b"shared");
        // The top 8 bits of the destination QP name the owner.
        t.payload[5] = prefix;
        let end = t.payload.len() - ICRC_LEN;
        let c = icrc::compute_udp(t.src, t.dst, t.src_port, &t.payload[..end]).unwrap();
        t.payload[end..].copy_from_slice(&c.to_le_bytes());
        t
    };
    let (pa, pb) = (a.qpn_prefix(), b.qpn_prefix());
    assert_ne!(pa, pb);
    let pkts: Vec<_> = (0..20)
        .map(|i| to(if i % 2 == 0 { pa } else { pb }, i))
        .collect();
    assert_eq!(tx.send_batch(&pkts).unwrap(), pkts.len());
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    for _ in 0..400 {
        for (t, got) in [(&mut a, &mut got_a), (&mut b, &mut got_b)] {
            t.recv_with(Some(Duration::ZERO), |d| got.push(d.payload[5]))
                .unwrap();
        }
        if got_a.len() + got_b.len() == pkts.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got_a, vec![pa; 10]);
    assert_eq!(got_b, vec![pb; 10]);
    let passed = a.stats().rx_forwarded_in + b.stats().rx_forwarded_in;
    assert_eq!(passed, 10, "one of them got all 20 from the kernel");
}

/// `RXE_GSO`: 1 every destination, 0 none, unset or `loopback` the
/// loopback addresses (on a kernel with UDP_GRO), anything else an
/// error that names the variable.
#[test]
fn gso_setting_from_rxe_gso() {
    use std::env::VarError;
    let set = |v: &str| gso_setting(Ok(v.to_string()));
    assert_eq!(set("1").unwrap(), GsoSend::On);
    assert_eq!(set("0").unwrap(), GsoSend::Off);
    let default = if kernel_has_udp_gro() {
        GsoSend::Loopback
    } else {
        GsoSend::Off
    };
    assert_eq!(gso_setting(Err(VarError::NotPresent)).unwrap(), default);
    assert_eq!(set("loopback").unwrap(), default);
    let e = set("sometimes").unwrap_err();
    assert!(e.to_string().contains("RXE_GSO"), "{e}");
    assert!(GsoSend::Loopback.allows(Ipv4Addr::new(127, 0, 2, 3).into()));
    assert!(GsoSend::Loopback.allows(Ipv6Addr::LOCALHOST.into()));
    assert!(!GsoSend::Loopback.allows(Ipv4Addr::new(10, 1, 2, 3).into()));
    assert!(!GsoSend::Off.allows(Ipv4Addr::new(127, 0, 0, 1).into()));
    assert!(GsoSend::On.allows(Ipv4Addr::new(10, 1, 2, 3).into()));
}

/// The default policy to a loopback receiver: a run goes as one GSO
/// send, and the receiver gets every packet, verified.
#[test]
fn loopback_policy_sends_a_run_to_loopback_as_one_gso_send() {
    let mut a = UdpTransport::bind(lo(41).into()).unwrap();
    let mut b = UdpTransport::bind(lo(42).into()).unwrap();
    a.set_gso_send(GsoSend::Loopback);
    let pkts = gso_run_pkts(&a, b.addr(), 10, 200);
    assert_eq!(a.send_batch(&pkts).unwrap(), pkts.len());
    assert_eq!(a.stats().tx_gso_sends, 1);
    assert_eq!(a.stats().tx_gso_segments, pkts.len() as u64);
    let (got, _) = recv_n(&mut b, pkts.len());
    assert_eq!(got.len(), pkts.len());
    for (r, t) in got.iter().zip(&pkts) {
        let end = t.payload.len() - ICRC_LEN;
        assert_eq!(r.data[..end], t.payload[..end]);
        assert_eq!(r.meta.icrc, IcrcStatus::Ok);
    }
}

/// One GSO send that mixes QPs and ends shorter, with a corrupted
/// packet in the middle, to receivers that did not turn GSO on: a
/// plain one (UDP_GRO, always set: one datagram, cut at the segment
/// size), a plain one whose UDP_GRO is cleared, as on a kernel without
/// it (the UDP layer segments), and a raw one (the unsegmented
/// super-packet): all get every packet, bytes right, each with the
/// ICRC the sender reported (SentAs).
#[test]
fn gso_sender_reaches_gro_plain_and_raw_receivers() {
    let mut tx = bind_loopback(lo(30), RecvMode::Plain).unwrap();
    tx.set_gso(true).unwrap();
    // Receivers that did not turn GSO on: the receive side is always on.
    let mut gro = bind_loopback(lo(31), RecvMode::Plain).unwrap();
    // As on a kernel without UDP_GRO (before 5.0): the UDP layer
    // segments for the socket, which gets the segments one by one.
    let mut nogro = bind_loopback(lo(32), RecvMode::Plain).unwrap();
    setsockopt_int(nogro.recv_fd().as_raw_fd(), libc::IPPROTO_UDP, UDP_GRO, 0).unwrap();
    let mut raw = bind_raw(lo(33), "gso_sender_reaches_gro_plain_and_raw_receivers");
    let mut rxs: Vec<(&mut UdpTransport, bool)> = vec![(&mut gro, true), (&mut nogro, false)];
    if let Some(r) = raw.as_mut() {
        rxs.push((r, true));
    }
    for (rx, whole) in rxs {
        // As a process started without RXE_GSO (whatever this one's
        // environment says).
        rx.set_gso(false).unwrap();
        let before = *tx.stats();
        let mut pkts = gso_run_pkts(&tx, rx.addr(), 9, 300);
        pkts[4] = corrupt(pkts[4].clone());
        let mut sent_as = Vec::new();
        let n = tx
            .send_batch_with(&pkts, &mut |_, s| sent_as.push(s))
            .unwrap();
        assert_eq!(n, pkts.len());
        let ids: Vec<u16> = sent_as.iter().map(|s| s.ip_id).collect();
        assert_eq!(ids, (0..pkts.len() as u16).collect::<Vec<_>>());
        assert_eq!(tx.stats().tx_gso_sends - before.tx_gso_sends, 1);
        assert_eq!(
            tx.stats().tx_gso_segments - before.tx_gso_segments,
            pkts.len() as u64
        );
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.len() < pkts.len() && Instant::now() < deadline {
            rx.recv_with(Some(Duration::from_millis(100)), |d| {
                got.push((
                    d.meta.icrc,
                    d.payload.to_vec(),
                    d.ip_packet.map(<[u8]>::to_vec),
                ))
            })
            .unwrap();
        }
        let mode = rx.recv_mode();
        assert_eq!(got.len(), pkts.len(), "{mode} gro {whole}");
        for (k, ((v, p, ip), t)) in got.iter().zip(&pkts).enumerate() {
            let end = p.len() - ICRC_LEN;
            assert_eq!(p[..end], t.payload[..end], "{mode} gro {whole} packet {k}");
            // The ICRC as sent: adjusted for ID k, as SentAs says.
            assert_eq!(p[end..], sent_as[k].icrc, "{mode} gro {whole} packet {k}");
            let want = match (k, whole) {
                (4, _) => IcrcStatus::Bad,
                (0, _) | (_, true) => IcrcStatus::Ok,
                // No header, no GRO: the solver finds ID k.
                (_, false) => IcrcStatus::Unverified,
            };
            assert_eq!(*v, want, "{mode} gro {whole} packet {k}");
            if let Some(ip) = ip {
                // Raw mode: the segment as the kernel would have cut it.
                assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), k as u16);
                assert_eq!(&ip[28..], &p[..]);
                assert_eq!(icrc::verify(ip).unwrap(), k != 4, "packet {k}");
                assert_eq!(
                    RoceFrame::parse_ip(ip, None).unwrap().transport,
                    &p[..],
                    "lengths add up"
                );
            }
        }
        let s = rx.stats();
        assert_eq!(s.rx_gso_split, u64::from(whole), "{mode}");
        assert_eq!(s.icrc_bad, 1);
        assert_eq!(s.rx_truncated, 0);
        assert_nothing_queued(rx);
    }
}

/// Raw mode with GSO: a long packet no segment size explains is dropped
/// and counted; a short one goes on as one Bad packet; a super-packet
/// whose segments are not of one size is not split; none panics.
#[test]
fn raw_mode_drops_malformed_super_packets() {
    let Some(mut rx) = bind_raw(lo(34), "raw_mode_drops_malformed_super_packets") else {
        return;
    };
    // As a process without RXE_GSO: the receive side is always on.
    rx.set_gso(false).unwrap();
    let tx4 = lo(35);
    let IpAddr::V4(rx4) = rx.addr() else {
        unreachable!()
    };
    // 20,000 bytes of garbage behind a good BTH: longer than any packet.
    let mut big = rxe_style_ipv4(tx4, rx4, 7, 1, &vec![0x5a; 20_000]);
    // The same with its ICRC right as one packet: too long, dropped as
    // truncated (its ICRC is looked at only after no split fits it).
    send_ip_hdrincl(&big, rx4).unwrap();
    let n = big.len();
    big[n - 1] ^= 1;
    send_ip_hdrincl(&big, rx4).unwrap();
    // Segments of 3 sizes, each ICRC right for ID + k: no one size
    // explains them, and it is short enough for one packet.
    let mut odd = Vec::new();
    let mut payload = Vec::new();
    for (k, len) in [40usize, 60, 40].into_iter().enumerate() {
        let seg = rxe_style_ipv4(tx4, rx4, 50 + k as u16, k as u32, &vec![k as u8; len]);
        payload.extend_from_slice(&seg[28..]);
        if k == 0 {
            odd.extend_from_slice(&seg[..28]);
        }
    }
    odd.extend_from_slice(&payload);
    let l = odd.len();
    odd[2..4].copy_from_slice(&(l as u16).to_be_bytes());
    odd[24..26].copy_from_slice(&((l - 20) as u16).to_be_bytes());
    send_ip_hdrincl(&odd, rx4).unwrap();
    let (got, _) = recv_n(&mut rx, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].meta.icrc, IcrcStatus::Bad);
    assert_eq!(got[0].data, odd[28..]);
    assert_nothing_queued(&mut rx);
    let s = rx.stats();
    assert_eq!(s.rx_gso_malformed, 1, "{s:?}");
    assert_eq!(s.rx_truncated, 1, "{s:?}");
    assert_eq!(s.rx_gso_split, 0, "{s:?}");
    assert_eq!(s.rx_packets, 1, "{s:?}");
}

/// RC over GSO senders and GRO (plain) or splitting (raw) receivers,
/// with packet 2 of a GSO batch lost on arrival: the responder NAKs,
/// the requester goes back, the bytes arrive right.
fn gso_engines_recover_a_lost_segment(mut a: UdpTransport, mut b: UdpTransport) {
    a.set_gso(true).unwrap();
    b.set_gso(true).unwrap();
    let mode = a.recv_mode();
    let mut devs = [dev(a, 21), dev(b, 22)];
    let (aa, ba) = (devs[0].t.addr(), devs[1].t.addr());
    let qa = create_rc_qp(&mut devs[0]);
    let qb = create_rc_qp(&mut devs[1]);
    bring_up(&mut devs[0], qa, ba, qb, 7000, 300);
    bring_up(&mut devs[1], qb, aa, qa, 300, 7000);
    const LEN: usize = 150 * 1024 + 77;
    let data: Vec<u8> = (0..LEN as u32)
        .map(|i| (i.wrapping_mul(2246822519) >> 11) as u8)
        .collect();
    assert!(devs[0].mem.write(0, &data));
    let mut wr = SendWr::new(3, SendOpcode::RdmaWrite);
    wr.sg_list = vec![Sge {
        addr: IOVA,
        length: LEN as u32,
        lkey: devs[0].mr.lkey,
    }];
    wr.remote_addr = IOVA + 400_000;
    wr.rkey = devs[1].mr.rkey;
    devs[0].e.post_send(qa, wr).unwrap();
    // Segment 2 of a GSO send: its ICRC is right for ID 2, not 0.
    let mut deltas = IdDeltas::default();
    let mut lost = 0;
    let [ca, _] = run_until_dropping(&mut devs, [1, 0], &mut |d| {
        let p = d.payload;
        if lost > 0 || d.meta.dst != ba || p.len() < 100 {
            return false;
        }
        let (body, tail) = p.split_at(p.len() - ICRC_LEN);
        let carried = u32::from_le_bytes(tail.try_into().unwrap());
        let c0 = icrc::compute_udp(d.meta.src, d.meta.dst, d.meta.src_port, body).unwrap();
        if c0 ^ deltas.delta(body.len(), 2) == carried {
            lost += 1;
            return true;
        }
        false
    });
    assert_eq!(lost, 1, "{mode}: a segment 2 came by");
    assert_eq!(ca.len(), 1, "{mode}: {ca:?}");
    assert_eq!(ca[0].status, WcStatus::Success);
    assert!(devs[1].mem.snapshot()[400_000..400_000 + LEN] == data[..]);
    let c = devs[0].e.counters();
    assert!(c.retransmitted_pkts > 0, "{mode}: {c:?}");
    for d in &devs {
        let s = d.t.stats();
        assert!(s.tx_gso_sends > 0 || d.t.addr() == ba, "{mode}: {s:?}");
        assert_eq!(s.icrc_bad, 0, "{mode}: {s:?}");
        assert_eq!(s.icrc_unverified, 0, "{mode}: {s:?}");
    }
    assert!(devs[1].t.stats().rx_gso_split > 0);
}

#[test]
fn gso_rc_write_recovers_a_segment_lost_mid_batch_plain() {
    let a = bind_loopback(lo(36), RecvMode::Plain).unwrap();
    let b = bind_loopback(lo(37), RecvMode::Plain).unwrap();
    gso_engines_recover_a_lost_segment(a, b);
}

#[test]
fn gso_rc_write_recovers_a_segment_lost_mid_batch_raw() {
    let test = "gso_rc_write_recovers_a_segment_lost_mid_batch_raw";
    let Some(a) = bind_raw(lo(38), test) else {
        return;
    };
    let Some(b) = bind_raw(lo(39), test) else {
        return;
    };
    gso_engines_recover_a_lost_segment(a, b);
}

/// A network namespace of its own (`ip netns add`), deleted on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Option<Netns> {
        let name = format!("rxe-gso-{tag}-{}", std::process::id());
        let ok = std::process::Command::new("ip")
            .args(["netns", "add", &name])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Netns(name))
    }

    /// Runs a command in the namespace; true if it succeeded.
    fn run(&self, cmd: &str) -> bool {
        std::process::Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(cmd.split_whitespace())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Moves the calling thread into the namespace (sockets it opens
    /// then belong there, and stay there).
    fn enter(&self) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.0)).unwrap();
        // SAFETY: plain system call on an open descriptor.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

/// Receives `n` packets (or for 3 s): (verdict, payload, IP packet).
fn recv_full(rx: &mut UdpTransport, n: usize) -> Vec<(IcrcStatus, Vec<u8>, Option<Vec<u8>>)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < n && Instant::now() < deadline {
        rx.recv_with(Some(Duration::from_millis(100)), |d| {
            got.push((
                d.meta.icrc,
                d.payload.to_vec(),
                d.ip_packet.map(<[u8]>::to_vec),
            ))
        })
        .unwrap();
    }
    got
}

/// On the wire: a GSO send cut up in software in front of a veth (its
/// UDP segmentation offload off) arrives as ordinary packets with IDs
/// 0, 1, 2..., all DF, which a raw receiver without GSO checks against
/// their real headers: every ICRC right. With the offload on, the
/// super-packet crosses the veth whole and a raw receiver with GSO
/// splits it. Two namespaces of the test's own, root only.
#[test]
fn gso_segments_on_the_wire_carry_ids_0_1_2_and_verify() {
    let test = "gso_segments_on_the_wire_carry_ids_0_1_2_and_verify";
    let (Some(na), Some(nb)) = (Netns::new("wa"), Netns::new("wb")) else {
        println!("SKIPPED {test}: cannot create network namespaces");
        return;
    };
    let setup = [
        (
            &na,
            format!("ip link add va type veth peer name vb netns {}", nb.0),
        ),
        (&na, "ip addr add 10.213.7.1/24 dev va".into()),
        (&nb, "ip addr add 10.213.7.2/24 dev vb".into()),
        (&na, "ip link set va up".into()),
        (&nb, "ip link set vb up".into()),
        (&na, "ethtool -K va tx-udp-segmentation off".into()),
    ];
    for (ns, cmd) in &setup {
        if !ns.run(cmd) {
            println!("SKIPPED {test}: `{cmd}` failed");
            return;
        }
    }
    std::thread::spawn(move || {
        let (a4, b4) = (Ipv4Addr::new(10, 213, 7, 1), Ipv4Addr::new(10, 213, 7, 2));
        na.enter();
        let mut tx = UdpTransport::bind(a4.into()).unwrap();
        tx.set_gso(true).unwrap();
        nb.enter();
        // A receiver that does not send with GSO.
        let mut rx = UdpTransport::bind_with(b4.into(), RecvMode::Raw).unwrap();
        rx.set_gso(false).unwrap();
        // Resolve the neighbour first.
        let (txa, rxa) = (tx.addr(), rx.addr());
        assert_eq!(tx.send_batch(&[transmit(&tx, rxa, 1, b"arp")]).unwrap(), 1);
        assert_eq!(recv_full(&mut rx, 1).len(), 1);
        // The default policy sends no GSO to an address that is not
        // loopback: one datagram a packet, every ID 0.
        tx.set_gso_send(GsoSend::Loopback);
        let pkts = gso_run_pkts(&tx, rxa, 9, 300);
        assert_eq!(tx.send_batch(&pkts).unwrap(), pkts.len());
        assert_eq!(tx.stats().tx_gso_sends, 0);
        let got = recv_full(&mut rx, pkts.len());
        assert_eq!(got.len(), pkts.len());
        for ((v, p, ip), t) in got.iter().zip(&pkts) {
            let ip = ip.as_ref().unwrap();
            assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 0, "IP ID");
            assert_eq!(*v, IcrcStatus::Ok);
            assert_eq!(*p, t.payload);
        }
        tx.set_gso(true).unwrap();
        for offload in [false, true] {
            if offload {
                assert!(na.run("ethtool -K va tx-udp-segmentation on"));
            }
            let mut pkts = gso_run_pkts(&tx, rxa, 9, 300);
            pkts[4] = corrupt(pkts[4].clone());
            let sends = tx.stats().tx_gso_sends;
            assert_eq!(tx.send_batch(&pkts).unwrap(), pkts.len());
            assert_eq!(tx.stats().tx_gso_sends, sends + 1);
            let got = recv_full(&mut rx, pkts.len());
            assert_eq!(got.len(), pkts.len(), "offload {offload}");
            for (k, ((v, p, ip), t)) in got.iter().zip(&pkts).enumerate() {
                let ip = ip.as_ref().unwrap();
                let end = p.len() - ICRC_LEN;
                assert_eq!(p[..end], t.payload[..end]);
                assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), k as u16, "IP ID");
                assert_eq!(ip[6] & 0x40, 0x40, "DF");
                let want = if k == 4 {
                    IcrcStatus::Bad
                } else {
                    IcrcStatus::Ok
                };
                assert_eq!(*v, want, "offload {offload}, packet {k}");
            }
            assert_eq!(rx.stats().rx_gso_split, u64::from(offload));
        }
        let _ = txa;
        drop((tx, rx));
        (na, nb)
    })
    .join()
    .unwrap();
}

/// A full socket buffer cuts a batch of GSO sends short at a send: the
/// call returns how many packets went (whole runs), counts `tx_full`,
/// and the rest goes once there is room; the receiver gets exactly the
/// packets sent, in order, every ICRC right. The buffer fills behind a
/// slow qdisc (4 Mbit/s) on the loopback device of a namespace of the
/// test's own.
#[test]
fn gso_send_cut_short_by_a_full_socket_buffer() {
    let test = "gso_send_cut_short_by_a_full_socket_buffer";
    let Some(ns) = Netns::new("full") else {
        println!("SKIPPED {test}: cannot create a network namespace");
        return;
    };
    for cmd in [
        "ip link set lo up",
        "tc qdisc add dev lo root tbf rate 4mbit burst 64kb limit 64mb",
    ] {
        if !ns.run(cmd) {
            println!("SKIPPED {test}: `{cmd}` failed");
            return;
        }
    }
    std::thread::spawn(move || {
        ns.enter();
        let mut tx = UdpTransport::bind(lo(2).into()).unwrap();
        tx.set_gso(true).unwrap();
        let mut rx = UdpTransport::bind(lo(3).into()).unwrap();
        setsockopt_int(tx.udp.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 65536).unwrap();
        let rxa = rx.addr();
        // Four runs a batch: 16 packets of 1040 bytes, 1 of 26, ...
        let batch: Vec<Transmit> = (0..4)
            .flat_map(|r| gso_run_pkts(&tx, rxa, 15, 1000 + 8 * r))
            .collect();
        let bounds: Vec<usize> = (0..=4).map(|r| 16 * r).collect();
        let mut sent: Vec<Transmit> = Vec::new();
        let mut cut = None;
        for _ in 0..100 {
            let n = tx.send_batch(&batch).unwrap();
            sent.extend_from_slice(&batch[..n]);
            if n < batch.len() {
                cut = Some(n);
                break;
            }
        }
        let n = cut.expect("the send buffer never filled");
        assert!(bounds.contains(&n), "cut at {n}: not at a run's end");
        assert!(tx.stats().tx_full >= 1);
        // Room again once the qdisc lets some out: the rest goes.
        assert!(tx.wait_writable(Some(Duration::from_secs(10))).unwrap());
        let mut rest = &batch[n..];
        let deadline = Instant::now() + Duration::from_secs(10);
        while !rest.is_empty() && Instant::now() < deadline {
            let k = tx.send_batch(rest).unwrap();
            sent.extend_from_slice(&rest[..k]);
            rest = &rest[k..];
            if k == 0 {
                tx.wait_writable(Some(Duration::from_millis(10))).unwrap();
            }
        }
        assert!(rest.is_empty());
        let got = recv_full(&mut rx, sent.len());
        assert_eq!(got.len(), sent.len());
        for (k, ((v, p, _), t)) in got.iter().zip(&sent).enumerate() {
            let end = p.len() - ICRC_LEN;
            assert_eq!(p[..end], t.payload[..end], "packet {k}");
            assert_eq!(*v, IcrcStatus::Ok, "packet {k}");
        }
        assert_nothing_queued(&mut rx);
        drop((tx, rx));
        ns
    })
    .join()
    .unwrap();
}
