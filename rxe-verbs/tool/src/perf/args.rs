//! perftest's command line (`perftest_parameters.c`), the part that makes
//! sense for a soft RoCE device, and the values it resolves to.

use super::Res;
use clap::{Args as ClapArgs, ValueEnum};
use rxe_verbs::{Device, Mtu};
use std::path::PathBuf;
use std::time::Duration;

/// Which perftest program to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// `ib_write_bw`: RDMA WRITE bandwidth.
    #[value(name = "write_bw")]
    WriteBw,
    /// `ib_read_bw`: RDMA READ bandwidth.
    #[value(name = "read_bw")]
    ReadBw,
    /// `ib_send_bw`: SEND bandwidth (RC, UC or UD).
    #[value(name = "send_bw")]
    SendBw,
    /// `ib_atomic_bw`: atomics (8 bytes) per second.
    #[value(name = "atomic_bw")]
    AtomicBw,
    /// `ib_write_lat`: RDMA WRITE ping-pong, half round trip.
    #[value(name = "write_lat")]
    WriteLat,
    /// `ib_read_lat`: RDMA READ round trip.
    #[value(name = "read_lat")]
    ReadLat,
    /// `ib_send_lat`: SEND ping-pong, half round trip (RC, UC or UD).
    #[value(name = "send_lat")]
    SendLat,
    /// `ib_atomic_lat`: one atomic (8 bytes) at a time, round trip.
    #[value(name = "atomic_lat")]
    AtomicLat,
    /// The baseline alone: a UDP blast between the two addresses.
    #[value(name = "udp_bw")]
    UdpBw,
    /// The baseline alone: a UDP ping-pong between the two addresses.
    #[value(name = "udp_lat")]
    UdpLat,
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bw,
    Lat,
}

impl Test {
    pub fn kind(self) -> Kind {
        match self {
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw | Test::UdpBw => Kind::Bw,
            _ => Kind::Lat,
        }
    }

    /// The name perftest's header gives the verb (`testsStr`).
    pub fn verb(self) -> &'static str {
        match self {
            Test::WriteBw | Test::WriteLat => "RDMA_Write",
            Test::ReadBw | Test::ReadLat => "RDMA_Read",
            Test::SendBw | Test::SendLat => "Send",
            Test::AtomicBw | Test::AtomicLat => "Atomic",
            Test::UdpBw | Test::UdpLat => "UDP",
        }
    }

    /// `ib_atomic_bw` or `ib_atomic_lat`.
    pub fn is_atomic(self) -> bool {
        matches!(self, Test::AtomicBw | Test::AtomicLat)
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
            Test::SendBw => "send_bw",
            Test::AtomicBw => "atomic_bw",
            Test::WriteLat => "write_lat",
            Test::ReadLat => "read_lat",
            Test::SendLat => "send_lat",
            Test::AtomicLat => "atomic_lat",
            Test::UdpBw => "udp_bw",
            Test::UdpLat => "udp_lat",
        }
    }
}

/// Transport (`-c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Conn {
    #[value(name = "RC")]
    Rc,
    #[value(name = "UC")]
    Uc,
    #[value(name = "UD")]
    Ud,
}

impl Conn {
    pub fn name(self) -> &'static str {
        match self {
            Conn::Rc => "RC",
            Conn::Uc => "UC",
            Conn::Ud => "UD",
        }
    }
}

/// Atomic operation (`-A`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AtomicType {
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

impl AtomicType {
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::FetchAndAdd => "FETCH_AND_ADD",
            AtomicType::CmpAndSwap => "CMP_AND_SWAP",
        }
    }
}

/// Arguments of `rxe perf` (perftest's names and defaults).
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The test: write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat,
    /// send_lat, or the UDP baseline alone (udp_bw, udp_lat).
    #[arg(value_enum)]
    test: Test,
    /// Server to connect to (TCP, perftest's exchange); without it, serve.
    servername: Option<String>,
    /// Soft device: a local IP address to bind (UDP port 4791), or a name
    /// from RXE_DEVICES (default: its first device).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Port of the device (soft devices have port 1 only).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Listen on / connect to this TCP port (the UDP baseline uses the same
    /// number over UDP).
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Size of message to exchange (default 65536 for BW tests, 2 for
    /// latency tests, 8 for atomics).
    #[arg(short = 's', long)]
    size: Option<u64>,
    /// Run sizes from 2 till 2^23.
    #[arg(short = 'a', long)]
    all: bool,
    /// Number of exchanges (default 5000 for BW tests, 1000 for latency).
    #[arg(short = 'n', long = "iters")]
    iters: Option<u64>,
    /// Run the test for this many seconds instead of -n iterations.
    #[arg(short = 'D', long)]
    duration: Option<u64>,
    /// Number of QPs (BW tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qp: u32,
    /// MTU size: 256 - 4096 (default: the port's active MTU: 4096 on
    /// loopback, 1024 on a 1500-byte link).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Size of the send queue (default 128 for BW tests, 1 for latency).
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Receives kept posted (send tests; default 512).
    #[arg(short = 'r', long = "rx-depth")]
    rx_depth: Option<u32>,
    /// Source GID index.
    #[arg(short = 'x', long = "gid-index", default_value_t = 0)]
    gid_index: u8,
    /// Don't warn about the CPU frequency (accepted; times here come from
    /// the monotonic clock).
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Report Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// Atomic operation (atomic_bw).
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    atomic_type: AtomicType,
    /// Connection type: RC, UC (write/send) or UD (send only).
    #[arg(short = 'c', long = "connection", value_enum, default_value = "RC")]
    connection: Conn,
    /// Sleep on CQ events instead of polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// Generate a completion every N work requests (BW tests; default 100).
    #[arg(short = 'Q', long = "cq-mod")]
    cq_mod: Option<u32>,
    /// Outstanding READs/atomics (default 16).
    #[arg(short = 'o', long = "outs")]
    outs: Option<u8>,
    /// Write the results as JSON (to perftest_out.json unless --out_json_file).
    #[arg(long = "out_json")]
    out_json: bool,
    /// Where --out_json writes.
    #[arg(long = "out_json_file")]
    out_json_file: Option<PathBuf>,
    /// After the RoCE test, measure plain UDP between the same addresses
    /// with the same datagram sizes and print the ratio (both sides).
    #[arg(long)]
    baseline: bool,
    /// UDP baseline blast: datagrams in flight at most (default: 64 KiB
    /// worth; 0: unpaced).
    #[arg(long = "udp-window")]
    udp_window: Option<u64>,
    /// UDP baseline ping-pong: each side sends a 20-byte datagram (an RC
    /// ACK's size) together with each ping or echo, in one `sendmmsg`, as
    /// an RC SEND ping-pong sends its ACK with its answer: the kernel's
    /// cost of RoCE's datagram pattern, without the RoCE stack. Give it to
    /// both sides.
    #[arg(long = "udp-acks")]
    udp_acks: bool,
    /// Print the device's packet counters after the test (sent, received,
    /// retransmitted, timeouts, sequence errors, drops, posts held for a
    /// batch).
    #[arg(long)]
    counters: bool,
    /// Poll for completions (and, with --baseline, the UDP socket) for up
    /// to this many microseconds before sleeping, as perftest busy-polls
    /// its CQ (default: 50 for latency tests, 0 for bandwidth tests; an
    /// `RXE_SPIN_US` in the environment counts for bandwidth tests too).
    #[arg(long = "spin_us")]
    spin_us: Option<u64>,
    /// Give up after this many seconds without progress.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Fill the buffer with random bytes, write it to PATH.init once the
    /// QPs exist and to PATH after the test, and print a `RXE_PERF_BUFFER`
    /// line with its addresses: for checking the data against a capture
    /// (tests/interop/perf_check.py). perftest never checks data.
    #[arg(long = "dump-buffer", value_name = "PATH")]
    dump_buffer: Option<PathBuf>,
    /// Every QP sends from and lands in QP 0's part of the buffer, instead
    /// of a part of its own (perftest's layout): with many QPs, the test
    /// then measures the stack's cost per QP rather than the memory
    /// footprint (1024 QPs of 64 KiB messages touch 64 MiB on each side,
    /// more than the last-level cache holds). Not in perftest.
    #[arg(long = "one-buffer")]
    one_buffer: bool,
}

/// How long latency tests poll before they sleep, unless `--spin_us` says.
pub const DEFAULT_LAT_SPIN: Duration = Duration::from_micros(50);

/// Everything resolved.
#[derive(Debug, Clone)]
pub struct Config {
    pub test: Test,
    pub server: Option<String>,
    pub device: Device,
    pub dev_name: String,
    pub port: u16,
    pub size: u64,
    pub size_given: bool,
    pub all: bool,
    pub iters: u64,
    pub duration: Option<Duration>,
    pub qps: u32,
    pub mtu: Mtu,
    pub tx_depth: u32,
    pub rx_depth: u32,
    pub cq_mod: u32,
    pub gid_index: u8,
    pub report_gbits: bool,
    pub atomic_type: AtomicType,
    pub conn: Conn,
    pub events: bool,
    pub out_reads: u8,
    pub json_path: Option<PathBuf>,
    pub baseline: bool,
    pub counters: bool,
    pub udp_window: Option<u64>,
    pub udp_acks: bool,
    pub timeout: Duration,
    pub dump_buffer: Option<PathBuf>,
    /// `--one-buffer`: all QPs share QP 0's part of the buffer.
    pub one_buffer: bool,
    /// Completion and baseline socket polling before sleeping (`None`:
    /// leave the device's, from `RXE_SPIN_US`).
    pub spin: Option<Duration>,
}

impl Config {
    pub fn from_args(a: &Args) -> Res<Config> {
        let device = match &a.ib_dev {
            Some(name) => {
                Device::find(name).map_err(|e| format!("IB device {name} not found ({e})"))?
            }
            None => Device::list().into_iter().next().ok_or(
                " Did not detect devices: soft devices have no default; give -d <local IP \
                 address> (e.g. -d 127.0.0.2) or name one in RXE_DEVICES=name=address",
            )?,
        };
        if a.ib_port != 1 {
            return Err(format!("soft devices have port 1 only, not {}", a.ib_port));
        }
        let kind = a.test.kind();
        let lat = kind == Kind::Lat;
        let mtu = match a.mtu {
            // as perftest takes the port's active MTU (on a native device
            // Device reports 4096; the port's own is what query_port says)
            None => device.active_mtu(),
            Some(m) => Mtu::from_bytes(m as usize).ok_or(format!(" Invalid MTU - {m} "))?,
        };
        if a.port == 4791 {
            return Err("port 4791 is RoCE v2's own UDP port: choose another -p".into());
        }
        let atomic = a.test.is_atomic();
        if atomic && a.size.is_some_and(|s| s != 8) {
            return Err("Message size cannot be changed for Atomic tests ".into());
        }
        if atomic && a.all {
            return Err("-a is not available for Atomic tests".into());
        }
        let send = matches!(a.test, Test::SendBw | Test::SendLat);
        match a.connection {
            Conn::Ud if !send => {
                return Err(" UD connection is only possible in SEND verbs".into());
            }
            Conn::Uc
                if matches!(
                    a.test,
                    Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
                ) =>
            {
                return Err(" UC connection not possible in READ/ATOMIC verbs".into());
            }
            _ => {}
        }
        if lat && a.qp != 1 {
            return Err(" Multiple QPs only available on bw tests".into());
        }
        if a.qp == 0 || a.qp > 1024 {
            return Err(" Number of QPs should be between 1 and 1024".into());
        }
        let size = if atomic {
            8
        } else {
            a.size.unwrap_or(if lat { 2 } else { 65536 })
        };
        if size == 0 || size > 1 << 31 {
            return Err(" Message Size should be between 1 and 2147483648".into());
        }
        let iters = a.iters.unwrap_or(if lat { 1000 } else { 5000 });
        if iters < 5 {
            return Err(" Number of exchanges should be at least 5".into());
        }
        let tx_depth = a
            .tx_depth
            .unwrap_or(if lat { 1 } else { 128 })
            .clamp(1, 8192);
        let rx_depth = a.rx_depth.unwrap_or(512).clamp(1, 8192);
        let cq_mod = if lat {
            1
        } else {
            // perftest lowers the moderation to the iterations (`-n 20`
            // prints "CQ Moderation : 20").
            let m = a.cq_mod.unwrap_or(100).clamp(1, tx_depth);
            if a.duration.is_none() {
                m.min(u32::try_from(iters).unwrap_or(u32::MAX))
            } else {
                m
            }
        };
        let json_path = match (&a.out_json_file, a.out_json) {
            (Some(p), _) => Some(p.clone()),
            (None, true) => Some(PathBuf::from("perftest_out.json")),
            (None, false) => None,
        };
        let _ = a.cpu_freq;
        Ok(Config {
            test: a.test,
            server: a.servername.clone(),
            dev_name: device.name().to_string(),
            device,
            port: a.port,
            size,
            size_given: a.size.is_some(),
            all: a.all,
            iters,
            duration: a.duration.map(Duration::from_secs),
            qps: a.qp,
            mtu,
            tx_depth,
            rx_depth,
            cq_mod,
            gid_index: a.gid_index,
            report_gbits: a.report_gbits,
            atomic_type: a.atomic_type,
            conn: a.connection,
            events: a.events,
            out_reads: a.outs.unwrap_or(16).max(1),
            json_path,
            baseline: a.baseline,
            counters: a.counters,
            udp_window: a.udp_window,
            udp_acks: a.udp_acks,
            timeout: Duration::from_secs(a.timeout.max(1)),
            dump_buffer: a.dump_buffer.clone(),
            one_buffer: a.one_buffer,
            spin: match (a.spin_us, lat && !a.events) {
                (Some(us), _) => Some(Duration::from_micros(us)),
                (None, true) => Some(DEFAULT_LAT_SPIN),
                (None, false) => None,
            },
        })
    }

    /// Message sizes to run: `-a` is 2, 4, ... 2^23 (UD: up to the MTU).
    pub fn sizes(&self) -> Vec<u64> {
        if !self.all {
            return vec![self.size];
        }
        let max = if self.conn == Conn::Ud {
            self.mtu.bytes() as u64
        } else {
            1 << 23
        };
        (1..24).map(|i| 1u64 << i).filter(|&s| s <= max).collect()
    }

    /// The largest message of the run.
    pub fn max_size(&self) -> u64 {
        self.sizes().into_iter().max().unwrap_or(self.size)
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        self.server.is_some()
    }
}
