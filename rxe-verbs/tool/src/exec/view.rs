//! The device view's tree: the files the kernel would show for each soft
//! device, written under one directory that `librxe_devview.so` (preloaded
//! by `rxe exec`) puts in place of `/sys/class/infiniband`,
//! `/sys/class/infiniband_verbs` and `/dev/infiniband`
//! (`rxe-verbs/devview`).
//!
//! For device `NAME`, number `N`, on address `ADDR`:
//!
//! * `sys/class/infiniband/NAME/`: `node_type` (`1: CA`), `node_guid` and
//!   `sys_image_guid` (the drop-in's, `xxxx:xxxx:xxxx:xxxx`), `fw_ver`,
//!   `node_desc`, `hca_type`; `ports/1/`: `state` (`4: ACTIVE`),
//!   `phys_state` (`5: LinkUp`), `rate`, `link_layer` (`Ethernet`), `lid`,
//!   `sm_lid`, `lid_mask_count`, `cap_mask`, `gids/0` (ADDR as a GID),
//!   `gid_attrs/types/0` (`RoCE v2`), `gid_attrs/ndevs/0` (the interface
//!   holding ADDR), `pkeys/0` (`0xffff`); `device/`: `numa_node` (`-1`),
//!   `net/IFNAME` (a link to `/sys/class/net/IFNAME`), `driver` (a link
//!   whose last part is `rxe_rs`);
//! * `sys/class/infiniband_verbs/abi_version` (`6`) and `uverbsN/`:
//!   `ibdev`, `abi_version`, `dev`;
//! * `dev/infiniband/uverbsN`: a link to `/dev/null`, a character device
//!   anyone may read and write, which is all a program checks of it (the
//!   drop-in never opens it).
//!
//! The tree is a snapshot taken when `rxe exec` starts: a port's state and
//! MTU are what `ibv_query_port` says, not these files.

use rxe_verbs::{gid_of, interface_of, Device};
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// A GID as sysfs writes it: eight groups of four hex digits.
fn gid_text(a: IpAddr) -> String {
    let o = gid_of(a).octets();
    o.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// A GUID as sysfs writes it: four groups of four hex digits.
fn guid_text(g: u64) -> String {
    let b = g.to_be_bytes();
    b.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

fn put(path: &Path, text: &str) -> io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, format!("{text}\n"))
}

fn link(path: &Path, target: &str) -> io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::os::unix::fs::symlink(target, path)
}

/// Writes the tree for `devices` (name, address) into `root`, which must
/// not exist yet.
fn write_tree(root: &Path, devices: &[(String, IpAddr)]) -> io::Result<()> {
    let ib = root.join("sys/class/infiniband");
    let verbs = root.join("sys/class/infiniband_verbs");
    std::fs::create_dir_all(&ib)?;
    put(&verbs.join("abi_version"), "6")?;
    std::fs::create_dir_all(root.join("dev/infiniband"))?;
    for (n, (name, addr)) in devices.iter().enumerate() {
        let d = ib.join(name);
        let guid = guid_text(Device::soft(*addr).node_guid());
        put(&d.join("node_type"), "1: CA")?;
        put(&d.join("node_guid"), &guid)?;
        put(&d.join("sys_image_guid"), &guid)?;
        put(&d.join("fw_ver"), env!("CARGO_PKG_VERSION"))?;
        put(&d.join("node_desc"), &format!("rxe-rs soft RoCE on {addr}"))?;
        put(&d.join("hca_type"), "rxe-rs")?;
        let p = d.join("ports/1");
        put(&p.join("state"), "4: ACTIVE")?;
        put(&p.join("phys_state"), "5: LinkUp")?;
        put(&p.join("rate"), "2.5 Gb/sec (1X SDR)")?;
        put(&p.join("link_layer"), "Ethernet")?;
        put(&p.join("lid"), "0x0")?;
        put(&p.join("sm_lid"), "0x0")?;
        put(&p.join("lid_mask_count"), "0")?;
        put(&p.join("cap_mask"), "0x00010000")?;
        put(&p.join("gids/0"), &gid_text(*addr))?;
        put(&p.join("gid_attrs/types/0"), "RoCE v2")?;
        put(&p.join("pkeys/0"), "0xffff")?;
        let dev = d.join("device");
        put(&dev.join("numa_node"), "-1")?;
        link(&dev.join("driver"), "../../../../bus/rxe_rs/drivers/rxe_rs")?;
        if let Some(i) = interface_of(*addr) {
            put(&p.join("gid_attrs/ndevs/0"), &i.name)?;
            link(
                &dev.join("net").join(&i.name),
                &format!("/sys/class/net/{}", i.name),
            )?;
        }
        let u = verbs.join(format!("uverbs{n}"));
        put(&u.join("ibdev"), name)?;
        put(&u.join("abi_version"), "1")?;
        put(&u.join("dev"), &format!("231:{}", 192 + n))?;
        link(&root.join(format!("dev/infiniband/uverbs{n}")), "/dev/null")?;
    }
    Ok(())
}

/// The tree for `devices`, made once per user and set of devices (in
/// `$XDG_RUNTIME_DIR`, else the temporary directory) and reused after.
pub fn tree(devices: &[(String, IpAddr)]) -> Result<PathBuf, String> {
    use std::hash::BuildHasher;
    let key: Vec<String> = devices.iter().map(|(n, a)| format!("{n}={a}")).collect();
    let mut key = key.join(",");
    for (_, a) in devices {
        // the interface of an address is part of what the tree says
        key.push_str(&interface_of(*a).map_or(String::new(), |i| i.name));
    }
    key.push_str(env!("CARGO_PKG_VERSION"));
    let tag = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(&key);
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let root = base.join(format!("rxe-view-{uid}-{tag:016x}"));
    if root.join("sys/class/infiniband").is_dir() {
        return Ok(root);
    }
    // written aside, then renamed into place: a concurrent `rxe exec`
    // either finds the whole tree or makes its own copy
    let tmp = base.join(format!(".rxe-view-{uid}-{tag:016x}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    write_tree(&tmp, devices).map_err(|e| format!("{}: {e}", tmp.display()))?;
    match std::fs::rename(&tmp, &root) {
        Ok(()) => Ok(root),
        Err(_) if root.join("sys/class/infiniband").is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(root)
        }
        Err(e) => Err(format!("{}: {e}", root.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_holds_what_ucx_and_open_mpi_read() {
        let dir = std::env::temp_dir().join(format!("rxe-view-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        write_tree(&dir, &[("rxe0".to_string(), a)]).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        let ib = "sys/class/infiniband/rxe0";
        assert_eq!(
            read(&format!("{ib}/ports/1/gid_attrs/types/0")),
            "RoCE v2\n"
        );
        assert_eq!(read(&format!("{ib}/ports/1/gid_attrs/ndevs/0")), "lo\n");
        assert_eq!(
            read(&format!("{ib}/ports/1/gids/0")),
            "0000:0000:0000:0000:0000:ffff:7f00:0002\n"
        );
        assert_eq!(read(&format!("{ib}/ports/1/state")), "4: ACTIVE\n");
        assert_eq!(
            read(&format!("{ib}/node_guid")).trim(),
            guid_text(Device::soft(a).node_guid())
        );
        assert_eq!(read("sys/class/infiniband_verbs/uverbs0/ibdev"), "rxe0\n");
        let dev = std::fs::metadata(dir.join("dev/infiniband/uverbs0")).unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(dev.file_type().is_char_device());
        let drv = std::fs::read_link(dir.join(format!("{ib}/device/driver"))).unwrap();
        assert_eq!(drv.file_name().unwrap(), "rxe_rs");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
