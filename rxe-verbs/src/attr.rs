//! The plain values of the verbs API: device, port and GID attributes,
//! asynchronous events, the provider choice, QP creation and connection
//! attributes. A
//! leaf module: it names no other module of the crate but `config` and
//! `error`, so that the backends and the handles can all use these types
//! without importing each other.

use crate::error::{invalid, Error};
use rxe_core::engine::AsyncEvent;
use rxe_core::types::{
    Access, AddressVector, DeviceCaps, Mtu, QpCap, QpType, SendOpcode, SendWr, Sge, UdDest,
};
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// A hook that takes asynchronous events ([`crate::Context::set_async_notify`]).
pub type AsyncNotify = Box<dyn Fn(AsyncEventKind) + Send + Sync>;

/// Asynchronous events, as `ibv_get_async_event` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventKind {
    /// The port is up (raised once when the device opens).
    PortActive,
    /// A QP went to the error state (`IBV_EVENT_QP_FATAL`).
    QpFatal(u32),
    /// The first packet arrived on a QP in RTR (`IBV_EVENT_COMM_EST`).
    CommEstablished(u32),
    /// A QP's send queue drained in SQD (`IBV_EVENT_SQ_DRAINED`).
    SqDrained(u32),
    /// A completion queue overran (`IBV_EVENT_CQ_ERR`); the number is the CQ's.
    CqError(u32),
    /// A shared receive queue fell below its limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached(u32),
}

impl From<AsyncEvent> for AsyncEventKind {
    fn from(e: AsyncEvent) -> Self {
        match e {
            AsyncEvent::QpFatal(q) => AsyncEventKind::QpFatal(q),
            AsyncEvent::CommEstablished(q) => AsyncEventKind::CommEstablished(q),
            AsyncEvent::SqDrained(q) => AsyncEventKind::SqDrained(q),
            AsyncEvent::CqError(c) => AsyncEventKind::CqError(c.0),
            AsyncEvent::SrqLimitReached(s) => AsyncEventKind::SrqLimitReached(s.0),
        }
    }
}

/// The GID of an address as the kernel's rxe lists it: IPv4 addresses
/// IPv4-mapped (`::ffff:a.b.c.d`), IPv6 addresses as they are.
pub fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// The IP address a GID stands for (the inverse of [`gid_of`]).
pub fn addr_of(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

/// What `ibv_query_device` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Vendor id (0xFFFFFF like the kernel's rxe).
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Ports.
    pub phys_port_cnt: u8,
    /// The limits.
    pub caps: DeviceCaps,
}

/// Port states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// Up.
    Active,
    /// No state change (`IBV_PORT_NOP`).
    Nop,
    /// Link down.
    Down,
    /// Initializing.
    Init,
    /// Armed.
    Armed,
    /// Active, deferring (`IBV_PORT_ACTIVE_DEFER`).
    ActiveDefer,
}

impl PortState {
    /// The libibverbs value (`IBV_PORT_ACTIVE` = 4, ...).
    pub fn ibv_value(self) -> u32 {
        match self {
            PortState::Nop => 0,
            PortState::Down => 1,
            PortState::Init => 2,
            PortState::Armed => 3,
            PortState::Active => 4,
            PortState::ActiveDefer => 5,
        }
    }

    /// The libibverbs name (`PORT_ACTIVE`, ...), as ibv_devinfo prints it.
    pub fn ibv_name(self) -> &'static str {
        match self {
            PortState::Nop => "PORT_NOP",
            PortState::Down => "PORT_DOWN",
            PortState::Init => "PORT_INIT",
            PortState::Armed => "PORT_ARMED",
            PortState::Active => "PORT_ACTIVE",
            PortState::ActiveDefer => "PORT_ACTIVE_DEFER",
        }
    }
}

/// What `ibv_query_port` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// State.
    pub state: PortState,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// The link layer: always Ethernet (RoCE).
    pub link_layer: &'static str,
    /// The GID table.
    pub gids: Vec<Ipv6Addr>,
}

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Provider {
    /// Always the soft RoCE v2 stack (UDP port 4791 through the kernel).
    Soft,
    /// Always native verbs through libibverbs; an error if none fits.
    Native,
    /// A native device when one fits, else the soft stack.
    #[default]
    Auto,
}

impl FromStr for Provider {
    type Err = Error;
    fn from_str(s: &str) -> Result<Provider, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "soft" | "rxe-rs" | "software" => Ok(Provider::Soft),
            "native" | "verbs" | "ibverbs" | "hw" => Ok(Provider::Native),
            "auto" | "" => Ok(Provider::Auto),
            other => Err(invalid(
                "RXE_PROVIDER",
                format!("{other:?}: expected soft, native or auto"),
            )),
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Provider::Soft => "soft",
            Provider::Native => "native",
            Provider::Auto => "auto",
        })
    }
}

impl Provider {
    /// The provider `RXE_PROVIDER` asks for (unset or empty: `Auto`).
    pub fn from_env() -> Result<Provider, Error> {
        Provider::parse_env(crate::config::provider().as_deref())
    }

    /// The provider a value of `RXE_PROVIDER` asks for (`None`: unset).
    pub fn parse_env(value: Option<&str>) -> Result<Provider, Error> {
        value.map_or(Ok(Provider::Auto), str::parse)
    }
}

/// The kind of backend a [`crate::Device`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The rxe-rs software engine.
    Soft,
    /// A device driven through libibverbs.
    Native,
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeviceKind::Soft => "soft",
            DeviceKind::Native => "native",
        })
    }
}

/// The type of a GID table entry (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, no IP/UDP): the soft stack cannot talk to it.
    RoceV1,
    /// RoCE v2 (IP/UDP port 4791).
    RoceV2,
    /// Not known (an old libibverbs without `_ibv_query_gid_ex` and no sysfs).
    Unknown,
}

/// One GID table entry of a native device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NativeGid {
    /// Port number (from 1).
    pub port: u8,
    /// Index in the port's GID table.
    pub index: u32,
    /// The GID.
    pub gid: Ipv6Addr,
    /// Its type.
    pub gid_type: GidType,
}

/// What [`crate::provider::choose`] needs to know of a native device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeDeviceInfo {
    /// The libibverbs device name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// Its GID table entries (non-zero ones), all ports.
    pub gids: Vec<NativeGid>,
}

impl NativeDeviceInfo {
    /// The entry a context opened for `addr` uses: its RoCE v2 GID (an
    /// entry of unknown type when no type is known).
    pub fn gid_for(&self, addr: IpAddr) -> Option<NativeGid> {
        let want = gid_of(addr);
        let m = |t: GidType| {
            self.gids
                .iter()
                .find(|g| g.gid == want && g.gid_type == t)
                .copied()
        };
        m(GidType::RoceV2).or_else(|| m(GidType::Unknown))
    }

    /// The entry a context opened by name uses: the first RoCE v2 GID with
    /// an IPv4-mapped address, else the first RoCE v2 GID that is not
    /// link-local, else the first RoCE v2 GID (unknown types count as v2).
    pub fn default_gid(&self) -> Option<NativeGid> {
        let v2 = |g: &&NativeGid| matches!(g.gid_type, GidType::RoceV2 | GidType::Unknown);
        let link_local = |g: &Ipv6Addr| (g.segments()[0] & 0xffc0) == 0xfe80;
        self.gids
            .iter()
            .filter(v2)
            .find(|g| g.gid.to_ipv4_mapped().is_some())
            .or_else(|| self.gids.iter().filter(v2).find(|g| !link_local(&g.gid)))
            .or_else(|| self.gids.iter().find(v2))
            .copied()
    }
}

/// Creation attributes of a QP (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy)]
pub struct QpInitAttr {
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: u32,
    /// CQ for receive completions.
    pub recv_cq: u32,
    /// Shared receive queue.
    pub srq: Option<u32>,
    /// Capacities.
    pub cap: QpCap,
    /// Every send WR completes (`sq_sig_all`).
    pub sq_sig_all: bool,
}

/// An address handle (`ibv_ah`) for UD sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressHandle {
    pub(crate) av: AddressVector,
}

impl AddressHandle {
    /// The address vector.
    pub fn av(&self) -> AddressVector {
        self.av
    }
    /// A UD SEND of `sges` to QP `remote_qpn` behind this handle.
    pub fn send(&self, wr_id: u64, sges: &[Sge], remote_qpn: u32, remote_qkey: u32) -> SendWr {
        let mut wr = SendWr::new(wr_id, SendOpcode::Send);
        wr.sg_list = sges.to_vec();
        wr.ud = Some(UdDest {
            av: self.av,
            remote_qpn,
            remote_qkey,
        });
        wr
    }
}

/// What a peer needs to connect to a QP: what `ibv_rc_pingpong` exchanges
/// (`LID:QPN:PSN:GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// The first PSN the QP sends with.
    pub psn: u32,
    /// The port GID.
    pub gid: Ipv6Addr,
}

/// Connection parameters for [`crate::QueuePair::connect`].
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Path MTU.
    pub mtu: Mtu,
    /// Local ACK timeout code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Retries on timeout or sequence error.
    pub retry_cnt: u8,
    /// Retries on RNR NAK (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code asked of senders.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic as requester and as responder.
    pub max_rd_atomic: u8,
    /// Remote access granted.
    pub access: Access,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Source GID index. 0 is the device's own GID on both backends: the
    /// soft device's only entry, or on a native device the RoCE v2 entry of
    /// the address it was opened for ([`crate::Context::gid_index`]); other values
    /// are literal indices of the port's GID table. (The same holds for
    /// `AddressVector::sgid_index`.)
    pub sgid_index: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            qkey: 0x1111_1111,
            sgid_index: 0,
        }
    }
}
