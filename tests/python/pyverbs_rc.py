"""A short pyverbs program: two soft devices in one process (rxe0, rxe1),
an RC queue pair on each, a SEND of a known message from one to the other
and an RDMA WRITE back, checked byte for byte. Run by
tests/ibverbs_programs.rs under `rxe exec` with Debian's python3-pyverbs."""

import sys
import time

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE


def side(name):
    ctx = d.Context(name=name)
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
    cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    gid = ctx.query_gid(1, 0)
    return ctx, pd, cq, mr, qp, gid


def connect(qp, remote_qpn, remote_gid):
    attr = QPAttr(qp_state=e.IBV_QPS_INIT)
    attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    attr.pkey_index = 0
    attr.port_num = 1
    qp.to_init(attr)
    gr = GlobalRoute(dgid=remote_gid, sgid_index=0, hop_limit=64)
    attr = QPAttr(qp_state=e.IBV_QPS_RTR)
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = remote_qpn
    attr.rq_psn = 0
    attr.max_dest_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1)
    qp.to_rtr(attr)
    attr = QPAttr(qp_state=e.IBV_QPS_RTS)
    attr.timeout = 14
    attr.retry_cnt = 7
    attr.rnr_retry = 7
    attr.sq_psn = 0
    attr.max_rd_atomic = 1
    qp.to_rts(attr)


def wait(cq, n):
    deadline = time.time() + 10
    got = []
    while len(got) < n:
        if time.time() > deadline:
            sys.exit(f"timed out waiting for {n} completions, got {len(got)}")
        count, wcs = cq.poll(n - len(got))
        got.extend(wcs[:count])
    for wc in got:
        if wc.status != e.IBV_WC_SUCCESS:
            sys.exit(f"completion failed: status {wc.status}")
    return got


a = side("rxe0")
b = side("rxe1")
connect(a[4], b[4].qp_num, b[5])
connect(b[4], a[4].qp_num, a[5])

msg = b"hello from pyverbs over rxe-rs"
b[3].write(bytes(4096), 4096, 0)
b[4].post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(b[3].buf, 4096, b[3].lkey)]))
a[3].write(msg, len(msg), 0)
a[4].post_send(SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a[3].buf, len(msg), a[3].lkey)]))
wait(a[2], 1)
wc = wait(b[2], 1)[0]
got = b[3].read(len(msg), 0)
if got != msg or wc.byte_len != len(msg):
    sys.exit(f"SEND delivered {got!r} ({wc.byte_len} bytes)")

reply = bytes(range(256)) * 8
b[3].write(reply, len(reply), 0)
wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(b[3].buf, len(reply), b[3].lkey)])
wr.set_wr_rdma(a[3].rkey, a[3].buf)
b[4].post_send(wr)
wait(b[2], 1)
got = a[3].read(len(reply), 0)
if got != reply:
    sys.exit("RDMA WRITE delivered other bytes")
print(f"pyverbs: SEND {len(msg)} bytes and RDMA WRITE {len(reply)} bytes checked")
