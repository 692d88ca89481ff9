//! UD SEND with an address handle.
//!
//! Unreliable Datagram QPs are not connected: each send names its
//! destination through an address handle (the peer's IP address, from its
//! GID), the remote QP number and the Q_Key both sides agreed on. Every
//! receive buffer starts with a 40-byte area for the Global Route Header,
//! so the payload lands 40 bytes in.
//!
//! Run with `cargo run -p rxe-verbs --example ud_send`.

use rxe_verbs::*;
use std::time::Duration;

const QKEY: u32 = 0x1111_1111;
const GRH: usize = 40;

fn main() -> Result<(), Error> {
    // The receiver on 127.0.0.3.
    let rctx = Device::soft("127.0.0.3".parse().unwrap()).open()?;
    let rpd = rctx.alloc_pd()?;
    let rcq = rctx.create_cq(16, None)?;
    let rmr = rpd.alloc_mr(GRH + 1024, Access::LOCAL_WRITE)?;
    let rqp = rctx.create_qp(&rpd, &QpInitAttr::new(QpType::Ud, &rcq, &rcq))?;
    // For UD, `connect` only moves the QP to RTS with the Q_Key: no peer.
    let opts = ConnectOptions {
        qkey: QKEY,
        ..ConnectOptions::default()
    };
    rqp.connect(&rqp.endpoint(), &opts)?;
    // Post a receive before anything is sent: UD drops what finds none.
    rqp.post_recv(&[RecvWr {
        wr_id: 7,
        sg_list: vec![rmr.sge(0..GRH + 1024)],
    }])?;

    // The sender on 127.0.0.2.
    let sctx = Device::soft("127.0.0.2".parse().unwrap()).open()?;
    let spd = sctx.alloc_pd()?;
    let scq = sctx.create_cq(16, None)?;
    let smr = spd.alloc_mr(1024, Access::LOCAL_WRITE)?;
    let sqp = sctx.create_qp(&spd, &QpInitAttr::new(QpType::Ud, &scq, &scq))?;
    sqp.connect(&sqp.endpoint(), &opts)?;

    // The address handle: where the receiver is (its GID gives its address).
    let ah = spd.create_ah(AddressVector::to("127.0.0.3".parse().unwrap()))?;
    let msg = b"one datagram, no connection";
    smr.write(0, msg)?;
    sqp.post_send(&[ah.send(1, &[smr.sge(0..msg.len())], rqp.qp_num(), QKEY)])?;
    let sent = scq.wait(1, Duration::from_secs(5))?;
    println!("sender:   {:?} {:?}", sent[0].opcode, sent[0].status);

    let wc = rcq.wait(1, Duration::from_secs(5))?.remove(0);
    assert_eq!(wc.status, WcStatus::Success);
    // byte_len counts the GRH area too.
    let mut payload = vec![0u8; wc.byte_len as usize - GRH];
    rmr.read(GRH, &mut payload)?;
    println!(
        "receiver: {} bytes ({} payload + {GRH} GRH) from QP {:#08x}: {:?}",
        wc.byte_len,
        payload.len(),
        wc.src_qp,
        String::from_utf8_lossy(&payload)
    );
    assert_eq!(wc.src_qp, sqp.qp_num());
    assert_eq!(&payload, msg);
    Ok(())
}
