//! Hot paths of the wire layer: the ICRC (bytes per second) and parsing and
//! emitting packets (packets per second), per core.
//!
//! `cargo bench -p rxe-core --bench wire`

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use rxe_core::psn::Psn;
use rxe_core::wire::{icrc, BthRepr, Opcode, Packet, PacketRepr, RethRepr};
use std::hint::black_box;
use std::net::IpAddr;

fn write_first(payload: &[u8]) -> PacketRepr<'_> {
    let mut p = PacketRepr::new(BthRepr {
        opcode: Opcode::RC_RDMA_WRITE_FIRST,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x1234,
        ack_req: false,
        psn: Psn::new(42),
    });
    p.reth = Some(RethRepr {
        va: 0x7f00_0000_1000,
        rkey: 0xabcd_ef01,
        dma_len: 1 << 20,
    });
    p.payload = payload;
    p
}

fn bench_icrc(c: &mut Criterion) {
    let src: IpAddr = "127.0.0.2".parse().unwrap();
    let dst: IpAddr = "127.0.0.3".parse().unwrap();
    let mut g = c.benchmark_group("icrc");
    for size in [64usize, 1024, 4096] {
        let payload = vec![0x5au8; size];
        let repr = write_first(&payload);
        let mut buf = vec![0u8; repr.buffer_len()];
        let n = repr.emit(&mut buf).unwrap();
        let covered = &buf[..n - 4];
        g.throughput(Throughput::Bytes(covered.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &covered, |b, t| {
            b.iter(|| {
                icrc::compute_udp(black_box(src), black_box(dst), 4791, black_box(t)).unwrap()
            })
        });
    }
    g.finish();
}

fn bench_parse_emit(c: &mut Criterion) {
    let mut g = c.benchmark_group("packet");
    g.throughput(Throughput::Elements(1));
    let payload = vec![0x5au8; 4096];
    let repr = write_first(&payload);
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    g.bench_function("parse_4096", |b| {
        b.iter(|| {
            let p = Packet::new_checked(black_box(&buf[..])).unwrap();
            black_box(PacketRepr::parse(&p).unwrap().reth)
        })
    });
    g.bench_function("parse_headers_only", |b| {
        b.iter(|| {
            let p = Packet::new_checked(black_box(&buf[..])).unwrap();
            black_box(p.bth().psn())
        })
    });
    g.bench_function("emit_4096", |b| {
        b.iter_batched_ref(
            || vec![0u8; buf.len()],
            |out| black_box(repr.emit(out).unwrap()),
            BatchSize::SmallInput,
        )
    });
    let small = write_first(&[]);
    let mut out = vec![0u8; small.buffer_len()];
    g.bench_function("emit_headers_only", |b| {
        b.iter(|| black_box(small.emit(&mut out).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench_icrc, bench_parse_emit);
criterion_main!(benches);
