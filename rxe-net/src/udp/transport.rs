//! [`UdpTransport`]: the sockets of one address, sending batches (with GSO
//! where it applies) and receiving them (GRO datagrams and super-packets
//! split, each packet's ICRC judged), and its share of the address.

use super::gso::{gro_segment_size, gso_from_env, gso_run, GsoSend, UDP_GRO, UDP_SEGMENT};
use super::slots::{Cbuf, FwdLook, RxSlots, Slots};
use super::sys::{
    context, from_sockaddr, getsockopt_int, open_raw, open_udp, ppoll, setsockopt_int, to_sockaddr,
    wait_fd,
};
use super::waiter::Waiter;
use super::{
    Datagram, Received, RecvMode, SentAs, SentReport, UdpStats, BATCH, GSO_DATAGRAM, MAX_DATAGRAM,
};
use crate::mcast::Groups;
use crate::share::{Forward, ServiceClaim, Share};
use rxe_core::engine::{IcrcStatus, RecvMeta, Transmit};
use rxe_core::wire::icrc::{
    plain_verdict, raw_icrc_ok, segment_headers, split_super, IdDeltas, Ipv4IdSolver, Split,
};
use rxe_core::wire::{RoceFrame, BTH_LEN, ICRC_LEN, ROCE_V2_PORT};
use std::fmt;
use std::io;
use std::mem::size_of;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// RoCE v2 packets through a UDP socket bound to `(addr, 4791)`.
pub struct UdpTransport {
    addr: IpAddr,
    /// (the tests in `tests.rs` read it and `defaults`)
    pub(super) udp: OwnedFd,
    raw: Option<OwnedFd>,
    /// What the UDP socket puts in a packet sent without ancillary data.
    pub(super) defaults: SocketDefaults,
    stats: UdpStats,
    /// `BATCH` buffers of `GSO_DATAGRAM` bytes.
    bufs: Vec<u8>,
    /// This transport's share of its address (see [`crate::share`]).
    share: Share,
    /// Where forwarded datagrams are received.
    fwd_buf: Vec<u8>,
    /// The system calls' message headers, kept from call to call.
    slots: Box<Slots>,
    /// The receive side's headers, set up once.
    rx: Box<RxSlots>,
    /// When to look at the forward socket.
    fwd: FwdLook,
    /// Checks IPv4 ICRCs that the ID-0 header does not explain.
    id_solver: Ipv4IdSolver,
    /// Where UDP GSO is used on send (receiving splits GRO datagrams and
    /// super-packets whatever this says).
    gso: GsoSend,
    /// What the IPv4 identification of segment k does to an ICRC.
    id_deltas: IdDeltas,
    /// Destinations a GSO send failed to (sent packet by packet since).
    no_gso: Vec<IpAddr>,
    /// The packets found in one received datagram: (offset, length, ICRC
    /// verdict), kept from call to call.
    segs: Vec<(usize, usize, IcrcStatus)>,
    /// The multicast groups joined ([`crate::mcast`]).
    groups: Groups,
}

impl fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpTransport")
            .field("addr", &self.addr)
            .field("recv_mode", &self.recv_mode())
            .field("udp_fd", &self.udp.as_raw_fd())
            .field("raw_fd", &self.raw.as_ref().map(|r| r.as_raw_fd()))
            .field("defaults", &self.defaults)
            .field("stats", &self.stats)
            .finish()
    }
}

impl UdpTransport {
    /// Binds a UDP socket to `(addr, 4791)` and receives from it
    /// ([`RecvMode::Plain`]). `addr` must be a specific unicast address
    /// (the ICRC covers the destination address); an IPv4-mapped IPv6
    /// address means its IPv4 address.
    pub fn bind(addr: IpAddr) -> io::Result<Self> {
        Self::bind_with(addr, RecvMode::Plain)
    }

    /// Binds as [`Self::bind`] and receives as `mode` says. [`RecvMode::Raw`]
    /// fails without `CAP_NET_RAW` (`PermissionDenied`) and for IPv6
    /// (`Unsupported`); [`RecvMode::Auto`] falls back to plain then.
    pub fn bind_with(addr: IpAddr, mode: RecvMode) -> io::Result<Self> {
        let addr = addr.to_canonical();
        let sa = SocketAddr::new(addr, ROCE_V2_PORT);
        if addr.is_unspecified() || addr.is_multicast() || is_broadcast(addr) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "bind {sa}: needs a specific unicast address \
                     (the ICRC covers the destination address)"
                ),
            ));
        }
        let raw = match (mode, addr) {
            (RecvMode::Plain, _) | (RecvMode::Auto, IpAddr::V6(_)) => None,
            (RecvMode::Raw, IpAddr::V6(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "bind {sa}: raw receive mode is IPv4 only \
                         (IPv6 is fully verified from the UDP socket)"
                    ),
                ))
            }
            (RecvMode::Raw, IpAddr::V4(a)) => Some(open_raw(a)?),
            (RecvMode::Auto, IpAddr::V4(a)) => match open_raw(a) {
                Ok(fd) => Some(fd),
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => None,
                Err(e) => return Err(e),
            },
        };
        let udp = open_udp(sa, raw.is_some())?;
        if raw.is_none() || addr.is_loopback() {
            // GRO on receive, always (whether this transport sends with
            // GSO or not): a local GSO sender's super-packets arrive whole,
            // with the segment size in a control message. Best effort:
            // without it (Linux before 5.0) the kernel segments them.
            //
            // In raw mode the UDP socket only holds the port and drops
            // everything (its filter), but without `UDP_GRO` the kernel
            // first cuts each super-packet a loopback GSO sender sends into
            // its segments for it, to drop them one by one, in the
            // sender's `sendmmsg` (which runs the loopback receive): a
            // large share of a 64-byte send_bw client's CPU
            // (docs/performance.md). With it the super-packet is dropped
            // whole.
            // Only on a loopback address: on another, `UDP_GRO` would also
            // let the kernel coalesce a NIC's packets for this port, and
            // the raw socket would see them merged.
            let _ = setsockopt_int(udp.as_raw_fd(), libc::IPPROTO_UDP, UDP_GRO, 1);
        }
        let share = Share::claim(addr, rand::random())
            .map_err(|e| context(e, format!("claim a share of {sa}")))?;
        let defaults = SocketDefaults::query(&udp, addr.is_ipv6())
            .map_err(|e| context(e, format!("read the TOS and TTL of the socket for {sa}")))?;
        let groups = Groups::new(addr).map_err(|e| context(e, "epoll_create1"))?;
        groups
            .configure_sender(&udp, defaults.ttl)
            .map_err(|e| context(e, format!("set the multicast interface of {sa}")))?;
        let gso = gso_from_env().map_err(|e| context(e, format!("bind {sa}")))?;
        // Zeroed and large (calloc maps it lazily): only the pages
        // datagrams are written to become resident, so without GSO
        // traffic each slot costs what MAX_DATAGRAM did.
        let mut bufs = vec![0; BATCH * GSO_DATAGRAM];
        let rx = RxSlots::new(&mut bufs, raw.is_some());
        Ok(UdpTransport {
            addr,
            udp,
            raw,
            defaults,
            stats: UdpStats::default(),
            bufs,
            share,
            fwd_buf: vec![0; MAX_DATAGRAM + 64],
            slots: Slots::new(),
            rx,
            fwd: FwdLook::default(),
            id_solver: Ipv4IdSolver::new(),
            gso,
            id_deltas: IdDeltas::default(),
            no_gso: Vec::new(),
            segs: Vec::new(),
            groups,
        })
    }

    /// Joins IP multicast group `group` on the device's interface, so that
    /// datagrams to `(group, 4791)` are received here as well (UD
    /// multicast: see [`crate::mcast`]). Joining twice does nothing.
    pub fn join_group(&mut self, group: IpAddr) -> io::Result<()> {
        self.groups.join(group)
    }

    /// Leaves a group [`Self::join_group`] joined; false if it was not.
    pub fn leave_group(&mut self, group: IpAddr) -> bool {
        self.groups.leave(group)
    }

    /// Turns UDP segmentation offload for sending on for every destination
    /// ([`GsoSend::On`]) or off ([`GsoSend::Off`]); the default is
    /// [`GsoSend::Loopback`] (see [`gso_from_env`]). With it on,
    /// [`Self::send_batch`] sends each run of packets to one destination
    /// whose lengths are equal (the last may be shorter) as one `sendmsg`
    /// with a `UDP_SEGMENT` control message, with the ICRC of the run's
    /// packet k adjusted for IPv4 identification k, which is what Linux
    /// writes into segment k (see "GSO and GRO" in the module docs).
    ///
    /// Receiving does not depend on it: every transport takes datagrams
    /// that hold several packets and splits them back into packets
    /// (`UDP_GRO` datagrams in plain mode, loopback senders' unsegmented
    /// super-packets in raw mode), with receive buffers of
    /// [`GSO_DATAGRAM`] bytes each.
    pub fn set_gso(&mut self, on: bool) -> io::Result<()> {
        self.set_gso_send(if on { GsoSend::On } else { GsoSend::Off });
        Ok(())
    }

    /// Chooses the destinations GSO sends go to ([`GsoSend`]; the default
    /// comes from [`gso_from_env`]).
    pub fn set_gso_send(&mut self, gso: GsoSend) {
        self.gso = gso;
    }

    /// Where GSO sending is used ([`Self::set_gso_send`]).
    pub fn gso_send(&self) -> GsoSend {
        self.gso
    }

    /// Whether GSO sending is used for any destination
    /// ([`Self::set_gso_send`]).
    pub fn gso(&self) -> bool {
        self.gso != GsoSend::Off
    }

    /// The bound address (also [`RecvMeta::dst`] of every datagram).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The top 8 bits of every QP number the engine behind this transport
    /// must hand out (`EngineConfig::qpn_prefix`): how datagrams find their
    /// process when several share the address ([`crate::share`]).
    pub fn qpn_prefix(&self) -> u8 {
        self.share.prefix()
    }

    /// Claims CM service `sid` at this address for this process, so that
    /// REQs for it reach this transport whichever process sharing the
    /// address receives them ([`Share::claim_service`]).
    pub fn claim_service(&self, sid: u64) -> io::Result<ServiceClaim> {
        self.share.claim_service(sid)
    }

    /// The bound socket address, `(addr, 4791)`.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, ROCE_V2_PORT)
    }

    /// The UDP source port of every packet sent: 4791. Give it to the
    /// engine (`EngineConfig::udp_src_port = Some(4791)`), which covers it
    /// with the ICRC.
    pub fn src_port(&self) -> u16 {
        ROCE_V2_PORT
    }

    /// How packets are received: [`RecvMode::Plain`] or [`RecvMode::Raw`].
    pub fn recv_mode(&self) -> RecvMode {
        if self.raw.is_some() {
            RecvMode::Raw
        } else {
            RecvMode::Plain
        }
    }

    /// What happened so far.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// The socket to wait on for readability (the raw socket in raw mode).
    pub fn recv_fd(&self) -> BorrowedFd<'_> {
        self.raw.as_ref().unwrap_or(&self.udp).as_fd()
    }

    /// The socket to wait on for writability (always the UDP socket).
    pub fn send_fd(&self) -> BorrowedFd<'_> {
        self.udp.as_fd()
    }

    /// The receive and send buffer sizes the kernel granted (it reports
    /// twice what was asked for, counting its bookkeeping).
    pub fn buffer_sizes(&self) -> io::Result<(usize, usize)> {
        let rcv = getsockopt_int(
            self.recv_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
        )?;
        let snd = getsockopt_int(self.udp.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF)?;
        Ok((rcv.max(0) as usize, snd.max(0) as usize))
    }

    /// Sends packets, in order, with `sendmmsg(2)`, each to `(t.dst, 4791)`
    /// with its TOS/traffic class and TTL/hop limit (as ancillary data
    /// where they differ from the socket's own; a hop limit of 0 means the
    /// socket's default). Never blocks.
    ///
    /// Returns how many packets from the front went to the kernel; fewer
    /// than `pkts.len()` when the socket buffer is full (send the rest
    /// later: [`Self::wait_writable`]) or when a later packet fails (the
    /// next call reports it). An `Err` is always about `pkts[0]`, which
    /// cannot be sent (wrong source address or port, wrong address family,
    /// too large for the path MTU, no route...); skip it.
    pub fn send_batch(&mut self, pkts: &[Transmit]) -> io::Result<usize> {
        self.send_batch_reporting(pkts, None)
    }

    /// [`Self::send_batch`], calling `sent` for each packet the kernel
    /// took, in order, with what it went out as ([`SentAs`]: the IPv4
    /// identification of its segment and the ICRC it carried), for a
    /// capture that shows what went on the wire.
    pub fn send_batch_with(
        &mut self,
        pkts: &[Transmit],
        sent_as: &mut dyn FnMut(&Transmit, SentAs),
    ) -> io::Result<usize> {
        self.send_batch_reporting(pkts, Some(sent_as))
    }

    /// Both of the above: without a report (no capture), nothing is worked
    /// out per packet sent.
    fn send_batch_reporting(
        &mut self,
        pkts: &[Transmit],
        mut sent_as: Option<&mut SentReport<'_>>,
    ) -> io::Result<usize> {
        let mut sent = 0;
        while sent < pkts.len() {
            let chunk = &pkts[sent..pkts.len().min(sent + BATCH)];
            let mut valid = 0;
            for t in chunk {
                if let Err(e) = self.check_transmit(t) {
                    if sent + valid == 0 {
                        return Err(e);
                    }
                    break;
                }
                valid += 1;
            }
            if valid == 0 {
                return Ok(sent);
            }
            let r = if self.gso() {
                self.send_gso(&chunk[..valid])
            } else {
                self.sendmmsg(&chunk[..valid])
            };
            match r {
                Ok(n) => {
                    if let Some(report) = sent_as.as_mut() {
                        for (j, t) in chunk[..n].iter().enumerate() {
                            let ip_id = if self.gso() { self.slots.ids[j] } else { 0 };
                            let icrc = match ip_id {
                                0 => (t.payload.len().checked_sub(ICRC_LEN))
                                    .and_then(|at| t.payload[at..].try_into().ok())
                                    .unwrap_or([0; ICRC_LEN]),
                                _ => self.slots.icrcs[j],
                            };
                            report(t, SentAs { ip_id, icrc });
                        }
                    }
                    self.stats.tx_packets += n as u64;
                    self.stats.tx_batches += u64::from(n > 0);
                    self.stats.tx_bytes += chunk[..n]
                        .iter()
                        .map(|t| t.payload.len() as u64)
                        .sum::<u64>();
                    sent += n;
                    if n == 0 {
                        return Ok(sent);
                    }
                    if n < valid {
                        // The kernel stopped at packet n; the next call
                        // says why (a full buffer, or an error to report).
                        continue;
                    }
                    if valid < chunk.len() {
                        return Ok(sent);
                    }
                }
                Err(e) if is_full(&e) => {
                    self.stats.tx_full += 1;
                    return Ok(sent);
                }
                // Reported again by the next call, with this packet first.
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) => {
                    let dst = SocketAddr::new(pkts[0].dst, ROCE_V2_PORT);
                    return Err(context(
                        e,
                        format!("send to {dst} from {}", self.local_addr()),
                    ));
                }
            }
        }
        Ok(sent)
    }

    /// Waits until the UDP socket has room to send, or `timeout` passes
    /// (`None`: no limit). Returns whether it has room.
    pub fn wait_writable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        wait_fd(self.udp.as_raw_fd(), libc::POLLOUT, timeout)
    }

    /// Waits up to `timeout` until a datagram is ready to receive; true if
    /// one is.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut pfds = [
            libc::pollfd {
                fd: self.recv_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.share.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.groups.fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let r = ppoll(&mut pfds, timeout);
        if pfds[1].revents != 0 {
            self.fwd
                .ready
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }

    /// A handle that waits for incoming datagrams on its own duplicate of
    /// the receiving socket, so one thread can wait while another holds the
    /// transport (behind a lock) to send.
    pub fn waiter(&self) -> io::Result<Waiter> {
        Waiter::new(
            self.recv_fd().try_clone_to_owned()?,
            self.share.fd().try_clone()?,
            self.fwd.ready.clone(),
            self.groups.fd().try_clone_to_owned()?,
        )
    }

    /// Receives at least one datagram, waiting up to `timeout` (`None`: no
    /// limit; `Some(Duration::ZERO)`: only what is queued), and appends up
    /// to [`BATCH`] of them to `out` (each datagram the kernel hands over
    /// may hold several packets, which are appended one by one). Returns how many were appended: 0 when the time ran out.
    pub fn recv_batch(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<Received>,
    ) -> io::Result<usize> {
        self.recv_with(timeout, |d| {
            out.push(Received {
                meta: d.meta,
                data: d.payload.to_vec(),
            })
        })
    }

    /// As [`Self::recv_batch`], without copying: `f` sees each datagram in
    /// the transport's own buffers (for example to pass it straight to
    /// `Engine::handle_datagram`).
    pub fn recv_with<F: FnMut(Datagram<'_>)>(
        &mut self,
        timeout: Option<Duration>,
        mut f: F,
    ) -> io::Result<usize> {
        if timeout == Some(Duration::ZERO) {
            // Only what is queued (a spinning receiver's look): one
            // receive, no clock.
            return Ok(self.recv_once(&mut f)?.1);
        }
        // An unrepresentable deadline is as good as none.
        let deadline = timeout.map(|d| Instant::now().checked_add(d));
        loop {
            let (got, handed) = self.recv_once(&mut f)?;
            if handed > 0 {
                return Ok(handed);
            }
            let wait = match deadline {
                None | Some(None) => None,
                Some(Some(d)) => {
                    let now = Instant::now();
                    if now >= d {
                        return Ok(0);
                    }
                    Some(d - now)
                }
            };
            if got > 0 {
                continue; // all filtered out: look again before waiting
            }
            self.wait_readable(wait)?;
        }
    }

    /// One `recvmmsg(2)`: returns (datagrams received, datagrams handed out).
    fn recv_once(&mut self, f: &mut dyn FnMut(Datagram<'_>)) -> io::Result<(usize, usize)> {
        let fd = self.recv_fd().as_raw_fd();
        let raw_mode = self.raw.is_some();
        let slot = GSO_DATAGRAM;
        // A plain socket with UDP_GRO says in a control message how long
        // the packets of a coalesced datagram are (and writes none for a
        // datagram on its own).
        let want_cmsg = !raw_mode;
        self.rx.ready();
        let RxSlots {
            names, hdrs, dirty, ..
        } = &mut *self.rx;
        let n = loop {
            // SAFETY: every header points at live buffers of the lengths
            // given (names, iovs, cbufs and bufs outlive the call); the
            // kernel writes at most that much.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                *dirty = r as usize;
                break r as usize;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Nothing on the socket; forwarded datagrams may still wait.
                Some(libc::EAGAIN) => break 0,
                // Errors queued by ICMP (only on connected sockets, or
                // with IP_RECVERR): nothing to receive, nothing wrong here.
                Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH) => break 0,
                _ => return Err(context(e, format!("receive on {}", self.local_addr()))),
            }
        };
        let mut handed = 0;
        for (i, h) in hdrs.iter().enumerate().take(n) {
            let len = (h.msg_len as usize).min(slot);
            if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                self.stats.rx_truncated += 1;
                continue;
            }
            let data = &self.bufs[i * slot..i * slot + len];
            if raw_mode {
                // A datagram longer than any packet is no packet of its
                // own: its ICRC as one (64 KiB of CRC for a GSO sender's
                // super-packet, which the split below checks segment by
                // segment anyway) is looked at only if no split explains it.
                let whole = len <= MAX_DATAGRAM;
                let Some(d) = raw_datagram(self.addr, data, whole, &mut self.stats) else {
                    continue;
                };
                if d.meta.icrc != IcrcStatus::Bad {
                    // (`whole`: no longer than a packet can be.)
                    handed += deliver(&self.share, &mut self.stats, true, d, f);
                    continue;
                }
                // Maybe a loopback GSO sender's super-packet (whether this
                // transport sends with GSO or not): only packets whose
                // ICRC failed are tried.
                let ip = d.ip_packet.unwrap_or_default();
                match split_super(ip, d.payload, MAX_DATAGRAM, &mut self.segs) {
                    Split::One => handed += deliver(&self.share, &mut self.stats, true, d, f),
                    // Right as one packet: too long, as without GSO.
                    Split::Malformed if !whole && raw_icrc_ok(data) => self.stats.rx_truncated += 1,
                    Split::Malformed => self.stats.rx_gso_malformed += 1,
                    Split::Many => {
                        self.stats.rx_gso_split += 1;
                        let meta = d.meta;
                        // The IP and UDP headers, as the super-packet has them.
                        let hl = usize::from(ip[0] & 0x0f) * 4 + 8;
                        let mut head = [0u8; 68];
                        head[..hl].copy_from_slice(&ip[..hl]);
                        let start = i * slot;
                        for (k, &(off, n, icrc)) in self.segs.iter().enumerate() {
                            // Segment k's own headers go right before its
                            // payload, over the end of the segment before
                            // (handed out already): each segment is then
                            // the IP packet a wire would have carried.
                            let at = start + off;
                            segment_headers(&head[..hl], k, n, &mut self.bufs[at..at + hl]);
                            let ip_packet = &self.bufs[at..at + hl + n];
                            let seg = Datagram {
                                meta: RecvMeta { icrc, ..meta },
                                payload: &ip_packet[hl..],
                                ip_packet: Some(ip_packet),
                            };
                            handed += deliver(&self.share, &mut self.stats, true, seg, f);
                        }
                    }
                }
                continue;
            }
            let Some(from) = from_sockaddr(&names[i], h.msg_hdr.msg_namelen) else {
                self.stats.rx_ignored += 1;
                continue;
            };
            let seg_len = match want_cmsg {
                true => gro_segment_size(&h.msg_hdr).filter(|&g| g > 0 && g < len),
                false => None,
            };
            if seg_len.is_some() {
                self.stats.rx_gso_split += 1;
            } else if len > MAX_DATAGRAM {
                // Larger than any RoCE packet: as without GSO.
                self.stats.rx_truncated += 1;
                continue;
            }
            let seg_len = seg_len.unwrap_or(len.max(1));
            for (k, chunk) in data.chunks(seg_len).enumerate() {
                let icrc = plain_verdict(
                    &mut self.id_solver,
                    &mut self.id_deltas,
                    k,
                    from.ip(),
                    self.addr,
                    from.port(),
                    chunk,
                );
                let d = Datagram {
                    meta: RecvMeta {
                        src: from.ip().to_canonical(),
                        dst: self.addr,
                        src_port: from.port(),
                        icrc,
                    },
                    payload: chunk,
                    ip_packet: None,
                };
                handed += deliver(&self.share, &mut self.stats, false, d, f);
            }
            if data.is_empty() {
                // An empty datagram: handed out (as Bad) as before.
                let d = Datagram {
                    meta: RecvMeta {
                        src: from.ip().to_canonical(),
                        dst: self.addr,
                        src_port: from.port(),
                        icrc: IcrcStatus::Bad,
                    },
                    payload: data,
                    ip_packet: None,
                };
                handed += deliver(&self.share, &mut self.stats, false, d, f);
            }
        }
        // Datagrams other processes on the address passed on.
        let mut n = n;
        let look = self.fwd.should_look();
        while look && n < BATCH {
            let Some((meta, r)) = self.share.recv(&mut self.fwd_buf) else {
                break;
            };
            self.fwd.found();
            n += 1;
            let s = &mut self.stats;
            s.rx_packets += 1;
            s.rx_bytes += r.len() as u64;
            s.rx_forwarded_in += 1;
            match meta.icrc {
                IcrcStatus::Ok => s.icrc_ok += 1,
                IcrcStatus::Bad => s.icrc_bad += 1,
                IcrcStatus::Unverified => s.icrc_unverified += 1,
            }
            handed += 1;
            f(Datagram {
                meta,
                payload: &self.fwd_buf[r],
                ip_packet: None,
            });
        }
        // Datagrams to the multicast groups joined (none joined: no call).
        if !self.groups.is_empty() && n < BATCH {
            let (solver, deltas, stats) =
                (&mut self.id_solver, &mut self.id_deltas, &mut self.stats);
            let got = self
                .groups
                .recv(&mut self.fwd_buf, BATCH - n, |group, from, data| {
                    let icrc =
                        plain_verdict(solver, deltas, 0, from.ip(), group, from.port(), data);
                    stats.rx_multicast += 1;
                    stats.rx_packets += 1;
                    stats.rx_bytes += data.len() as u64;
                    match icrc {
                        IcrcStatus::Ok => stats.icrc_ok += 1,
                        IcrcStatus::Bad => stats.icrc_bad += 1,
                        IcrcStatus::Unverified => stats.icrc_unverified += 1,
                    }
                    // Not through `deliver`: every process in the group got
                    // its own copy from the kernel, so none is passed on.
                    f(Datagram {
                        meta: RecvMeta {
                            src: from.ip().to_canonical(),
                            dst: group,
                            src_port: from.port(),
                            icrc,
                        },
                        payload: data,
                        ip_packet: None,
                    });
                });
            n += got;
            handed += got;
        }
        Ok((n, handed))
    }

    fn check_transmit(&self, t: &Transmit) -> io::Result<()> {
        let bad = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        if t.src != self.addr {
            return bad(format!(
                "packet from {} on a transport bound to {}: its ICRC would not match",
                t.src, self.addr
            ));
        }
        if t.src_port != ROCE_V2_PORT {
            return bad(format!(
                "packet from UDP port {}, but a socket bound to {ROCE_V2_PORT} sends from \
                 {ROCE_V2_PORT}: set EngineConfig::udp_src_port = Some({ROCE_V2_PORT})",
                t.src_port
            ));
        }
        if t.dst.is_ipv4() != self.addr.is_ipv4() {
            return bad(format!(
                "packet to {} on a transport bound to {}: wrong address family",
                t.dst, self.addr
            ));
        }
        Ok(())
    }

    /// How many packets from the front of `pkts` go out as one GSO send:
    /// same destination, TOS and TTL, equal lengths (the last may be
    /// shorter), at most [`GSO_MAX_SEGMENTS`] and [`GSO_MAX_BYTES`].
    fn gso_run(&self, pkts: &[Transmit]) -> usize {
        match pkts.first() {
            Some(t) if self.gso.allows(t.dst) => gso_run(pkts, &self.no_gso),
            _ => 1,
        }
    }

    /// One `sendmmsg(2)` of at most [`BATCH`] checked packets, each run of
    /// packets that [`Self::gso_run`] finds as one message with a
    /// `UDP_SEGMENT` control message. Returns how many packets went, as
    /// [`Self::sendmmsg`] does.
    fn send_gso(&mut self, pkts: &[Transmit]) -> io::Result<usize> {
        debug_assert!(pkts.len() <= BATCH);
        let mut runs = [0u8; BATCH];
        let mut nruns = 0;
        let mut i = 0;
        while i < pkts.len() {
            let m = self.gso_run(&pkts[i..]);
            runs[nruns] = m as u8;
            nruns += 1;
            i += m;
        }
        self.slots.ids[..pkts.len()].fill(0);
        if nruns == pkts.len() {
            // No run of two: exactly the path without GSO.
            return self.sendmmsg(pkts);
        }
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;
        // SAFETY: as above.
        let seg_space = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as usize;
        debug_assert!(2 * space + seg_space <= size_of::<Cbuf>());
        let fd = self.udp.as_raw_fd();
        let v6 = self.addr.is_ipv6();
        let (level, tos, ttl) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, libc::IPV6_HOPLIMIT)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS, libc::IP_TTL)
        };
        let Slots {
            names,
            hdrs,
            cbufs,
            gso_iovs,
            icrcs,
            ids,
            ..
        } = &mut *self.slots;
        let mut first = 0;
        let mut iov = 0;
        for r in 0..nruns {
            let m = usize::from(runs[r]);
            let run = &pkts[first..first + m];
            let t = &run[0];
            let namelen = to_sockaddr(SocketAddr::new(t.dst, ROCE_V2_PORT), &mut names[r]);
            let iov0 = iov;
            for (k, p) in run.iter().enumerate() {
                let len = p.payload.len();
                if k == 0 || v6 || len < ICRC_LEN {
                    gso_iovs[iov] = libc::iovec {
                        // The kernel only reads through this pointer.
                        iov_base: p.payload.as_ptr() as *mut libc::c_void,
                        iov_len: len,
                    };
                    iov += 1;
                } else {
                    // Segment k leaves with IPv4 identification k.
                    let carried = u32::from_le_bytes(
                        p.payload[len - ICRC_LEN..].try_into().expect("4 bytes"),
                    );
                    let crc = carried ^ self.id_deltas.delta(len - ICRC_LEN, k as u16);
                    icrcs[first + k] = crc.to_le_bytes();
                    ids[first + k] = k as u16;
                    gso_iovs[iov] = libc::iovec {
                        iov_base: p.payload.as_ptr() as *mut libc::c_void,
                        iov_len: len - ICRC_LEN,
                    };
                    gso_iovs[iov + 1] = libc::iovec {
                        iov_base: icrcs[first + k].as_mut_ptr().cast(),
                        iov_len: ICRC_LEN,
                    };
                    iov += 2;
                }
            }
            let (cmsgs, ncmsgs) = self.defaults.ancillary(t, tos, ttl);
            let cbuf = cbufs[r].as_mut_ptr().cast::<u8>();
            let mut clen = 0;
            if ncmsgs > 0 || m > 1 {
                cbufs[r] = [0; 10];
            }
            for &(ty, val) in &cmsgs[..ncmsgs] {
                // SAFETY: each cmsg lies within the 80-byte, 8-aligned
                // buffer (2 * space + seg_space <= 80); the data of an
                // `int` cmsg fits in its space.
                unsafe {
                    let c = cbuf.add(clen).cast::<libc::cmsghdr>();
                    (*c).cmsg_level = level;
                    (*c).cmsg_type = ty;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), val);
                }
                clen += space;
            }
            if m > 1 {
                // SAFETY: as above, for a `u16` cmsg.
                unsafe {
                    let c = cbuf.add(clen).cast::<libc::cmsghdr>();
                    (*c).cmsg_level = libc::IPPROTO_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(
                        libc::CMSG_DATA(c).cast::<u16>(),
                        t.payload.len() as u16,
                    );
                }
                clen += seg_space;
            }
            let h = &mut hdrs[r].msg_hdr;
            h.msg_name = (&mut names[r] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            h.msg_iov = &mut gso_iovs[iov0];
            h.msg_iovlen = (iov - iov0) as _;
            h.msg_control = if clen == 0 {
                std::ptr::null_mut()
            } else {
                cbuf.cast()
            };
            h.msg_controllen = clen as _;
            h.msg_flags = 0;
            hdrs[r].msg_len = 0;
            first += m;
        }
        let r = loop {
            // SAFETY: every header points at live buffers of the lengths
            // given (names, gso_iovs, icrcs, cbufs and the payloads
            // outlive the call).
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    nruns as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                )
            };
            if r >= 0 {
                break Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                break Err(e);
            }
        };
        match r {
            Ok(sent) => {
                let mut n = 0;
                for &m in &runs[..sent] {
                    let m = usize::from(m);
                    if m > 1 {
                        self.stats.tx_gso_sends += 1;
                        self.stats.tx_gso_segments += m as u64;
                    }
                    n += m;
                }
                Ok(n)
            }
            // A full buffer: as without GSO (the caller waits, or drops
            // the rest and the protocol retries).
            Err(e) if is_full(&e) => Err(e),
            Err(e) if runs[0] == 1 => Err(e),
            Err(_) => {
                // The kernel refused the GSO send (a segment larger than
                // the path MTU, a device without checksum offload...):
                // the same packets one by one say which, if any, fails.
                self.stats.tx_gso_fallbacks += 1;
                let m = usize::from(runs[0]);
                self.slots.ids[..m].fill(0);
                let n = self.sendmmsg(&pkts[..m])?;
                if n > 0 && !self.no_gso.contains(&pkts[0].dst) && self.no_gso.len() < 1024 {
                    self.no_gso.push(pkts[0].dst);
                }
                Ok(n)
            }
        }
    }

    /// One `sendmmsg(2)` of at most [`BATCH`] checked packets.
    fn sendmmsg(&mut self, pkts: &[Transmit]) -> io::Result<usize> {
        debug_assert!(pkts.len() <= BATCH);
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;
        debug_assert!(2 * space <= size_of::<Cbuf>());
        let fd = self.udp.as_raw_fd();
        let Slots {
            names,
            iovs,
            hdrs,
            cbufs,
            ..
        } = &mut *self.slots;
        let v6 = self.addr.is_ipv6();
        let (level, tos, ttl) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS, libc::IPV6_HOPLIMIT)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS, libc::IP_TTL)
        };
        for (i, t) in pkts.iter().enumerate() {
            let namelen = to_sockaddr(SocketAddr::new(t.dst, ROCE_V2_PORT), &mut names[i]);
            iovs[i] = libc::iovec {
                // The kernel only reads through this pointer.
                iov_base: t.payload.as_ptr() as *mut libc::c_void,
                iov_len: t.payload.len(),
            };
            let (cmsgs, ncmsgs) = self.defaults.ancillary(t, tos, ttl);
            if ncmsgs > 0 {
                cbufs[i] = [0; 10];
            }
            let cbuf = cbufs[i].as_mut_ptr().cast::<u8>();
            for (k, &(ty, val)) in cmsgs[..ncmsgs].iter().enumerate() {
                // SAFETY: cmsg k lies at k * space within the 80-byte,
                // 8-aligned buffer (2 * space <= 80); the data of an `int`
                // cmsg fits in its space.
                unsafe {
                    let c = cbuf.add(k * space).cast::<libc::cmsghdr>();
                    (*c).cmsg_level = level;
                    (*c).cmsg_type = ty;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), val);
                }
            }
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = namelen;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            if ncmsgs == 0 {
                h.msg_control = std::ptr::null_mut();
            } else {
                h.msg_control = cbuf.cast();
            }
            h.msg_controllen = (ncmsgs * space) as _;
            h.msg_flags = 0;
            hdrs[i].msg_len = 0;
        }
        loop {
            // SAFETY: every header points at live buffers of the lengths
            // given (names, iovs, cbufs and the payloads outlive the call).
            let r = unsafe {
                libc::sendmmsg(
                    fd,
                    hdrs.as_mut_ptr(),
                    pkts.len() as libc::c_uint,
                    libc::MSG_DONTWAIT as _,
                )
            };
            if r >= 0 {
                return Ok(r as usize);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }
}

/// The TOS (traffic class) and TTL (hop limit) a socket gives packets sent
/// without ancillary data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SocketDefaults {
    pub(super) tos: u8,
    pub(super) ttl: u8,
}

impl SocketDefaults {
    fn query(s: &OwnedFd, v6: bool) -> io::Result<Self> {
        let (level, tos, ttl) = if v6 {
            (
                libc::IPPROTO_IPV6,
                libc::IPV6_TCLASS,
                libc::IPV6_UNICAST_HOPS,
            )
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS, libc::IP_TTL)
        };
        let fd = s.as_raw_fd();
        // An unset TTL or hop limit reads as the system's default; an
        // unset traffic class as 0.
        Ok(SocketDefaults {
            tos: getsockopt_int(fd, level, tos)?.clamp(0, 255) as u8,
            ttl: getsockopt_int(fd, level, ttl)?.clamp(0, 255) as u8,
        })
    }

    /// The control messages (type, value) `t` needs, and how many: only
    /// for what differs from the socket's own settings, since the kernel's
    /// handling of ancillary data costs time per datagram
    /// (docs/performance.md, "Figures that were in code comments"). A hop
    /// limit of 0 asks for the socket's default (IPv4 refuses a TTL of 0).
    pub(super) fn ancillary(
        self,
        t: &Transmit,
        tos_type: libc::c_int,
        ttl_type: libc::c_int,
    ) -> ([(libc::c_int, libc::c_int); 2], usize) {
        let mut cmsgs = [(0, 0); 2];
        let mut n = 0;
        if t.traffic_class != self.tos {
            cmsgs[n] = (tos_type, libc::c_int::from(t.traffic_class));
            n += 1;
        }
        if t.hop_limit != 0 && t.hop_limit != self.ttl {
            cmsgs[n] = (ttl_type, libc::c_int::from(t.hop_limit));
            n += 1;
        }
        (cmsgs, n)
    }
}

fn is_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS))
}

fn is_broadcast(addr: IpAddr) -> bool {
    matches!(addr, IpAddr::V4(a) if a.is_broadcast())
}

/// Hands a datagram to `f`, or passes it on to the process sharing the
/// address that owns it ([`crate::share`]), and counts it. Returns 1 if `f`
/// saw it, 0 if not.
fn deliver(
    share: &Share,
    stats: &mut UdpStats,
    raw_mode: bool,
    d: Datagram<'_>,
    f: &mut dyn FnMut(Datagram<'_>),
) -> usize {
    let owner = share.owner(d.payload);
    if raw_mode
        && owner.is_none()
        && rxe_core::mad::is_gsi_packet(d.payload)
        && !share.answers_unowned()
    {
        // A MAD no agent owns: in raw mode every process sees it, and one
        // answers (crate::share).
        stats.rx_others += 1;
        return 0;
    }
    if let Some(p) = owner.filter(|&p| p != share.prefix()) {
        // Another process's, if one holds the prefix: in raw mode it sees
        // the packet itself; a plain socket's datagram is passed on. A
        // prefix nobody holds (a QP of a process gone, a MAD for an agent
        // gone) is the engine's to answer or count, as before sharing.
        if raw_mode {
            if share.is_held(p) {
                stats.rx_others += 1;
                return 0;
            }
        } else {
            match share.forward(p, &d.meta, d.payload) {
                Forward::Sent => {
                    stats.rx_forwarded += 1;
                    return 0;
                }
                Forward::Full => {
                    stats.rx_forward_full += 1;
                    return 0;
                }
                Forward::Nobody => {}
            }
        }
        stats.rx_unowned += 1;
    }
    stats.rx_packets += 1;
    stats.rx_bytes += d.payload.len() as u64;
    match d.meta.icrc {
        IcrcStatus::Ok => stats.icrc_ok += 1,
        IcrcStatus::Bad => stats.icrc_bad += 1,
        IcrcStatus::Unverified => stats.icrc_unverified += 1,
    }
    f(d);
    1
}

/// A raw-mode datagram for the engine: its ICRC checked (`check_icrc`) or
/// taken as Bad (a datagram longer than any packet, which the caller tries
/// to split).
fn raw_datagram<'a>(
    addr: IpAddr,
    ip: &'a [u8],
    check_icrc: bool,
    stats: &mut UdpStats,
) -> Option<Datagram<'a>> {
    let frame = match RoceFrame::parse_ip(ip, None) {
        Ok(f) => f,
        Err(rxe_core::wire::Error::NotRoce(_)) => {
            stats.rx_ignored += 1;
            return None;
        }
        Err(_) => {
            stats.rx_malformed += 1;
            return None;
        }
    };
    if frame.ip.dst() != addr {
        stats.rx_ignored += 1;
        return None;
    }
    let icrc = if check_icrc && frame.transport.len() >= BTH_LEN + ICRC_LEN && frame.icrc_ok() {
        IcrcStatus::Ok
    } else {
        IcrcStatus::Bad
    };
    Some(Datagram {
        meta: RecvMeta {
            src: frame.ip.src(),
            dst: addr,
            src_port: frame.udp_src_port,
            icrc,
        },
        payload: frame.transport,
        ip_packet: Some(frame.ip_packet),
    })
}
