//! Communication identifiers (`rdma_cm_id`) up to a resolved route:
//! `rdma_create_id`, `rdma_destroy_id`, `rdma_bind_addr`,
//! `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_migrate_id`,
//! `rdma_set_option`, `rdma_get_src_port`/`rdma_get_dst_port`,
//! `rdma_init_qp_attr` (with the attributes of a connection, from its
//! rxe-verbs id), the ECE calls, and `rdma_get_devices`/`rdma_free_devices`.
//!
//! The id's public fields are written as librdmacm writes them from the
//! kernel's answers for a RoCE device: binding to a device's address sets
//! `verbs` (the device's context for the process), `pd` (a PD the library
//! keeps per device) and `port_num` (1); the route's `ibaddr` holds the
//! RoCE v2 GIDs of both ends and P_Key 0xffff; a resolved route has one
//! path record as the kernel's `cma_resolve_iboe_route` makes it.
//!
//! Port numbers live in a port space per `rdma_port_space`, as the kernel's
//! do, but only within this process (another process's rdma_cm ports are
//! not seen): port 0 picks a free one in 32768–60999, and a taken port on
//! the same address (or the wildcard) is EADDRINUSE unless both ids set
//! `RDMA_OPTION_ID_REUSEADDR`.

use super::channel::{self, channel_of, Channel, Param};
use super::object::{any_of, complete, forget, CmId, IdState, Phase};
use super::{
    canonical, cma_devices, dev_by_addr, gid, init, is_loopback, minus_one, read_sockaddr,
    write_sockaddr, CmaDev,
};
use crate::event_count::EventCount;
use crate::ffi::{entry, note, set_errno, Fail};
use crate::handle::{self};
use crate::sys::*;
use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};

// ---------------------------------------------------------------------------
// Port spaces
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct PortUse {
    ps: rdma_port_space,
    port: u16,
    addr: IpAddr,
    reuse: bool,
    afonly: bool,
    id: usize,
}

fn ports() -> &'static Mutex<Vec<PortUse>> {
    static P: OnceLock<Mutex<Vec<PortUse>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

fn conflicts(a: &PortUse, addr: IpAddr, reuse: bool, afonly: bool) -> bool {
    if a.reuse && reuse {
        return false;
    }
    if a.addr.is_ipv4() != addr.is_ipv4() && (a.afonly || afonly) {
        return false;
    }
    a.addr.is_unspecified() || addr.is_unspecified() || a.addr == addr
}

/// Takes `port` (0: a free one) on `addr` in port space `ps` for the id
/// at `id`.
fn claim(
    ps: rdma_port_space,
    addr: IpAddr,
    port: u16,
    reuse: bool,
    afonly: bool,
    id: usize,
) -> Result<u16, Fail> {
    let mut p = ports().lock();
    let taken = |port: u16, p: &Vec<PortUse>| {
        p.iter()
            .any(|u| u.ps == ps && u.port == port && conflicts(u, addr, reuse, afonly))
    };
    let port = if port != 0 {
        if let Some(u) = p
            .iter()
            .find(|u| u.ps == ps && u.port == port && conflicts(u, addr, reuse, afonly))
        {
            return Err(in_use(u, addr, port));
        }
        port
    } else {
        const LOW: u32 = 32768;
        const N: u32 = 60999 - LOW + 1;
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_usize(id);
        let start = (h.finish() % u64::from(N)) as u32;
        (0..N)
            .map(|i| (LOW + (start + i) % N) as u16)
            .find(|&port| !taken(port, &p))
            .ok_or_else(|| Fail::new(libc::EADDRNOTAVAIL, "no free port in 32768-60999"))?
    };
    p.push(PortUse {
        ps,
        port,
        addr,
        reuse,
        afonly,
        id,
    });
    Ok(port)
}

/// The kernel's answer to a port that `u` holds (`cma_check_port`):
/// EADDRNOTAVAIL when either address is a wildcard, else EADDRINUSE.
fn in_use(u: &PortUse, addr: IpAddr, port: u16) -> Fail {
    let e = if u.addr.is_unspecified() || addr.is_unspecified() {
        libc::EADDRNOTAVAIL
    } else {
        libc::EADDRINUSE
    };
    Fail::new(
        e,
        format!(
            "port {port} on {addr} conflicts with another rdma_cm_id of this process on {}",
            u.addr
        ),
    )
}

/// rdma_listen on an id bound with REUSEADDR: the kernel checks its port
/// again as if without (`cma_bind_listen`), so another id bound to it, even
/// one not listening, makes the listen fail.
pub fn check_listen(ps: rdma_port_space, id: usize) -> Result<(), Fail> {
    let p = ports().lock();
    let Some(me) = p.iter().find(|u| u.id == id && u.ps == ps) else {
        return Ok(());
    };
    if !me.reuse {
        return Ok(());
    }
    match p.iter().find(|u| {
        u.id != id && u.ps == ps && u.port == me.port && conflicts(u, me.addr, false, me.afonly)
    }) {
        Some(u) => Err(in_use(u, me.addr, me.port)),
        None => Ok(()),
    }
}

fn release(id: usize) {
    ports().lock().retain(|u| u.id != id);
}

fn rebind(id: usize, addr: IpAddr) {
    for u in ports().lock().iter_mut().filter(|u| u.id == id) {
        u.addr = addr;
    }
}

// ---------------------------------------------------------------------------
// Creating and destroying ids
// ---------------------------------------------------------------------------

/// librdmacm's `rdma_create_id2`: an id on `channel` (NULL: synchronous,
/// on a channel of its own).
pub fn create(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
    qp_type: ibv_qp_type,
) -> Result<*mut rdma_cm_id, Fail> {
    init()?;
    let (ch, sync) = if channel.is_null() {
        (Channel::create()?, true)
    } else {
        (channel_of(channel)?, false)
    };
    create_on(ch, sync, context, ps, qp_type)
}

/// An id on the channel `ch` (`sync`: the id's own).
pub fn create_on(
    ch: Arc<Channel>,
    sync: bool,
    context: *mut c_void,
    ps: rdma_port_space,
    qp_type: ibv_qp_type,
) -> Result<*mut rdma_cm_id, Fail> {
    // SAFETY: rdma_cm_id is plain data; all zeroes is valid.
    let mut cid: rdma_cm_id = unsafe { std::mem::zeroed() };
    cid.channel = ch.ptr();
    cid.context = context;
    cid.ps = ps;
    cid.qp_type = qp_type;
    let b = Box::new(CmId {
        id: UnsafeCell::new(cid),
        st: Mutex::new(IdState {
            channel: ch,
            sync,
            phase: Phase::Idle,
            dev: None,
            src: None,
            dst: None,
            reuseaddr: false,
            afonly: false,
            tos: None,
            ack_timeout: None,
            path: None,
            qp_init_attr: None,
            connect: Vec::new(),
            local_ece: (0, 0),
            remote_ece: (0, 0),
            cm: Default::default(),
            mcast: Vec::new(),
        }),
        events: Arc::new(EventCount::default()),
        qp_type,
        ps,
    });
    let raw = Box::into_raw(b);
    handle::add(raw);
    Ok(raw.cast())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int {
        minus_one(VERB, || {
            if id.is_null() {
                return Err(Fail::inval("id", "NULL"));
            }
            let qp_type = match ps {
                RDMA_PS_IPOIB | RDMA_PS_UDP => IBV_QPT_UD,
                RDMA_PS_TCP | RDMA_PS_IB => IBV_QPT_RC,
                _ => {
                    return Err(Fail::inval(
                        "ps",
                        format!("{ps:#x} (RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB or RDMA_PS_IB)"),
                    ))
                }
            };
            let p = create(channel, context, ps, qp_type)?;
            // SAFETY: checked non-NULL; the program's output.
            unsafe { id.write(p) };
            Ok(())
        })
    }
}

/// Frees an id: its port, its events not taken, its own channel. Waits
/// until every event about it that was taken is acknowledged.
pub fn destroy(p: *mut rdma_cm_id) -> Result<(), Fail> {
    let cm = handle::get::<CmId>(p, "id")?;
    if !handle::remove(p.cast::<CmId>()) {
        return Err(Fail::inval("id", "destroyed already"));
    }
    forget(cm);
    release(p as usize);
    let c = cm.c();
    // SAFETY: the id is ours (removed from the registry: no other call finds it).
    let ev = unsafe { std::mem::replace(&mut (*c).event, std::ptr::null_mut()) };
    if !ev.is_null() {
        let _ = channel::ack_event(ev);
    }
    // Taking the id's lock also waits for the bridge if it is queueing a
    // connection request for this listener (`connect_request` does that
    // under this lock, and only while the id is live).
    let (ch, sync) = {
        let st = cm.lock();
        (st.channel.clone(), st.sync)
    };
    // Its events not taken go; so do the connection requests it listened
    // for, and their new ids (which rejects the requests, as the kernel
    // does).
    for e in ch.withdraw(p as usize) {
        if e.event == RDMA_CM_EVENT_CONNECT_REQUEST && e.listen_id == p as usize {
            let _ = destroy(e.id as *mut rdma_cm_id);
        }
    }
    cm.events.wait_all_acked();
    if sync {
        ch.unregister();
    }
    // SAFETY: a Box<CmId> made by create(), no longer reachable.
    drop(unsafe { Box::from_raw(p.cast::<CmId>()) });
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
        minus_one(VERB, || destroy(id))
    }
}

// ---------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------

/// Whether this host has `ip` (a socket can be bound to it).
fn host_has(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// `rdma_bind_addr` on a locked id.
pub fn bind(cm: &CmId, st: &mut IdState, sa: SocketAddr) -> Result<(), Fail> {
    if st.phase != Phase::Idle {
        return Err(Fail::inval("id", "bound already"));
    }
    let (_, ps) = cm.kind();
    // The kernel looks an IPv6 address up as IPv6: no interface has a
    // v4-mapped one.
    if is_v4_mapped(sa.ip()) {
        return Err(Fail::new(
            libc::EADDRNOTAVAIL,
            format!(
                "{} is v4-mapped: no interface has it (bind {})",
                sa.ip(),
                canonical(sa.ip())
            ),
        ));
    }
    let ip = canonical(sa.ip());
    if ps == RDMA_PS_IPOIB && !ip.is_unspecified() {
        return Err(Fail::inval(
            "addr",
            "RDMA_PS_IPOIB binds only on InfiniBand",
        ));
    }
    // A loopback address no soft device has binds with no device, as
    // the kernel binds it (libfabric's verbs provider relies on it).
    let dev = if ip.is_unspecified() || (ip.is_loopback() && dev_by_addr(ip).is_none()) {
        None
    } else {
        Some(dev_by_addr(ip).ok_or_else(|| {
            if host_has(ip) {
                Fail::new(
                    libc::ENODEV,
                    format!("{ip} is this host's but no soft device's (RXE_DEVICES)"),
                )
            } else {
                Fail::new(
                    libc::EADDRNOTAVAIL,
                    format!("{ip} is not an address of this host"),
                )
            }
        })?)
    };
    let port = claim(ps, ip, sa.port(), st.reuseaddr, st.afonly, cm.addr())?;
    if let Some(d) = dev {
        if let Err(e) = cm.attach(st, d) {
            release(cm.addr());
            return Err(e);
        }
    }
    let mut sa = sa;
    sa.set_port(port);
    st.src = Some(sa);
    st.phase = Phase::AddrBound;
    cm.write_route(st);
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's address.
            let sa = unsafe { read_sockaddr(addr, "addr") }?;
            let mut st = cm.lock();
            bind(cm, &mut st, sa)
        })
    }
}

/// Whether `dst` from device `d` means the device itself: a loopback or
/// wildcard destination from a device that is not on loopback. The kernel
/// resolves such a destination to the device (`cma_bind_loopback`) and
/// its CM loops the connection back; here it goes to the device's own
/// address.
pub fn to_self(d: &CmaDev, dst: IpAddr) -> bool {
    let dst = canonical(dst);
    (dst.is_loopback() || dst.is_unspecified()) && !is_loopback(d.addr())
}

/// Whether `a` is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
fn is_v4_mapped(a: IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// The soft device that reaches `dst` from an unbound id: the device with
/// that address; for a loopback (or wildcard) destination, the first
/// device on loopback, else the first device of its family (the device
/// itself, as the kernel's `cma_bind_loopback` picks its first device);
/// otherwise the device on the address the host's routing table would
/// send from, or for an address of this host another process's device
/// holds, the device on the same interface. Err is the negative errno of RDMA_CM_EVENT_ADDR_ERROR.
fn route_to(dst: IpAddr) -> Result<&'static CmaDev, (c_int, String)> {
    let dst = canonical(dst);
    if let Some(d) = dev_by_addr(dst) {
        return Ok(d);
    }
    if dst.is_loopback() || dst.is_unspecified() {
        let family = |d: &&CmaDev| canonical(d.addr()).is_ipv4() == dst.is_ipv4();
        return cma_devices()
            .iter()
            .filter(family)
            .find(|d| is_loopback(d.addr()))
            .or_else(|| cma_devices().iter().find(family))
            .ok_or_else(|| {
                (
                    -libc::ENODEV,
                    format!("{dst} is on loopback and no soft device of its family exists"),
                )
            });
    }
    let sock = std::net::UdpSocket::bind(match dst {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    })
    .map_err(|e| (-libc::ENETUNREACH, format!("no route to {dst}: {e}")))?;
    sock.connect((dst, 4791))
        .map_err(|e| (-libc::ENETUNREACH, format!("no route to {dst}: {e}")))?;
    let src = sock
        .local_addr()
        .map_err(|e| (-libc::ENETUNREACH, format!("no route to {dst}: {e}")))?
        .ip();
    if let Some(d) = dev_by_addr(src) {
        return Ok(d);
    }
    // A destination on this host that no device of this process holds
    // (the host sends to it from itself): another process's soft device
    // on the same interface. The kernel's rxe, whose one device carries
    // every address of its interface, loops such a connection back in
    // that device; here the device on the same interface reaches it.
    if src == dst {
        let on = |a: IpAddr| rxe_verbs::interface_of(a).map(|i| i.name);
        if let Some(name) = on(dst) {
            let family = |d: &&CmaDev| canonical(d.addr()).is_ipv4() == dst.is_ipv4();
            if let Some(d) = cma_devices()
                .iter()
                .filter(family)
                .find(|d| on(d.addr()).as_ref() == Some(&name))
            {
                return Ok(d);
            }
        }
    }
    Err((
        -libc::ENODEV,
        format!("the host reaches {dst} from {src}, and no soft device is on {src}"),
    ))
}

/// For a multicast group the host's routes do not send from a soft
/// device: the first soft device of its family, which sends to the group
/// on its own interface.
fn any_device_for(group: IpAddr) -> Option<&'static CmaDev> {
    group.is_multicast().then_some(())?;
    cma_devices()
        .iter()
        .find(|d| canonical(d.addr()).is_ipv4() == group.is_ipv4())
}

/// `a` in the address family of `like` (an IPv4 device address for an
/// IPv6 id is IPv4-mapped).
fn in_family(a: IpAddr, like: &SocketAddr) -> IpAddr {
    match (a, like) {
        (IpAddr::V4(v4), SocketAddr::V6(_)) => IpAddr::V6(v4.to_ipv6_mapped()),
        _ => a,
    }
}

fn resolve_addr(cm: &CmId, src: Option<SocketAddr>, dst: SocketAddr) -> Result<(), Fail> {
    // The kernel routes an IPv6 destination as IPv6: a v4-mapped one has
    // no route.
    if is_v4_mapped(dst.ip()) {
        return Err(Fail::new(
            libc::ENETUNREACH,
            format!(
                "{} is v4-mapped: no IPv6 route reaches it (resolve {})",
                dst.ip(),
                canonical(dst.ip())
            ),
        ));
    }
    let mut st = cm.lock();
    let was_idle = st.phase == Phase::Idle;
    match st.phase {
        Phase::Idle => {
            if let Some(s) = src {
                if s.is_ipv4() != dst.is_ipv4() {
                    return Err(Fail::inval(
                        "src_addr",
                        "not of the destination's address family",
                    ));
                }
            }
            bind(cm, &mut st, src.unwrap_or_else(|| any_of(&dst)))?;
        }
        Phase::AddrBound => {}
        _ => return Err(Fail::inval("id", "its address is resolved already")),
    }
    let bound = st.src.expect("a bound id has a source address");
    if bound.is_ipv4() != dst.is_ipv4() {
        return Err(Fail::inval(
            "dst_addr",
            "not of the address family the id is bound to",
        ));
    }
    st.dst = Some(dst);
    let dst_ip = canonical(dst.ip());
    let found: Result<&'static CmaDev, (c_int, String)> = match st.dev {
        Some(d) => {
            let dev_ip = canonical(d.addr());
            // A multicast group is reached from any device (its QPs
            // send to the group on the device's own interface).
            if dev_ip == dst_ip
                || dst_ip.is_multicast()
                || to_self(d, dst_ip)
                || is_loopback(dev_ip) == (dst_ip.is_loopback() || dst_ip.is_unspecified())
            {
                Ok(d)
            } else {
                Err((
                    -libc::ENETUNREACH,
                    format!("{dst_ip} cannot be reached from {dev_ip} (one is on loopback, the other not)"),
                ))
            }
        }
        // Bound to a loopback address no soft device has: the kernel
        // finds no device for it (ADDR_ERROR, -ENODEV).
        None if canonical(bound.ip()).is_loopback() && !dst_ip.is_loopback() => Err((
            -libc::ENODEV,
            format!(
                "bound to {} (loopback), which no soft device has",
                bound.ip()
            ),
        )),
        None => route_to(dst_ip).or_else(|e| any_device_for(dst_ip).ok_or(e)),
    };
    let (event, status) = match found {
        Ok(d) => {
            if st.dev.is_none() {
                match cm.attach(&mut st, d) {
                    Ok(()) => {
                        // To the device itself the kernel's source is the
                        // loopback address (`cma_set_loopback`).
                        let ip = match (to_self(d, dst_ip), bound) {
                            (true, SocketAddr::V4(_)) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                            (true, SocketAddr::V6(_)) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                            (false, _) => in_family(d.addr(), &bound),
                        };
                        st.src = Some(SocketAddr::new(ip, bound.port()));
                        rebind(cm.addr(), canonical(ip));
                    }
                    Err(f) => {
                        note("rdma_resolve_addr", &f.why);
                        cm.write_route(&st);
                        cm.queue(&st, RDMA_CM_EVENT_ADDR_ERROR, -f.errno, Param::None);
                        drop(st);
                        return complete(cm);
                    }
                }
            }
            st.phase = Phase::AddrResolved;
            (RDMA_CM_EVENT_ADDR_RESOLVED, 0)
        }
        Err((status, why)) => {
            note(
                "rdma_resolve_addr",
                format!("RDMA_CM_EVENT_ADDR_ERROR: {why}"),
            );
            (RDMA_CM_EVENT_ADDR_ERROR, status)
        }
    };
    cm.write_route(&st);
    if event == RDMA_CM_EVENT_ADDR_ERROR && was_idle {
        // librdmacm learns the address the kernel bound only from a
        // resolved address: after an error the program sees none.
        // SAFETY: the id is ours and locked; a plain data field.
        unsafe {
            write_sockaddr(
                (&raw mut (*cm.c()).route.addr.__bindgen_anon_1.src_storage).cast(),
                None,
            );
        }
    }
    cm.queue(&st, event, status, Param::None);
    drop(st);
    complete(cm)
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src_addr: *mut sockaddr,
        dst_addr: *mut sockaddr,
        _timeout_ms: c_int,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's addresses.
            let dst = unsafe { read_sockaddr(dst_addr, "dst_addr") }?;
            let src = if src_addr.is_null() {
                None
            } else {
                // SAFETY: as above.
                Some(unsafe { read_sockaddr(src_addr, "src_addr") }?)
            };
            resolve_addr(cm, src, dst)
        })
    }
}

/// Sets up the id of a connection request, as librdmacm's
/// `ucma_query_req_info` finds it: the device, both addresses (in the
/// listener's family), the route with one path record.
pub fn set_passive(
    cm: &CmId,
    st: &mut IdState,
    d: &'static CmaDev,
    src: SocketAddr,
    dst: SocketAddr,
    like: Option<SocketAddr>,
) -> Result<(), Fail> {
    cm.attach(st, d)?;
    let fam = |a: SocketAddr| match like {
        Some(l) => SocketAddr::new(in_family(a.ip(), &l), a.port()),
        None => a,
    };
    st.src = Some(fam(src));
    st.dst = Some(fam(dst));
    st.phase = Phase::Connect;
    cm.write_route(st);
    if let Some(rec) = path(st) {
        let rec = Box::new(rec);
        let c = cm.c();
        // SAFETY: the id is ours and locked; the record lives in st.path.
        unsafe {
            (*c).route.path_rec = std::ptr::from_ref(&*rec).cast_mut();
            (*c).route.num_paths = 1;
        }
        st.path = Some(rec);
    }
    Ok(())
}

/// The flow label the kernel gives a RoCE v2 path
/// (`cma_get_roce_udp_flow_label`): the source's IPv6 flow label, else a
/// hash of the two ports.
fn flow_label(src: SocketAddr, dst: SocketAddr) -> u32 {
    if let SocketAddr::V6(s6) = src {
        let fl = s6.flowinfo() & 0xfffff;
        if fl != 0 {
            return fl;
        }
    }
    (u32::from(src.port()) * 31 + u32::from(dst.port())) & 0xfffff
}

/// The path record of a resolved route, as the kernel's
/// `cma_resolve_iboe_route` fills it for a RoCE v2 device.
fn path(st: &IdState) -> Option<ibv_sa_path_rec> {
    let (src, dst, d) = (st.src?, st.dst?, st.dev?);
    let tos = st.tos.unwrap_or(0);
    // a loopback end that is the device itself has the device's GID
    let end = |a: SocketAddr| if to_self(d, a.ip()) { d.addr() } else { a.ip() };
    Some(ibv_sa_path_rec {
        dgid: gid(end(dst)),
        sgid: gid(end(src)),
        dlid: 0,
        slid: 0,
        raw_traffic: 0,
        flow_label: flow_label(src, dst).to_be(),
        hop_limit: 64,
        traffic_class: tos,
        reversible: 1,
        numb_path: 1,
        pkey: 0xffff,
        sl: 0,
        mtu_selector: 2,
        mtu: d.dev.rx.active_mtu() as u8,
        rate_selector: 2,
        rate: 0,
        packet_life_time_selector: 2,
        packet_life_time: 16,
        preference: 0,
    })
}

/// Gives a resolved address its route and queues ROUTE_RESOLVED.
fn set_route(cm: &CmId, st: &mut IdState) -> Result<(), Fail> {
    if st.phase != Phase::AddrResolved {
        return Err(Fail::inval(
            "id",
            "its address is not resolved (rdma_resolve_addr first), or its route is resolved already",
        ));
    }
    let rec = Box::new(path(st).ok_or_else(|| Fail::inval("id", "no addresses"))?);
    let c = cm.c();
    // SAFETY: the id is ours and locked; the record lives in st.path.
    unsafe {
        (*c).route.path_rec = std::ptr::from_ref(&*rec).cast_mut();
        (*c).route.num_paths = 1;
    }
    st.path = Some(rec);
    st.phase = Phase::RouteResolved;
    cm.queue(st, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, Param::None);
    Ok(())
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            set_route(cm, &mut cm.lock())?;
            complete(cm)
        })
    }
}

/// The port of the id's address as the program sees it (librdmacm reads
/// `id->route.addr`), in network order; 0 when there is none.
fn port_of(id: *mut rdma_cm_id, src: bool) -> u16 {
    let Ok(cm) = handle::get::<CmId>(id, "id") else {
        return 0;
    };
    let _st = cm.lock();
    let c = cm.c();
    // SAFETY: a live id, locked; its own address fields.
    let a = unsafe {
        if src {
            read_sockaddr(
                (&raw mut (*c).route.addr.__bindgen_anon_1.src_storage).cast(),
                "src",
            )
        } else {
            read_sockaddr(
                (&raw mut (*c).route.addr.__bindgen_anon_2.dst_storage).cast(),
                "dst",
            )
        }
    };
    a.map_or(0, |a| a.port().to_be())
}

entry! {
    pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        port_of(id, true)
    }
}

entry! {
    pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        port_of(id, false)
    }
}

// ---------------------------------------------------------------------------
// Options, channels, QP attributes
// ---------------------------------------------------------------------------

fn read_opt<T: Copy>(optval: *mut c_void, optlen: usize, name: &str) -> Result<T, Fail> {
    if optlen != std::mem::size_of::<T>() {
        return Err(Fail::inval(
            "optlen",
            format!("{optlen} for {name} (want {})", std::mem::size_of::<T>()),
        ));
    }
    if optval.is_null() {
        return Err(Fail::new(libc::EFAULT, format!("optval: NULL for {name}")));
    }
    // SAFETY: the program's value of optlen == size_of::<T>() bytes.
    Ok(unsafe { optval.cast::<T>().read_unaligned() })
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_set_option(
        id: *mut rdma_cm_id,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: usize,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            let mut st = cm.lock();
            match (level as u32, optname as u32) {
                (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => {
                    st.tos = Some(read_opt::<u8>(optval, optlen, "RDMA_OPTION_ID_TOS")?);
                }
                (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                    let on = read_opt::<c_int>(optval, optlen, "RDMA_OPTION_ID_REUSEADDR")? != 0;
                    if !(st.phase == Phase::Idle || (on && st.phase == Phase::AddrBound)) {
                        return Err(Fail::inval("id", "REUSEADDR after the address is resolved"));
                    }
                    st.reuseaddr = on;
                    for u in ports().lock().iter_mut().filter(|u| u.id == cm.addr()) {
                        u.reuse = on;
                    }
                }
                (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
                    let on = read_opt::<c_int>(optval, optlen, "RDMA_OPTION_ID_AFONLY")? != 0;
                    if !matches!(st.phase, Phase::Idle | Phase::AddrBound) {
                        return Err(Fail::inval("id", "AFONLY after the address is resolved"));
                    }
                    st.afonly = on;
                }
                (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
                    let t = read_opt::<u8>(optval, optlen, "RDMA_OPTION_ID_ACK_TIMEOUT")?;
                    let (qp_type, _) = cm.kind();
                    if qp_type != IBV_QPT_RC
                        && qp_type != IBV_QPT_XRC_SEND
                        && qp_type != IBV_QPT_XRC_RECV
                    {
                        return Err(Fail::inval("id", "ACK_TIMEOUT is for RC ids"));
                    }
                    st.ack_timeout = Some(t);
                }
                (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
                    let one = std::mem::size_of::<ibv_path_data>();
                    if optlen == 0 || !optlen.is_multiple_of(one) {
                        return Err(Fail::inval(
                            "optlen",
                            format!("{optlen} is not a multiple of sizeof(struct ibv_path_data) {one}"),
                        ));
                    }
                    if optval.is_null() {
                        return Err(Fail::new(libc::EFAULT, "optval: NULL"));
                    }
                    // A RoCE path is the addresses' own: the record given is
                    // taken as a request to resolve the route.
                    set_route(cm, &mut st)?;
                }
                (RDMA_OPTION_ID, n) => {
                    return Err(Fail::new(
                        libc::ENOSYS,
                        format!("RDMA_OPTION_ID option {n} (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT are)"),
                    ))
                }
                (RDMA_OPTION_IB, n) => {
                    return Err(Fail::new(
                        libc::ENOSYS,
                        format!("RDMA_OPTION_IB option {n} (RDMA_OPTION_IB_PATH is)"),
                    ))
                }
                (l, _) => {
                    return Err(Fail::new(
                        libc::ENOSYS,
                        format!("option level {l} (RDMA_OPTION_ID, RDMA_OPTION_IB)"),
                    ))
                }
            }
            Ok(())
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_migrate_id(
        id: *mut rdma_cm_id,
        channel: *mut rdma_event_channel,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            let to_sync = channel.is_null();
            if to_sync && cm.lock().sync {
                return Err(Fail::inval(
                    "channel",
                    "NULL, and the id is synchronous already",
                ));
            }
            let new = if to_sync {
                Channel::create()?
            } else {
                channel_of(channel)?
            };
            let c = cm.c();
            {
                let mut st = cm.lock();
                let old = st.channel.clone();
                if !Arc::ptr_eq(&old, &new) {
                    for p in old.withdraw(cm.addr()) {
                        new.push(p);
                    }
                }
                if st.sync {
                    // SAFETY: the id is ours and locked.
                    let ev = unsafe { std::mem::replace(&mut (*c).event, std::ptr::null_mut()) };
                    if !ev.is_null() {
                        let _ = channel::ack_event(ev);
                    }
                    old.unregister();
                }
                st.sync = to_sync;
                st.channel = new.clone();
                // SAFETY: as above.
                unsafe { (*c).channel = new.ptr() };
            }
            cm.events.wait_all_acked();
            Ok(())
        })
    }
}

/// The QP attributes of an id's connection for `state` (INIT, RTR and RTS
/// once the REQ, or the REQ and REP, are known), or `None` while the id
/// has no connection: then `rdma_init_qp_attr` gives the attributes of an
/// id without one.
pub fn conn_qp_attr(
    cm: &CmId,
    st: &IdState,
    state: ibv_qp_state,
) -> Option<Result<(ibv_qp_attr, c_int), Fail>> {
    // A UD QP's attributes are the id's, resolved or not (the kernel's
    // cma_ib_init_qp_attr: P_Key index, port, Q_Key).
    if cm.kind().0 == IBV_QPT_UD {
        return None;
    }
    let rx = st.cm.rx.as_ref()?;
    let s = match state {
        IBV_QPS_INIT => rxe_core::types::QpState::Init,
        IBV_QPS_RTR => rxe_core::types::QpState::Rtr,
        IBV_QPS_RTS => rxe_core::types::QpState::Rts,
        _ => {
            return Some(Err(Fail::inval(
                "qp_attr->qp_state",
                format!("{state} (INIT, RTR or RTS for a connection)"),
            )))
        }
    };
    Some(rx.init_qp_attr(s).map_err(Fail::from).map(|(x, m)| {
        // SAFETY: ibv_qp_attr is plain data; all zeroes is valid.
        let mut o: ibv_qp_attr = unsafe { std::mem::zeroed() };
        o.qp_state = state;
        o.pkey_index = x.pkey_index;
        o.port_num = x.port;
        o.qp_access_flags = x.access.bits();
        if let Some(av) = &x.av {
            o.ah_attr = crate::wr::ah_attr_of(av);
        }
        o.path_mtu = x.path_mtu as ibv_mtu;
        o.dest_qp_num = x.dest_qpn;
        o.rq_psn = x.rq_psn.value();
        o.sq_psn = x.sq_psn.value();
        o.max_dest_rd_atomic = x.max_dest_rd_atomic;
        o.max_rd_atomic = x.max_rd_atomic;
        o.min_rnr_timer = x.min_rnr_timer;
        o.timeout = x.timeout;
        o.retry_cnt = x.retry_cnt;
        o.rnr_retry = x.rnr_retry;
        (o, m.bits() as c_int)
    }))
}

/// The attributes that move an id's QP to `state` (rdma_init_qp_attr),
/// as the kernel's `cma_ib_init_qp_attr` gives them for an id without a
/// connection: P_Key index 0, port 1, and the Q_Key of a UD id
/// (RDMA_UDP_QKEY in the UDP and IB port spaces) or no remote access for
/// a connected one.
pub fn qp_attr(cm: &CmId, state: ibv_qp_state) -> Result<(ibv_qp_attr, c_int), Fail> {
    let st = cm.lock();
    if st.dev.is_none() {
        return Err(Fail::inval(
            "id",
            "not bound to a device (rdma_bind_addr to a device's address, or rdma_resolve_addr)",
        ));
    }
    if let Some(r) = conn_qp_attr(cm, &st, state) {
        return r;
    }
    let (qp_type, ps) = cm.kind();
    // SAFETY: ibv_qp_attr is plain data; all zeroes is valid.
    let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = state;
    a.pkey_index = 0;
    a.port_num = 1;
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if qp_type == IBV_QPT_UD {
        a.qkey = if ps == RDMA_PS_UDP || ps == RDMA_PS_IB {
            RDMA_UDP_QKEY
        } else {
            0
        };
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags = 0;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    Ok((a, mask as c_int))
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_init_qp_attr(
        id: *mut rdma_cm_id,
        qp_attr: *mut ibv_qp_attr,
        qp_attr_mask: *mut c_int,
    ) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            if qp_attr.is_null() {
                return Err(Fail::inval("qp_attr", "NULL"));
            }
            if qp_attr_mask.is_null() {
                return Err(Fail::inval("qp_attr_mask", "NULL"));
            }
            // SAFETY: the program's attributes.
            let state = unsafe { (*qp_attr).qp_state };
            let (a, mask) = self::qp_attr(cm, state)?;
            // SAFETY: checked non-NULL; the program's outputs.
            unsafe {
                qp_attr.write(a);
                qp_attr_mask.write(mask);
            }
            Ok(())
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            // SAFETY: the program's ECE.
            let e = unsafe { ece.as_ref() }.ok_or_else(|| Fail::inval("ece", "NULL"))?;
            // SAFETY: the id is live.
            if unsafe { !(*cm.c()).qp.is_null() } {
                return Err(Fail::inval(
                    "id",
                    "has a QP (set ECE before rdma_create_qp)",
                ));
            }
            if e.vendor_id == 0 || e.comp_mask != 0 {
                return Err(Fail::inval("ece", "vendor_id 0 or comp_mask not 0"));
            }
            cm.lock().local_ece = (e.vendor_id, e.options);
            Ok(())
        })
    }
}

entry! {
    on_panic = -1;
    pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
        minus_one(VERB, || {
            let cm = handle::get::<CmId>(id, "id")?;
            if ece.is_null() {
                return Err(Fail::inval("ece", "NULL"));
            }
            // SAFETY: the id is live.
            if unsafe { !(*cm.c()).qp.is_null() } {
                return Err(Fail::inval("id", "has a QP"));
            }
            let (vendor_id, options) = cm.lock().remote_ece;
            // SAFETY: checked non-NULL; the program's output.
            unsafe {
                ece.write(ibv_ece {
                    vendor_id,
                    options,
                    comp_mask: 0,
                })
            };
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------

entry! {
    /// The soft devices' contexts, opened once for the process (a device that
    /// cannot be opened, its address taken by another program, is left out, as
    /// librdmacm leaves out a dead device).
    pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
        let set = |n: c_int| {
            if !num_devices.is_null() {
                // SAFETY: the program's place for the count.
                unsafe { num_devices.write(n) };
            }
        };
        if let Err(f) = init() {
            note(VERB, &f.why);
            set_errno(f.errno);
            set(0);
            return std::ptr::null_mut();
        }
        let ctxs: Vec<*mut ibv_context> = cma_devices()
            .iter()
            .filter_map(|d| match d.open() {
                Ok(o) => Some(o.ctx),
                Err(f) => {
                    note(VERB, &f.why);
                    None
                }
            })
            .collect();
        // SAFETY: n + 1 pointers, freed by rdma_free_devices.
        let list = unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<*mut ibv_context>()) }
            .cast::<*mut ibv_context>();
        if list.is_null() {
            set_errno(libc::ENOMEM);
            set(0);
            return list;
        }
        for (i, c) in ctxs.iter().enumerate() {
            // SAFETY: i < n of the n + 1 slots.
            unsafe { list.add(i).write(*c) };
        }
        set(ctxs.len() as c_int);
        list
    }
}

entry! {
    /// Frees the list; the contexts stay open for the process, as librdmacm's do.
    pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
        // SAFETY: the list of rdma_get_devices (calloc), or NULL.
        unsafe { libc::free(list.cast()) }
    }
}
