//! The fuzzer's UDP socket on `LOCAL:4791`: datagrams out exactly as
//! crafted, datagrams in as they come. Both the session's packets
//! ([`super::session::Link`]) and the CM's MADs ([`super::cm`]) go
//! through it; it knows nothing of either.

use super::config::Res;
use rxe_core::engine::Transmit;
use rxe_core::wire::ROCE_V2_PORT;
use rxe_net::udp::{GsoSend, Received, UdpTransport};
use std::net::IpAddr;
use std::time::Duration;

/// The socket and the address it is bound to.
pub(crate) struct Socket {
    tr: UdpTransport,
    /// Our address (the one bound, as the transport reports it).
    pub local: IpAddr,
}

impl Socket {
    /// Binds UDP port 4791 of `local`.
    pub(crate) fn bind(local: IpAddr) -> Res<Socket> {
        let mut tr = UdpTransport::bind(local).map_err(|e| format!("bind {local}:4791: {e}"))?;
        // Every packet leaves as crafted, one datagram with IPv4 ID 0,
        // whatever RXE_GSO says: a finding replays byte for byte.
        tr.set_gso_send(GsoSend::Off);
        Ok(Socket {
            local: tr.addr(),
            tr,
        })
    }

    /// Sends one datagram, waiting a little while the socket is full.
    pub(crate) fn send_transmit(&mut self, t: Transmit) -> Res<()> {
        for _ in 0..200 {
            match self.tr.send_batch(std::slice::from_ref(&t)) {
                Ok(1) => return Ok(()),
                Ok(_) => {
                    let _ = self.tr.wait_writable(Some(Duration::from_millis(10)));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the socket stayed full".into())
    }

    /// One datagram from our port 4791 to `dst`'s, with `hop_limit` (0:
    /// the system's default).
    pub(crate) fn send_to(&mut self, dst: IpAddr, payload: Vec<u8>, hop_limit: u8) -> Res<()> {
        let t = Transmit {
            src: self.local,
            dst,
            src_port: ROCE_V2_PORT,
            traffic_class: 0,
            hop_limit,
            payload,
        };
        self.send_transmit(t)
    }

    /// Receives what is there, or waits up to `wait` for something.
    pub(crate) fn recv_into(
        &mut self,
        wait: Option<Duration>,
        out: &mut Vec<Received>,
    ) -> std::io::Result<usize> {
        self.tr.recv_batch(wait, out)
    }

    /// The top 8 bits our QP numbers must have to reach this process
    /// (rxe-net shares an address between processes by QPN prefix).
    pub(crate) fn qpn_prefix(&self) -> u8 {
        self.tr.qpn_prefix()
    }
}
