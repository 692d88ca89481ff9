//! # rxe-net: moving RoCE v2 datagrams
//!
//! The I/O side of rxe-rs, kept apart from the sans-IO protocol in
//! `rxe-core`: where frames come from and where they go.
//!
//! * [`capture`]: reading pcap and pcapng files (Ethernet, Linux cooked
//!   SLL/SLL2 and raw-IP link types) into numbered, timestamped frames that
//!   [`rxe_core::wire::RoceFrame::parse`] takes as they are, and writing
//!   classic pcap files of what crosses a link.
//! * [`live`]: frames from a network interface as they pass (a packet
//!   socket, as tcpdump uses), for `rxe dump -i`.
//! * [`faults`]: loss, duplication, reordering and corruption injected into
//!   the batches a real device sends (`RXE_FAULTS`).
//! * [`sim`]: a simulated network of engines on a virtual clock, with
//!   seeded loss, duplication, reordering, corruption and delay.
//! * [`udp`]: RoCE v2 through the kernel's UDP stack, unprivileged
//!   (`sendmmsg`/`recvmmsg` on a socket bound to port 4791), with an
//!   optional raw-socket receive mode that checks every IPv4 ICRC.
//! * [`mcast`]: UD multicast groups as IP multicast groups joined on the
//!   device's interface.
//! * [`route`]: the link MTU towards a peer and the RoCE path MTU it allows.
// `udp`, `mcast`, `share`, `route` and `live` make system calls through `libc`; nothing else
// may use unsafe code.
#![deny(unsafe_code)]

pub mod capture;
pub mod faults;
#[allow(unsafe_code)]
pub mod live;
#[allow(unsafe_code)]
pub mod mcast;
#[allow(unsafe_code)]
pub mod route;
#[allow(unsafe_code)]
pub mod share;
pub mod sim;
#[allow(unsafe_code)]
pub mod udp;
