//! Targeted engine scenarios over the simulated network.

use rxe_core::engine::RegionMemory;
use rxe_core::types::*;
use rxe_net::sim::Faults;
use rxe_tests::sim::*;
use std::time::Duration;

#[test]
fn rc_send_multi_packet() {
    let (mut net, nodes) = network(1, Faults::none(), 2, 1 << 20);
    let (a, b) = (&nodes[0], &nodes[1]);
    let p = ConnParams::default();
    let (qa, qb) = connect(&mut net, a, b, &p);
    let data: Vec<u8> = (0..10000u32).map(|i| (i * 7) as u8).collect();
    a.mem.write(0, &data);
    net.engines[b.idx].post_recv(qb, RecvWr { wr_id: 7, sg_list: vec![sge(b, 4096, 20000)] }).unwrap();
    let mut wr = SendWr::new(1, SendOpcode::Send);
    wr.sg_list = vec![sge(a, 0, 10000)];
    net.engines[a.idx].post_send(qa, wr).unwrap();
    net.run(Duration::from_secs(1));
    let ca = completions(&mut net, a);
    let cb = completions(&mut net, b);
    assert_eq!(ca.len(), 1, "{ca:?}");
    assert_eq!(ca[0].status, WcStatus::Success);
    assert_eq!(cb.len(), 1, "{cb:?}");
    assert_eq!(cb[0].status, WcStatus::Success);
    assert_eq!(cb[0].byte_len, 10000);
    assert_eq!(&b.mem.snapshot()[4096..14096], &data[..]);
}
