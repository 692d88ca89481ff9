//! UD multicast groups: which QPs are attached to which multicast GID
//! (`ibv_attach_mcast`), with the kernel rxe's limits (rxe_param.h).
//!
//! A packet to the multicast QPN (0xFFFFFF) goes to every UD QP attached
//! to the group its destination address names; the engine hands each
//! its own copy, as `rxe_rcv_mcast_pkt` does. Joining the group's IP
//! address on the network is the transport's part.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};

/// The destination QPN of a multicast packet.
pub const MULTICAST_QPN: u32 = 0xFF_FFFF;
/// Groups per device (`RXE_MAX_MCAST_GRP`).
pub const MAX_MCAST_GRP: u32 = 8192;
/// QPs per group (`RXE_MAX_MCAST_QP_ATTACH`).
pub const MAX_MCAST_QP_ATTACH: u32 = 56;
/// Attachments per device over all groups (`RXE_MAX_TOT_MCAST_QP_ATTACH`).
pub const MAX_TOTAL_MCAST_QP_ATTACH: u32 = 0x70000;

/// A multicast GID, as `ibv_attach_mcast` takes it.
pub type Mgid = [u8; 16];

/// The IP group a multicast GID stands for: an IPv4-mapped GID
/// (`::ffff:224.0.0.0/4`) is its IPv4 group, any other `ff00::/8` GID an
/// IPv6 group; `None` for a GID that is not multicast (what the kernel's
/// `rdma_is_multicast_addr` refuses).
pub fn group_of_gid(gid: Mgid) -> Option<IpAddr> {
    let a = Ipv6Addr::from(gid);
    match a.to_ipv4_mapped() {
        Some(v4) if v4.is_multicast() => Some(IpAddr::V4(v4)),
        Some(_) => None,
        None if a.is_multicast() => Some(IpAddr::V6(a)),
        None => None,
    }
}

/// The GID of an IP multicast group, as rdma_cm makes it for RoCE v2: an
/// IPv4 group mapped (`::ffff:a.b.c.d`), an IPv6 group as it is.
pub fn gid_of_group(group: IpAddr) -> Mgid {
    match group {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// What an attach did to the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attached {
    /// The group is new: its first QP (join the IP group).
    First,
    /// Another QP in a group that had members.
    Added,
    /// The QP was attached already (nothing changed).
    Already,
}

/// What a detach did to the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detached {
    /// The group's last QP left (leave the IP group).
    Last,
    /// Others stay.
    Others,
}

/// Why an attach or detach was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McastError {
    /// The GID is not a multicast GID.
    NotMulticast,
    /// A limit was reached (the kernel's ENOMEM).
    TooMany(&'static str, u32),
    /// The QP is not attached to that group (the kernel's EINVAL).
    NotAttached,
}

/// The device's groups.
#[derive(Debug, Default)]
pub struct Groups {
    members: HashMap<Mgid, Vec<u32>>,
    total: u32,
}

impl Groups {
    /// Attaches QP `qpn` to group `gid`.
    pub fn attach(&mut self, gid: Mgid, qpn: u32) -> Result<Attached, McastError> {
        group_of_gid(gid).ok_or(McastError::NotMulticast)?;
        if let Some(m) = self.members.get(&gid) {
            if m.contains(&qpn) {
                return Ok(Attached::Already);
            }
        } else if self.members.len() as u32 >= MAX_MCAST_GRP {
            return Err(McastError::TooMany("max_mcast_grp", MAX_MCAST_GRP));
        }
        if self.total >= MAX_TOTAL_MCAST_QP_ATTACH {
            return Err(McastError::TooMany(
                "max_total_mcast_qp_attach",
                MAX_TOTAL_MCAST_QP_ATTACH,
            ));
        }
        let m = self.members.entry(gid).or_default();
        if m.len() as u32 >= MAX_MCAST_QP_ATTACH {
            return Err(McastError::TooMany(
                "max_mcast_qp_attach",
                MAX_MCAST_QP_ATTACH,
            ));
        }
        m.push(qpn);
        self.total += 1;
        Ok(if m.len() == 1 {
            Attached::First
        } else {
            Attached::Added
        })
    }

    /// Detaches QP `qpn` from group `gid`.
    pub fn detach(&mut self, gid: Mgid, qpn: u32) -> Result<Detached, McastError> {
        let m = self.members.get_mut(&gid).ok_or(McastError::NotAttached)?;
        let i = m
            .iter()
            .position(|&q| q == qpn)
            .ok_or(McastError::NotAttached)?;
        m.remove(i);
        self.total -= 1;
        if m.is_empty() {
            self.members.remove(&gid);
            return Ok(Detached::Last);
        }
        Ok(Detached::Others)
    }

    /// The QPs attached to `gid`, in the order they attached.
    pub fn members(&self, gid: &Mgid) -> &[u32] {
        self.members.get(gid).map_or(&[], |m| m.as_slice())
    }

    /// Whether QP `qpn` is attached to any group.
    pub fn has_qp(&self, qpn: u32) -> bool {
        self.members.values().any(|m| m.contains(&qpn))
    }

    /// Detaches QP `qpn` from every group; returns the groups that lost
    /// their last QP.
    pub fn detach_all(&mut self, qpn: u32) -> Vec<Mgid> {
        let gids: Vec<Mgid> = self
            .members
            .iter()
            .filter(|(_, m)| m.contains(&qpn))
            .map(|(g, _)| *g)
            .collect();
        gids.into_iter()
            .filter(|g| self.detach(*g, qpn) == Ok(Detached::Last))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(n: u8) -> Mgid {
        gid_of_group(IpAddr::V4([239, 0, 0, n].into()))
    }

    #[test]
    fn gids_map_to_groups_as_the_kernel_tells_multicast() {
        let v4: IpAddr = "239.1.2.3".parse().unwrap();
        assert_eq!(group_of_gid(gid_of_group(v4)), Some(v4));
        let v6: IpAddr = "ff0e::1234".parse().unwrap();
        assert_eq!(group_of_gid(gid_of_group(v6)), Some(v6));
        let uni: std::net::Ipv4Addr = "10.0.0.1".parse().unwrap();
        assert_eq!(group_of_gid(uni.to_ipv6_mapped().octets()), None);
        let ll: Ipv6Addr = "fe80::1".parse().unwrap();
        assert_eq!(group_of_gid(ll.octets()), None);
    }

    #[test]
    fn attach_and_detach_follow_the_kernel() {
        let mut gs = Groups::default();
        assert_eq!(gs.attach(g(1), 10), Ok(Attached::First));
        assert_eq!(gs.attach(g(1), 10), Ok(Attached::Already));
        assert_eq!(gs.attach(g(1), 11), Ok(Attached::Added));
        assert_eq!(gs.members(&g(1)), &[10, 11]);
        assert_eq!(gs.attach([0; 16], 10), Err(McastError::NotMulticast));
        assert_eq!(gs.detach(g(2), 10), Err(McastError::NotAttached));
        assert_eq!(gs.detach(g(1), 12), Err(McastError::NotAttached));
        assert_eq!(gs.detach(g(1), 10), Ok(Detached::Others));
        assert_eq!(gs.detach(g(1), 11), Ok(Detached::Last));
        assert!(gs.members(&g(1)).is_empty());
        assert_eq!(gs.total, 0);
    }

    #[test]
    fn a_group_holds_at_most_56_qps() {
        let mut gs = Groups::default();
        for q in 0..MAX_MCAST_QP_ATTACH {
            gs.attach(g(1), q).unwrap();
        }
        assert_eq!(
            gs.attach(g(1), 999),
            Err(McastError::TooMany("max_mcast_qp_attach", 56))
        );
        assert_eq!(gs.attach(g(2), 999), Ok(Attached::First));
        assert!(gs.has_qp(999));
        assert_eq!(gs.detach_all(999), vec![g(2)]);
        assert!(!gs.has_qp(999));
    }
}
