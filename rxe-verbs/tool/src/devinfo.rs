//! `rxe devinfo`: what `ibv_devinfo` shows, for soft devices and for the
//! native devices libibverbs lists (which `RXE_PROVIDER=auto|native` would
//! use), each marked with its kind.

use clap::Args as ClapArgs;
use rxe_core::engine::EngineConfig;
use rxe_verbs::{Device, DeviceAttr, DeviceKind, GidType, Mtu, PortAttr};
use std::process::ExitCode;

/// Arguments of `rxe devinfo`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Device name (native, or from RXE_DEVICES) or IP address; all devices if absent.
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Print all attributes, the GID table included.
    #[arg(short, long)]
    verbose: bool,
}

fn mtu_code(m: Mtu) -> String {
    format!("{} ({})", m.bytes(), m as u8)
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// The attributes to show: a soft device's from its configuration, a
/// native one's from the device itself (opened for the purpose).
fn attrs(d: &Device) -> Result<(DeviceAttr, PortAttr), String> {
    match d.kind() {
        DeviceKind::Soft => {
            let mut config = EngineConfig::new(d.addr(), 0);
            // what a context opened now would have: its link's MTU
            config.port_mtu = d.active_mtu();
            Ok((
                DeviceAttr::new_for(d, &config.caps),
                PortAttr::new_for(d, &config),
            ))
        }
        DeviceKind::Native => {
            let ctx = d.open().map_err(|e| e.to_string())?;
            Ok((ctx.query_device(), ctx.query_port()))
        }
    }
}

fn gid_type(t: GidType) -> &'static str {
    match t {
        GidType::RoceV2 => "RoCE v2",
        GidType::RoceV1 => "RoCE v1",
        GidType::Ib => "IB",
        GidType::Unknown => "type unknown",
    }
}

fn print(d: &Device, verbose: bool) {
    let (attr, port) = match attrs(d) {
        Ok(a) => a,
        Err(e) => {
            println!("hca_id:\t{}", d.name());
            println!("\tkind:\t\t\t\t{}", d.kind());
            println!("\terror:\t\t\t\t{e}");
            println!();
            return;
        }
    };
    println!("hca_id:\t{}", d.name());
    match d.kind() {
        DeviceKind::Soft => println!("\tkind:\t\t\t\tsoft (rxe-rs engine on {})", d.addr()),
        DeviceKind::Native => println!(
            "\tkind:\t\t\t\tnative (libibverbs; uses GID index {}, {})",
            d.gid_index(),
            d.addr()
        ),
    }
    println!("\ttransport:\t\t\tInfiniBand (0)");
    println!("\tfw_ver:\t\t\t\t{}", attr.fw_ver);
    println!("\tnode_guid:\t\t\t{}", guid(attr.node_guid));
    println!("\tsys_image_guid:\t\t\t{}", guid(attr.sys_image_guid));
    println!("\tvendor_id:\t\t\t{:#x}", attr.vendor_id);
    println!("\tvendor_part_id:\t\t\t{}", attr.vendor_part_id);
    println!("\thw_ver:\t\t\t\t{:#X}", attr.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", attr.phys_port_cnt);
    if verbose {
        let c = &attr.caps;
        println!("\tmax_mr_size:\t\t\t{:#x}", c.max_mr_size);
        println!("\tmax_qp:\t\t\t\t{}", c.max_qp);
        println!("\tmax_qp_wr:\t\t\t{}", c.max_qp_wr);
        println!("\tmax_sge:\t\t\t{}", c.max_sge);
        println!("\tmax_cqe:\t\t\t{}", c.max_cqe);
        println!("\tmax_qp_rd_atom:\t\t\t{}", c.max_qp_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t\t{}", c.max_qp_init_rd_atom);
        println!("\tmax_srq:\t\t\t{}", c.max_srq);
        println!("\tmax_mw:\t\t\t\t{}", c.max_mw);
        println!("\tmax_pkeys:\t\t\t{}", c.max_pkeys);
        println!("\tatomic_cap:\t\t\tATOMIC_HCA (1)");
    }
    println!("\t\tport:\t{}", d.port());
    println!(
        "\t\t\tstate:\t\t\t{} ({})",
        port.state.ibv_name(),
        port.state.ibv_value()
    );
    println!("\t\t\tmax_mtu:\t\t{}", mtu_code(port.max_mtu));
    println!("\t\t\tactive_mtu:\t\t{}", mtu_code(port.active_mtu));
    println!("\t\t\tsm_lid:\t\t\t0");
    println!("\t\t\tport_lid:\t\t0");
    println!("\t\t\tport_lmc:\t\t0x00");
    println!("\t\t\tlink_layer:\t\t{}", port.link_layer);
    if verbose {
        println!("\t\t\tmax_msg_sz:\t\t{:#x}", port.max_msg_sz);
        println!("\t\t\tgid_tbl_len:\t\t{}", port.gid_tbl_len);
        println!("\t\t\tpkey_tbl_len:\t\t{}", port.pkey_tbl_len);
        let native = d.native_gids();
        for (i, g) in port.gids.iter().enumerate() {
            if g.is_unspecified() {
                continue;
            }
            let o = g.octets();
            let hex: Vec<String> = o
                .chunks(2)
                .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                .collect();
            let t = match d.kind() {
                DeviceKind::Soft => "RoCE v2",
                DeviceKind::Native => native
                    .iter()
                    .find(|n| n.port == d.port() && n.index as usize == i)
                    .map_or("type unknown", |n| gid_type(n.gid_type)),
            };
            println!("\t\t\tGID[{i:3}]:\t\t{}, {t}", hex.join(":"));
        }
    }
    println!();
}

/// Runs `rxe devinfo`.
pub fn run(args: &Args) -> ExitCode {
    let devices = match &args.device {
        Some(d) => match Device::find(d) {
            Ok(d) => vec![d],
            Err(e) => {
                eprintln!("rxe devinfo: {e}");
                return ExitCode::from(2);
            }
        },
        None => Device::list(),
    };
    if devices.is_empty() {
        println!(
            "No devices: no native RDMA device is listed and no soft device is named: \
             set RXE_DEVICES=name=address[,...] or give -d ADDRESS"
        );
        return ExitCode::SUCCESS;
    }
    for d in &devices {
        print(d, args.verbose);
    }
    ExitCode::SUCCESS
}
