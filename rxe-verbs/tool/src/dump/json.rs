//! `rxe dump --json`: the JSON object of each packet and of each frame
//! that does not parse.

use rxe_core::wire::{AethRepr, AethSyndrome, Error as WireError};
use serde::Serialize;
use serde_json::{json, Value};
use std::net::IpAddr;

use super::packet::{Mad, Parsed, Rel};

/// The JSON object of a packet: fields in this order, headers the packet
/// does not have left out.
#[derive(Debug, Serialize)]
pub(super) struct JsonPacket {
    frame: u64,
    time: f64,
    src: IpAddr,
    dst: IpAddr,
    udp_src_port: u16,
    opcode: u8,
    opcode_name: String,
    dest_qp: u32,
    psn: u32,
    solicited: bool,
    ack_req: bool,
    mig_req: bool,
    pad: u8,
    pkey: u16,
    fecn: bool,
    becn: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    rdeth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    feth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_eth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aeth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_ack_eth: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    immdt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ieth: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mad: Option<Value>,
    payload_len: usize,
    icrc_ok: bool,
    icrc: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    icrc_expected: Option<u32>,
}

pub(super) fn json_packet(p: &Parsed) -> JsonPacket {
    let (b, r) = (&p.repr.bth, p.repr);
    let aeth = |h: AethRepr| {
        let mut a = json!({ "msn": h.msn });
        let (name, (k, v)) = match h.syndrome {
            AethSyndrome::Ack { credits } => ("ACK", ("credits", json!(credits))),
            AethSyndrome::RnrNak { timer } => ("RNR_NAK", ("timer", json!(timer))),
            AethSyndrome::Nak(c) => {
                a["nak_name"] = json!(c.to_string());
                ("NAK", ("nak_code", json!(c.code())))
            }
            AethSyndrome::Reserved(x) => ("RESERVED", ("raw", json!(x))),
        };
        a["syndrome"] = json!(name);
        a[k] = v;
        a
    };
    JsonPacket {
        frame: p.frame,
        time: p.time.secs(),
        src: p.roce.ip.src(),
        dst: p.roce.ip.dst(),
        udp_src_port: p.roce.udp_src_port,
        opcode: b.opcode.0,
        opcode_name: b.opcode.to_string(),
        dest_qp: b.dest_qp,
        psn: b.psn.value(),
        solicited: b.solicited,
        ack_req: b.ack_req,
        mig_req: b.mig_req,
        pad: b.pad_count,
        pkey: b.pkey,
        fecn: b.fecn,
        becn: b.becn,
        rdeth: r.rdeth.map(|h| json!({ "ee_context": h.ee_context })),
        deth: r
            .deth
            .map(|h| json!({ "qkey": h.qkey, "src_qp": h.src_qp })),
        feth: r
            .feth
            .map(|h| json!({ "selectivity": h.selectivity, "placement": h.placement })),
        reth: r
            .reth
            .map(|h| json!({ "va": h.va, "rkey": h.rkey, "dma_len": h.dma_len })),
        atomic_eth: r.atomic_eth.map(
            |h| json!({ "va": h.va, "rkey": h.rkey, "swap_add": h.swap_add, "compare": h.compare }),
        ),
        aeth: r.aeth.map(aeth),
        atomic_ack_eth: r.atomic_ack_eth.map(|h| json!({ "orig": h.orig })),
        immdt: r.immdt,
        ieth: r.ieth,
        mad: Mad::parse(r).map(|m| mad_json(&m)),
        payload_len: r.payload.len(),
        icrc_ok: p.icrc_ok(),
        icrc: p.icrc,
        icrc_expected: (!p.icrc_ok()).then_some(p.icrc_expected),
    }
}

/// The JSON object of a frame to UDP port 4791 that does not parse.
#[derive(Debug, Serialize)]
pub(super) struct JsonError {
    frame: u64,
    time: f64,
    src: IpAddr,
    dst: IpAddr,
    error: String,
}

pub(super) fn error_json(
    frame: u64,
    time: Rel,
    addrs: (IpAddr, IpAddr),
    e: &WireError,
) -> JsonError {
    JsonError {
        frame,
        time: time.secs(),
        src: addrs.0,
        dst: addrs.1,
        error: e.to_string(),
    }
}

/// The MAD header's fields, with the CM attribute's name when it has one.
fn mad_json(m: &Mad) -> Value {
    json!({
        "mgmt_class": m.class,
        "class_version": m.version,
        "method": m.method,
        "attr_id": m.attr,
        "name": m.cm_name(),
    })
}
