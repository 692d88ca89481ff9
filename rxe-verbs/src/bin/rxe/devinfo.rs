//! `rxe devinfo`: what `ibv_devinfo` shows, for soft devices.

use clap::Args as ClapArgs;
use rxe_core::engine::EngineConfig;
use rxe_verbs::{Device, DeviceAttr, Mtu, PortAttr};
use std::process::ExitCode;

/// Arguments of `rxe devinfo`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Device name (from RXE_DEVICES) or IP address; all named devices if absent.
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

fn print(d: &Device, verbose: bool) {
    let config = EngineConfig::new(d.addr(), 0);
    let attr = DeviceAttr::new_for(d, &config.caps);
    let port = PortAttr::new_for(d, &config);
    println!("hca_id:\t{}", d.name());
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
    println!("\t\tport:\t1");
    println!("\t\t\tstate:\t\t\tPORT_ACTIVE (4)");
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
        for (i, g) in port.gids.iter().enumerate() {
            let o = g.octets();
            let hex: Vec<String> = o
                .chunks(2)
                .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
                .collect();
            println!("\t\t\tGID[{i:3}]:\t\t{}, RoCE v2", hex.join(":"));
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
        println!("No soft devices named: set RXE_DEVICES=name=address[,...] or give -d ADDRESS");
        return ExitCode::SUCCESS;
    }
    for d in &devices {
        print(d, args.verbose);
    }
    ExitCode::SUCCESS
}
