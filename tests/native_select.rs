//! Choosing between native verbs and the soft stack, on a host without RDMA
//! hardware.
//!
//! * the selection policy as a pure function ([`provider::choose`]) over
//!   made-up native devices: addresses, names, GID types, collisions;
//! * `RXE_PROVIDER` parsing;
//! * the no-libibverbs path (`RXE_LIBIBVERBS=/nonexistent/...`): everything
//!   works on the soft stack and exactly one line says why, in a child
//!   process (the library is loaded once per process);
//! * the installed libibverbs, if any: it loads and lists no device here,
//!   without an error reaching the application;
//! * the native data path end to end against a fake libibverbs compiled
//!   from `rxe-verbs/src/native/fake_ibverbs.c` with the real `verbs.h`
//!   (needs `cc` and libibverbs-dev; skipped without them).
//!
//! Address plan: 127.0.77.N (verbs_loopback uses 127.0.1.N; others 127.0.2.N).

use rxe_verbs::provider::{self, choose, Choice, Target};
use rxe_verbs::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
const FALLBACK_LINE: &str = "rxe-verbs: no native RDMA device";

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 77, n))
}

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn gid(port: u8, index: u32, addr: Ipv6Addr, gid_type: GidType) -> NativeGid {
    NativeGid {
        port,
        index,
        gid: addr,
        gid_type,
    }
}

/// What the kernel's rxe on an interface with 10.99.0.11 looks like: a
/// link-local GID and the IPv4-mapped one, each as RoCE v1 and v2.
fn kernel_rxe(name: &str, a: [u8; 4]) -> NativeDeviceInfo {
    let ll: Ipv6Addr = "fe80::5054:ff:fe99:11".parse().unwrap();
    let mapped = Ipv4Addr::from(a).to_ipv6_mapped();
    NativeDeviceInfo {
        name: name.into(),
        node_guid: 0x5054_00ff_fe99_0011,
        gids: vec![
            gid(1, 0, ll, GidType::RoceV1),
            gid(1, 1, ll, GidType::RoceV2),
            gid(1, 2, mapped, GidType::RoceV1),
            gid(1, 3, mapped, GidType::RoceV2),
        ],
    }
}

fn native_choice(c: &Choice) -> (usize, u32) {
    match c {
        Choice::Native { device, gid } => (*device, gid.index),
        other => panic!("expected a native choice, got {other:?}"),
    }
}

#[test]
fn provider_parsing() {
    assert_eq!(Provider::parse_env(None).unwrap(), Provider::Auto);
    assert_eq!(Provider::parse_env(Some("")).unwrap(), Provider::Auto);
    assert_eq!(Provider::parse_env(Some("auto")).unwrap(), Provider::Auto);
    assert_eq!(Provider::parse_env(Some("soft")).unwrap(), Provider::Soft);
    assert_eq!(Provider::parse_env(Some(" SOFT ")).unwrap(), Provider::Soft);
    assert_eq!(
        Provider::parse_env(Some("native")).unwrap(),
        Provider::Native
    );
    assert_eq!(
        Provider::parse_env(Some("Native")).unwrap(),
        Provider::Native
    );
    let e = Provider::parse_env(Some("gpu")).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                name: "RXE_PROVIDER",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("soft, native or auto"), "{e}");
    for p in [Provider::Soft, Provider::Native, Provider::Auto] {
        assert_eq!(p.to_string().parse::<Provider>().unwrap(), p);
    }
    assert_eq!(Provider::default(), Provider::Auto);
}

#[test]
fn policy_by_address() {
    let natives = [kernel_rxe("rxe0", [10, 99, 0, 11])];
    let guest = v4([10, 99, 0, 11]);
    let host = v4([10, 99, 0, 1]);
    // auto: the native device that has the address, on its RoCE v2 GID.
    let c = choose(Provider::Auto, Target::Addr(guest), &natives, &[]).unwrap();
    assert_eq!(native_choice(&c), (0, 3));
    // auto, an address no native device has: the soft stack on it.
    let c = choose(Provider::Auto, Target::Addr(host), &natives, &[]).unwrap();
    assert_eq!(
        c,
        Choice::Soft {
            name: None,
            addr: host
        }
    );
    // soft: always soft, even where a native device has the address.
    let c = choose(Provider::Soft, Target::Addr(guest), &natives, &[]).unwrap();
    assert_eq!(
        c,
        Choice::Soft {
            name: None,
            addr: guest
        }
    );
    // native: the device, or an error naming what there is.
    let c = choose(Provider::Native, Target::Addr(guest), &natives, &[]).unwrap();
    assert_eq!(native_choice(&c), (0, 3));
    let e = choose(Provider::Native, Target::Addr(host), &natives, &[]).unwrap_err();
    assert!(e.to_string().contains("rxe0"), "{e}");
    assert!(e.to_string().contains("10.99.0.1"), "{e}");
}

#[test]
fn policy_without_native_devices_is_soft() {
    // What auto does where libibverbs is missing or lists nothing.
    let c = choose(Provider::Auto, Target::Addr(ip(1)), &[], &[]).unwrap();
    assert_eq!(
        c,
        Choice::Soft {
            name: None,
            addr: ip(1)
        }
    );
    let softs = vec![("rxe0".to_string(), ip(2))];
    let c = choose(Provider::Auto, Target::Name("rxe0"), &[], &softs).unwrap();
    assert_eq!(
        c,
        Choice::Soft {
            name: Some("rxe0".into()),
            addr: ip(2)
        }
    );
    let c = choose(Provider::Auto, Target::Any, &[], &softs).unwrap();
    assert!(matches!(c, Choice::Soft { .. }));
    assert!(choose(Provider::Native, Target::Addr(ip(1)), &[], &softs).is_err());
    assert!(choose(Provider::Native, Target::Any, &[], &softs).is_err());
    assert!(choose(Provider::Auto, Target::Name("nope"), &[], &softs).is_err());
    assert!(choose(Provider::Auto, Target::Any, &[], &[]).is_err());
}

#[test]
fn policy_by_name() {
    let natives = [
        kernel_rxe("rxe0", [10, 99, 0, 11]),
        kernel_rxe("mlx5_0", [192, 0, 2, 7]),
    ];
    let softs = vec![("rxe0".to_string(), ip(3)), ("soft1".to_string(), ip(4))];
    // A native name: its IPv4-mapped RoCE v2 GID.
    let c = choose(Provider::Auto, Target::Name("mlx5_0"), &natives, &softs).unwrap();
    assert_eq!(native_choice(&c), (1, 3));
    // A name both kinds have: auto and native take the native device,
    // soft the soft one.
    let c = choose(Provider::Auto, Target::Name("rxe0"), &natives, &softs).unwrap();
    assert_eq!(native_choice(&c), (0, 3));
    let c = choose(Provider::Soft, Target::Name("rxe0"), &natives, &softs).unwrap();
    assert_eq!(
        c,
        Choice::Soft {
            name: Some("rxe0".into()),
            addr: ip(3)
        }
    );
    // A soft-only name under auto; refused under native.
    let c = choose(Provider::Auto, Target::Name("soft1"), &natives, &softs).unwrap();
    assert!(matches!(c, Choice::Soft { .. }));
    assert!(choose(Provider::Native, Target::Name("soft1"), &natives, &softs).is_err());
    // Any: the first native device under auto, the first soft under soft.
    let c = choose(Provider::Auto, Target::Any, &natives, &softs).unwrap();
    assert_eq!(native_choice(&c), (0, 3));
    let c = choose(Provider::Soft, Target::Any, &natives, &softs).unwrap();
    assert!(matches!(c, Choice::Soft { addr, .. } if addr == ip(3)));
    // The second device's address selects the second device.
    let c = choose(
        Provider::Auto,
        Target::Addr(v4([192, 0, 2, 7])),
        &natives,
        &[],
    )
    .unwrap();
    assert_eq!(native_choice(&c), (1, 3));
}

#[test]
fn policy_gid_types() {
    let a = Ipv4Addr::new(10, 99, 0, 11);
    let mapped = a.to_ipv6_mapped();
    // RoCE v1 only: the soft stack cannot talk to it, so it does not count.
    let v1 = NativeDeviceInfo {
        name: "v1only".into(),
        node_guid: 1,
        gids: vec![gid(1, 0, mapped, GidType::RoceV1)],
    };
    let c = choose(
        Provider::Auto,
        Target::Addr(IpAddr::V4(a)),
        std::slice::from_ref(&v1),
        &[],
    )
    .unwrap();
    assert!(matches!(c, Choice::Soft { .. }));
    assert!(choose(Provider::Native, Target::Addr(IpAddr::V4(a)), &[v1], &[]).is_err());
    // An InfiniBand device has no RoCE GID at all.
    let ib = NativeDeviceInfo {
        name: "ib0".into(),
        node_guid: 2,
        gids: vec![gid(1, 0, "fe80::2".parse().unwrap(), GidType::Ib)],
    };
    assert!(choose(Provider::Native, Target::Name("ib0"), &[ib], &[]).is_err());
    // Unknown types (an old libibverbs, no sysfs) count as v2, after v2.
    let unknown = NativeDeviceInfo {
        name: "old".into(),
        node_guid: 3,
        gids: vec![
            gid(1, 0, mapped, GidType::Unknown),
            gid(1, 5, mapped, GidType::RoceV2),
        ],
    };
    let c = choose(
        Provider::Auto,
        Target::Addr(IpAddr::V4(a)),
        std::slice::from_ref(&unknown),
        &[],
    )
    .unwrap();
    assert_eq!(native_choice(&c), (0, 5));
    let only_unknown = NativeDeviceInfo {
        gids: vec![gid(2, 7, mapped, GidType::Unknown)],
        ..unknown
    };
    let c = choose(
        Provider::Auto,
        Target::Addr(IpAddr::V4(a)),
        &[only_unknown],
        &[],
    )
    .unwrap();
    match c {
        Choice::Native { gid, .. } => assert_eq!((gid.port, gid.index), (2, 7)),
        other => panic!("{other:?}"),
    }
    // IPv6: the GID is the address itself.
    let v6: Ipv6Addr = "fd00::11".parse().unwrap();
    let d6 = NativeDeviceInfo {
        name: "rxe6".into(),
        node_guid: 4,
        gids: vec![
            gid(1, 0, "fe80::11".parse().unwrap(), GidType::RoceV2),
            gid(1, 1, v6, GidType::RoceV2),
        ],
    };
    let c = choose(
        Provider::Auto,
        Target::Addr(IpAddr::V6(v6)),
        std::slice::from_ref(&d6),
        &[],
    )
    .unwrap();
    assert_eq!(native_choice(&c), (0, 1));
    // By name, with no IPv4 GID: the first routable RoCE v2 GID.
    let c = choose(Provider::Auto, Target::Name("rxe6"), &[d6], &[]).unwrap();
    assert_eq!(native_choice(&c), (0, 1));
}

// ------------------------------------------------------- soft, in process --

/// Two soft contexts exchange a SEND and a WRITE (the soft stack works
/// whatever native verbs do).
fn soft_exchange(a: &Context, b: &Context) {
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (
        a.create_cq(16, None).unwrap(),
        b.create_cq(16, None).unwrap(),
    );
    let (ma, mb) = (
        pa.alloc_mr(4096, all).unwrap(),
        pb.alloc_mr(4096, all).unwrap(),
    );
    let qa = a
        .create_qp(&pa, &QpInitAttr::new(QpType::Rc, &ca, &ca))
        .unwrap();
    let qb = b
        .create_qp(&pb, &QpInitAttr::new(QpType::Rc, &cb, &cb))
        .unwrap();
    qa.connect(&qb.endpoint(), &ConnectOptions::default())
        .unwrap();
    qb.connect(&qa.endpoint(), &ConnectOptions::default())
        .unwrap();
    qb.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: vec![mb.sge(0..64)],
    }])
    .unwrap();
    ma.write(0, b"over the soft stack").unwrap();
    qa.post_send(&[SendWr::send(1, &[ma.sge(0..19)])]).unwrap();
    assert_eq!(cb.wait(1, T).unwrap()[0].byte_len, 19);
    assert_eq!(ca.wait(1, T).unwrap()[0].status, WcStatus::Success);
    qa.post_send(&[SendWr::write(
        2,
        &[ma.sge(0..4)],
        mb.remote().slice(100..104),
    )])
    .unwrap();
    assert_eq!(ca.wait(1, T).unwrap()[0].status, WcStatus::Success);
    let mut got = [0u8; 19];
    mb.read(0, &mut got).unwrap();
    assert_eq!(&got, b"over the soft stack");
    let mut w = [0u8; 4];
    mb.read(100, &mut w).unwrap();
    assert_eq!(&w, b"over");
}

#[test]
fn explicit_soft_devices_work() {
    let d = Device::soft(ip(1));
    assert_eq!(d.kind(), DeviceKind::Soft);
    assert_eq!(d.gid_index(), 0);
    assert_eq!(d.port(), 1);
    assert!(d.native_gids().is_empty());
    let a = d.open().unwrap();
    let b = Device::soft(ip(2))
        .with_provider(Provider::Soft)
        .open()
        .unwrap();
    assert_eq!(a.kind(), DeviceKind::Soft);
    assert_eq!(b.kind(), DeviceKind::Soft);
    assert_eq!(a.gid_index(), 0);
    assert_eq!(a.gid(), Ipv4Addr::new(127, 0, 77, 1).to_ipv6_mapped());
    soft_exchange(&a, &b);
}

/// The installed libibverbs (if any) loads and, on this host without RDMA
/// devices, lists none: `auto` then gives soft devices, with no error.
#[test]
fn installed_libibverbs_lists_no_devices_here() {
    match provider::native_library() {
        Err(e) => eprintln!("no libibverbs installed ({e}): only the fallback applies"),
        Ok(path) => {
            eprintln!("loaded {path}");
            match provider::native_devices() {
                Ok(d) if !d.is_empty() => {
                    eprintln!("this machine has RDMA devices: {d:?}");
                    return;
                }
                Ok(_) => eprintln!("libibverbs lists no device"),
                Err(e) => eprintln!("libibverbs has no device to list: {e}"),
            }
        }
    }
    let d = Device::find_with(&ip(5).to_string(), Provider::Auto).unwrap();
    assert_eq!(d.kind(), DeviceKind::Soft);
    let e = Device::find_with(&ip(5).to_string(), Provider::Native).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { .. } | Error::InvalidArgument { .. }),
        "{e}"
    );
}

// ------------------------------------------------------- child processes --

/// Runs test `name` of this binary in a child process with `env` (and
/// without the caller's RXE_* settings); returns (success, stdout, stderr).
fn run_child(name: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for k in ["RXE_PROVIDER", "RXE_LIBIBVERBS", "RXE_DEVICES", "RXE_PCAP"] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied());
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stdout.contains("1 passed") || !out.status.success(),
        "the child ran no test:\n{stdout}\n{stderr}"
    );
    (out.status.success(), stdout, stderr)
}

fn fallback_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains(FALLBACK_LINE))
        .collect()
}

#[test]
fn no_libibverbs_falls_back_to_soft_with_one_line() {
    let (ok, out, err) = run_child(
        "child_no_libibverbs",
        &[
            ("RXE_LIBIBVERBS", "/nonexistent/libibverbs.so.1"),
            ("RXE_DEVICES", "soft0=127.0.77.7"),
        ],
    );
    assert!(ok, "child failed:\n{out}\n{err}");
    let lines = fallback_lines(&err);
    assert_eq!(lines.len(), 1, "expected one fallback line, got:\n{err}");
    assert!(
        lines[0].contains("/nonexistent/libibverbs.so.1"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("soft"), "{}", lines[0]);
}

#[test]
#[ignore = "run in a child process by no_libibverbs_falls_back_to_soft_with_one_line"]
fn child_no_libibverbs() {
    // Every way of asking under auto ends on the soft stack.
    let a = Device::find(&ip(11).to_string()).unwrap();
    assert_eq!(a.kind(), DeviceKind::Soft);
    let b = Device::find_with(&ip(12).to_string(), Provider::Auto).unwrap();
    assert_eq!(b.kind(), DeviceKind::Soft);
    let listed = Device::list();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name(), "soft0");
    assert_eq!(listed[0].kind(), DeviceKind::Soft);
    assert_eq!(Device::find("soft0").unwrap().addr(), ip(7));
    let (a, b) = (
        a.open().unwrap(),
        b.with_provider(Provider::Auto).open().unwrap(),
    );
    soft_exchange(&a, &b);
    // Asking for native explicitly is an error that says why.
    let e = Device::find_with(&ip(13).to_string(), Provider::Native).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("/nonexistent/libibverbs.so.1"),
        "{e}"
    );
    let e = Device::soft(ip(13))
        .with_provider(Provider::Native)
        .open()
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(provider::native_library().is_err());
}

#[test]
fn provider_soft_never_loads_libibverbs() {
    let (ok, out, err) = run_child(
        "child_provider_soft",
        &[
            ("RXE_PROVIDER", "soft"),
            ("RXE_LIBIBVERBS", "/nonexistent/libibverbs.so.1"),
        ],
    );
    assert!(ok, "child failed:\n{out}\n{err}");
    assert!(fallback_lines(&err).is_empty(), "{err}");
}

#[test]
#[ignore = "run in a child process by provider_soft_never_loads_libibverbs"]
fn child_provider_soft() {
    let d = Device::find(&ip(21).to_string()).unwrap();
    assert_eq!(d.kind(), DeviceKind::Soft);
    assert!(Device::list().is_empty());
    let a = d.open().unwrap();
    let b = Device::find(&ip(22).to_string()).unwrap().open().unwrap();
    soft_exchange(&a, &b);
}

#[test]
fn provider_native_without_libibverbs_is_an_error() {
    let (ok, out, err) = run_child(
        "child_provider_native",
        &[
            ("RXE_PROVIDER", "native"),
            ("RXE_LIBIBVERBS", "/nonexistent/libibverbs.so.1"),
        ],
    );
    assert!(ok, "child failed:\n{out}\n{err}");
}

#[test]
#[ignore = "run in a child process by provider_native_without_libibverbs_is_an_error"]
fn child_provider_native() {
    let e = Device::find(&ip(31).to_string()).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // An invalid RXE_PROVIDER is refused by find, ignored by list.
    std::env::set_var("RXE_PROVIDER", "sideways");
    let e = Device::find(&ip(31).to_string()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                name: "RXE_PROVIDER",
                ..
            }
        ),
        "{e}"
    );
    let _ = Device::list();
    // An explicit soft device is still soft.
    let d = Device::soft(ip(31));
    assert_eq!(d.open().unwrap().kind(), DeviceKind::Soft);
}

#[test]
fn fake_libibverbs_with_no_devices_falls_back_with_one_line() {
    let so = match build_fake() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let (ok, out, err) = run_child(
        "child_no_devices",
        &[
            ("RXE_LIBIBVERBS", so.to_str().unwrap()),
            ("FAKE_IBVERBS_NO_DEVICES", "1"),
        ],
    );
    let _ = std::fs::remove_dir_all(so.parent().unwrap());
    assert!(ok, "child failed:\n{out}\n{err}");
    let lines = fallback_lines(&err);
    assert_eq!(lines.len(), 1, "expected one fallback line, got:\n{err}");
    assert!(lines[0].contains("lists no RDMA device"), "{}", lines[0]);
}

#[test]
#[ignore = "run in a child process by fake_libibverbs_with_no_devices_falls_back_with_one_line"]
fn child_no_devices() {
    assert!(provider::native_library().is_ok());
    assert_eq!(provider::native_devices().unwrap(), vec![]);
    assert!(Device::list().is_empty());
    let a = Device::find(&ip(41).to_string()).unwrap();
    let b = Device::find(&ip(42).to_string()).unwrap();
    assert_eq!((a.kind(), b.kind()), (DeviceKind::Soft, DeviceKind::Soft));
    soft_exchange(&a.open().unwrap(), &b.open().unwrap());
    let e = Device::find_with(&ip(43).to_string(), Provider::Native).unwrap_err();
    assert!(e.to_string().contains("none"), "{e}");
}

// ------------------------------------------ the native path, end to end --

/// Builds the fake libibverbs (`rxe-verbs/src/native/fake_ibverbs.c`)
/// against the installed `verbs.h`, or says why it cannot.
fn build_fake() -> Result<PathBuf, String> {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        return Err("no /usr/include/infiniband/verbs.h (apt-get install libibverbs-dev)".into());
    }
    let src =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rxe-verbs/src/native/fake_ibverbs.c");
    let dir = std::env::temp_dir().join(format!("rxe-native-select-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let so = dir.join("libfakeverbs.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-lpthread")
        .output()
        .map_err(|e| format!("no C compiler ({cc}: {e})"))?;
    if !out.status.success() {
        panic!(
            "compiling the fake libibverbs failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(so)
}

#[test]
fn native_backend_against_a_fake_libibverbs() {
    let so = match build_fake() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let (ok, out, err) = run_child(
        "child_native_fake",
        &[("RXE_LIBIBVERBS", so.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(so.parent().unwrap());
    assert!(ok, "child failed:\n{out}\n{err}");
    assert!(fallback_lines(&err).is_empty(), "{err}");
}

#[test]
#[ignore = "run in a child process by native_backend_against_a_fake_libibverbs"]
fn child_native_fake() {
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let fake_addr = ip(99);

    // Listing: the native device first, its GID table as the fake has it.
    let listed = Device::list();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let d = &listed[0];
    assert_eq!((d.name(), d.kind()), ("fake0", DeviceKind::Native));
    assert_eq!(d.gid_index(), 3);
    assert_eq!(d.addr(), fake_addr);
    assert_eq!(d.node_guid(), 0x0002_c9ff_fe00_0001);
    let gids = d.gids();
    assert_eq!(gids.len(), 4);
    assert_eq!(gids[3], Ipv4Addr::new(127, 0, 77, 99).to_ipv6_mapped());
    let types: Vec<GidType> = d.native_gids().iter().map(|g| g.gid_type).collect();
    assert_eq!(
        types,
        [
            GidType::RoceV1,
            GidType::RoceV2,
            GidType::RoceV1,
            GidType::RoceV2
        ]
    );

    // auto: the fake device has 127.0.77.99, so that address goes native;
    // another address stays soft.
    let d = Device::find(&fake_addr.to_string()).unwrap();
    assert_eq!(d.kind(), DeviceKind::Native);
    assert_eq!(
        Device::find(&ip(98).to_string()).unwrap().kind(),
        DeviceKind::Soft
    );
    assert_eq!(
        Device::find_with(&fake_addr.to_string(), Provider::Soft)
            .unwrap()
            .kind(),
        DeviceKind::Soft
    );
    assert_eq!(
        Device::soft(fake_addr)
            .with_provider(Provider::Native)
            .open()
            .unwrap()
            .kind(),
        DeviceKind::Native
    );
    let a = d.open().unwrap();
    let b = Device::find("fake0").unwrap().open().unwrap();
    assert_eq!(a.kind(), DeviceKind::Native);
    assert_eq!((a.gid_index(), a.gid()), (3, gids[3]));
    assert_eq!(
        a.get_async_event(Duration::ZERO),
        Some(AsyncEventKind::PortActive)
    );
    assert_eq!(
        b.get_async_event(Duration::ZERO),
        Some(AsyncEventKind::PortActive)
    );
    assert_eq!(a.get_async_event(Duration::from_millis(10)), None);
    let attr = a.query_device();
    assert_eq!(attr.fw_ver, "fake-1.0");
    assert_eq!(attr.node_guid, 0x0002_c9ff_fe00_0001);
    assert_eq!(
        (attr.vendor_id, attr.hw_ver, attr.phys_port_cnt),
        (0x1234, 7, 1)
    );
    assert_eq!(attr.caps.max_sge, 16);
    let port = a.query_port();
    assert_eq!(port.state, PortState::Active);
    // 2048 comes only from the provider's extended query_port: the inline
    // ___ibv_query_port path was taken, not the compat symbol (1024).
    assert_eq!(port.active_mtu, Mtu::Mtu2048);
    assert_eq!(port.link_layer, "Ethernet");
    assert_eq!(port.gids, gids);
    assert_eq!(a.recv_mode(), rxe_net::udp::RecvMode::Raw);
    let e = Device::find("fake0")
        .unwrap()
        .with_capture("/tmp/never.pcap")
        .open()
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");

    // Objects.
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let ch = b.create_comp_channel();
    let ca = a.create_cq(64, None).unwrap();
    let cb = b.create_cq(64, Some(&ch)).unwrap();
    assert!(ca.capacity() >= 64);
    assert!(matches!(
        a.create_cq(8, Some(&ch)),
        Err(Error::WrongDevice("channel"))
    ));
    let ma = pa.alloc_mr(8192, all).unwrap();
    let mb = pb.register(vec![0xee; 8192], all).unwrap();
    assert_ne!(ma.lkey(), mb.lkey());
    assert!(matches!(
        pa.alloc_mw(MwType::Type2),
        Err(Error::Unsupported { .. })
    ));
    let qa = a
        .create_qp(&pa, &QpInitAttr::new(QpType::Rc, &ca, &ca))
        .unwrap();
    let qb = b
        .create_qp(&pb, &QpInitAttr::new(QpType::Rc, &cb, &cb))
        .unwrap();
    assert!(matches!(
        a.create_qp(&pb, &QpInitAttr::new(QpType::Rc, &ca, &ca)),
        Err(Error::WrongDevice("pd"))
    ));
    assert_eq!(qa.state().unwrap(), QpState::Reset);
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    assert_eq!(ea.gid, gids[3]);
    // The defaults (source GID index 0) reach the fake as index 3: it
    // refuses any other.
    qa.connect(&eb, &ConnectOptions::default()).unwrap();
    qb.connect(&ea, &ConnectOptions::default()).unwrap();
    let (q, cap) = qa.query().unwrap();
    assert_eq!(q.state, QpState::Rts);
    assert_eq!(q.dest_qpn, qb.qp_num());
    assert_eq!(q.sq_psn.value(), ea.psn);
    assert_eq!(q.rq_psn.value(), eb.psn);
    assert_eq!(q.av.unwrap().dest, fake_addr);
    assert_eq!(q.av.unwrap().sgid_index, 3);
    assert_eq!(q.path_mtu, Mtu::Mtu1024);
    assert_eq!(cap.max_send_sge, 16);
    let bad_av = QpAttr {
        av: Some(AddressVector {
            sgid_index: 2,
            ..AddressVector::to(fake_addr)
        }),
        ..QpAttr::default()
    };
    let e = qa.modify(&bad_av, QpAttrMask::AV).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");

    // SEND with immediate, into two receive SGEs.
    qb.post_recv(&[RecvWr {
        wr_id: 100,
        sg_list: vec![mb.sge(0..8), mb.sge(8..64)],
    }])
    .unwrap();
    ma.write(0, b"native verbs, byte for byte").unwrap();
    let mut wr = SendWr::send(1, &[ma.sge(0..27)]);
    wr.opcode = SendOpcode::SendWithImm;
    wr.imm_data = 0x1234_5678;
    cb.req_notify(false).unwrap();
    qa.post_send(&[wr]).unwrap();
    assert_eq!(ch.get_event(T), Some(cb.id()));
    let r = cb.wait(1, T).unwrap()[0];
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.imm_data, r.qp_num, r.src_qp),
        (
            100,
            WcStatus::Success,
            WcOpcode::Recv,
            27,
            Some(0x1234_5678),
            qb.qp_num(),
            qa.qp_num()
        )
    );
    let s = ca.wait(1, T).unwrap()[0];
    assert_eq!(
        (s.wr_id, s.status, s.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    let mut got = [0u8; 28];
    mb.read(0, &mut got).unwrap();
    assert_eq!(&got[..27], b"native verbs, byte for byte");
    assert_eq!(got[27], 0xee);

    // WRITE, WRITE with immediate, READ.
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    ma.write(4096, &pattern).unwrap();
    qa.post_send(&[SendWr::write(
        2,
        &[ma.sge(4096..8192)],
        mb.remote().slice(4096..8192),
    )])
    .unwrap();
    assert_eq!(ca.wait(1, T).unwrap()[0].opcode, WcOpcode::RdmaWrite);
    assert_eq!(mb.to_vec()[4096..], pattern[..]);
    qb.post_recv(&[RecvWr {
        wr_id: 101,
        sg_list: vec![],
    }])
    .unwrap();
    let mut w = SendWr::write(3, &[ma.sge(0..6)], mb.remote().slice(200..206));
    w.opcode = SendOpcode::RdmaWriteWithImm;
    w.imm_data = 77;
    qa.post_send(&[w]).unwrap();
    let r = cb.wait(1, T).unwrap()[0];
    assert_eq!(
        (r.opcode, r.imm_data, r.byte_len),
        (WcOpcode::RecvRdmaWithImm, Some(77), 6)
    );
    ca.wait(1, T).unwrap();
    mb.with_bytes_mut(|b| b[1000..1010].copy_from_slice(b"from b...."));
    qa.post_send(&[SendWr::read(
        4,
        &[ma.sge(500..510)],
        mb.remote().slice(1000..1010),
    )])
    .unwrap();
    let s = ca.wait(1, T).unwrap()[0];
    assert_eq!((s.opcode, s.byte_len), (WcOpcode::RdmaRead, 10));
    assert_eq!(ma.with_bytes(|b| b[500..510].to_vec()), b"from b....");

    // Atomics.
    mb.write(2048, &5u64.to_ne_bytes()).unwrap();
    let target = mb.remote().slice(2048..2056);
    let mut cas = SendWr::new(5, SendOpcode::AtomicCmpSwap);
    cas.sg_list = vec![ma.sge(16..24)];
    cas.remote_addr = target.addr;
    cas.rkey = target.rkey;
    cas.compare_add = 5;
    cas.swap = 40;
    let mut faa = SendWr::new(6, SendOpcode::AtomicFetchAdd);
    faa.sg_list = vec![ma.sge(24..32)];
    faa.remote_addr = target.addr;
    faa.rkey = target.rkey;
    faa.compare_add = 2;
    qa.post_send(&[cas, faa]).unwrap();
    let c = ca.wait(2, T).unwrap();
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.opcode)).collect::<Vec<_>>(),
        [(5, WcOpcode::CompSwap), (6, WcOpcode::FetchAdd)]
    );
    let mut old = [0u8; 16];
    ma.read(16, &mut old).unwrap();
    assert_eq!(u64::from_ne_bytes(old[..8].try_into().unwrap()), 5);
    assert_eq!(u64::from_ne_bytes(old[8..].try_into().unwrap()), 40);
    let mut now = [0u8; 8];
    mb.read(2048, &mut now).unwrap();
    assert_eq!(u64::from_ne_bytes(now), 42);

    // A list with a refused request in the middle: the first is posted.
    let too_many: Vec<Sge> = (0..17).map(|i| ma.sge(i..i + 1)).collect();
    let list = [
        SendWr::write(7, &[ma.sge(0..1)], mb.remote().slice(0..1)),
        SendWr::write(8, &too_many, mb.remote().slice(0..17)),
    ];
    match qa.post_send(&list) {
        Err(Error::BadWorkRequest { index, wr_id, .. }) => assert_eq!((index, wr_id), (1, 8)),
        other => panic!("expected BadWorkRequest, got {other:?}"),
    }
    assert_eq!(ca.wait(1, T).unwrap()[0].wr_id, 7);
    // Memory windows are refused before anything is posted.
    let mut bind = SendWr::new(9, SendOpcode::BindMw);
    bind.bind = None;
    assert!(matches!(
        qa.post_send(&[bind]),
        Err(Error::Unsupported { .. })
    ));

    // An error completion: a bad rkey.
    let bad = RemoteRegion {
        rkey: 0xdead,
        ..mb.remote()
    };
    qa.post_send(&[SendWr::write(10, &[ma.sge(0..8)], bad)])
        .unwrap();
    let s = ca.wait(1, T).unwrap()[0];
    assert_eq!((s.wr_id, s.status), (10, WcStatus::RemAccessErr));
    assert_eq!(
        a.get_async_event(T),
        Some(AsyncEventKind::QpFatal(qa.qp_num()))
    );

    // Dropping a QP flushes what was posted to it.
    qb.post_recv(&[RecvWr {
        wr_id: 102,
        sg_list: vec![mb.sge(0..8)],
    }])
    .unwrap();
    drop(qb);
    let r = cb.wait(1, T).unwrap()[0];
    assert_eq!((r.wr_id, r.status), (102, WcStatus::WrFlushErr));

    // UD through an address handle: the receiver sees a GRH first.
    let ua = a
        .create_qp(&pa, &QpInitAttr::new(QpType::Ud, &ca, &ca))
        .unwrap();
    let ub = b
        .create_qp(&pb, &QpInitAttr::new(QpType::Ud, &cb, &cb))
        .unwrap();
    ua.connect(&ub.endpoint(), &ConnectOptions::default())
        .unwrap();
    ub.connect(&ua.endpoint(), &ConnectOptions::default())
        .unwrap();
    ub.post_recv(&[RecvWr {
        wr_id: 200,
        sg_list: vec![mb.sge(0..1024)],
    }])
    .unwrap();
    let ah = pa.create_ah(AddressVector::to(fake_addr)).unwrap();
    let qkey = ConnectOptions::default().qkey;
    let mut ud = ah.send(11, &[ma.sge(0..5)], ub.qp_num(), qkey);
    ud.inline_data = Some(b"udmsg".to_vec());
    ua.post_send(&[ud]).unwrap();
    let r = cb.wait(1, T).unwrap()[0];
    assert_eq!(
        (r.wr_id, r.byte_len, r.grh, r.src_qp),
        (200, 45, true, ua.qp_num())
    );
    let mut m = [0u8; 5];
    mb.read(40, &mut m).unwrap();
    assert_eq!(&m, b"udmsg");
    ca.wait(1, T).unwrap();

    // An SRQ shared by a QP, with its limit event.
    let srq = b.create_srq(&pb, 16, 4).unwrap();
    let sa = a
        .create_qp(&pa, &QpInitAttr::new(QpType::Rc, &ca, &ca))
        .unwrap();
    let sb = b
        .create_qp(&pb, &QpInitAttr::new(QpType::Rc, &cb, &cb).with_srq(&srq))
        .unwrap();
    sa.connect(&sb.endpoint(), &ConnectOptions::default())
        .unwrap();
    sb.connect(&sa.endpoint(), &ConnectOptions::default())
        .unwrap();
    srq.post_recv(&[
        RecvWr {
            wr_id: 300,
            sg_list: vec![mb.sge(0..64)],
        },
        RecvWr {
            wr_id: 301,
            sg_list: vec![mb.sge(64..128)],
        },
    ])
    .unwrap();
    srq.set_limit(2).unwrap();
    sa.post_send(&[SendWr::send(12, &[ma.sge(0..3)])]).unwrap();
    let r = cb.wait(1, T).unwrap()[0];
    assert_eq!((r.wr_id, r.qp_num, r.byte_len), (300, sb.qp_num(), 3));
    assert_eq!(
        b.get_async_event(T),
        Some(AsyncEventKind::SrqLimitReached(srq.id()))
    );
    ca.wait(1, T).unwrap();

    // A region gives its bytes back.
    let bytes = mb.deregister().unwrap();
    assert_eq!(&bytes[4096..], &pattern[..]);
    assert_eq!(b.counters(), rxe_core::engine::Counters::default());
    drop((sa, sb, srq, ua, ub, qa, ma, cb, ca, ch, pa, pb));
}

// ------------------------------------------- the proof program, soft/soft --

/// Builds an example of rxe-verbs (Cargo builds no examples of other
/// packages for these tests) and returns its path.
fn example(name: &str) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(cargo)
        .args(["build", "-p", "rxe-verbs", "--example", name])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run cargo build");
    assert!(out.status.success(), "cargo build --example {name} failed");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.contains("compiler-artifact") && l.contains(name))
        .find_map(|l| {
            let i = l.find("\"executable\":\"")? + 14;
            let rest = &l[i..];
            Some(PathBuf::from(&rest[..rest.find('"')?]))
        })
        .expect("cargo reported no executable")
}

/// `backend_exchange` between two processes on the soft stack: what runs
/// against the kernel's rxe in the interop guest, checked here on loopback.
#[test]
fn backend_exchange_soft_to_soft() {
    let exe = example("backend_exchange");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let run = |args: &[&str]| {
        let mut c = Command::new(&exe);
        c.args(args)
            .args(["--port", &port, "--timeout", "10"])
            .env("RXE_PROVIDER", "soft")
            .env_remove("RXE_LIBIBVERBS");
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let server = run(&["server", "--addr", "127.0.77.60"]);
    let client = run(&["client", "--addr", "127.0.77.61", "--server", "127.0.77.60"]);
    let c = client.wait_with_output().unwrap();
    let s = server.wait_with_output().unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (ct, st) = (text(&c), text(&s));
    assert!(c.status.success(), "client:\n{ct}\nserver:\n{st}");
    assert!(s.status.success(), "server:\n{st}\nclient:\n{ct}");
    for t in [&ct, &st] {
        assert!(t.contains("backend: soft"), "{t}");
        assert!(t.contains("all 8 checks passed on the soft backend"), "{t}");
        assert!(!t.contains("FAILED"), "{t}");
    }
}
