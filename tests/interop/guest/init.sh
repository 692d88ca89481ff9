#!/bin/bash
# /init of the rxe-rs interop guest (packed into the initramfs by build-guest.sh).
#
# Kernel command line:  rxe.ip=10.99.0.11/24  rxe.mtu=1500
# It loads rdma_rxe, configures eth0, creates rxe0 on it (`rdma link add`),
# finds the IPv4-mapped GID's index, mounts the 9p share "share" on /share and
# runs a job agent:
#   the host moves a script into /share/jobs/NAME.sh (atomically),
#   the guest runs it with bash in the background:
#     output -> /share/out/NAME.log, exit code -> /share/out/NAME.rc
#   a job named "poweroff" stops the guest.
# /share/ready says the guest is up (ip, gid_index, kernel, timings).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
T0=$(cut -d' ' -f1 /proc/uptime)

arg() { tr ' ' '\n' </proc/cmdline | sed -n "s/^$1=//p" | tail -n1; }
IP=$(arg rxe.ip); MTU=$(arg rxe.mtu)
: "${MTU:=1500}"
log() { echo "[guest $(cut -d' ' -f1 /proc/uptime)] $*"; }

for m in virtio_pci virtio_net 9pnet_virtio 9p crc32_pclmul crc32_generic rdma_rxe ib_uverbs rdma_ucm; do
    modprobe "$m" 2>/dev/null || log "modprobe $m failed (maybe built in)"
done
ip link set lo up
GIDX=""
if [ -n "$IP" ]; then
    i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    ip link set eth0 mtu "$MTU"
    ip addr add "$IP" dev eth0
    ip link set eth0 up
    rdma link add rxe0 type rxe netdev eth0 || log "rdma link add failed"
    want=$(echo "${IP%/*}" | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x",$1,$2,$3,$4}')
    i=0
    while [ -z "$GIDX" ] && [ $i -lt 150 ]; do
        for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
            [ "$(cat "$g" 2>/dev/null)" = "$want" ] && GIDX=${g##*/} && break
        done
        [ -z "$GIDX" ] && sleep 0.1; i=$((i+1))
    done
    log "rxe0 on eth0 $IP mtu $MTU, IPv4 GID index=$GIDX"
fi
T1=$(cut -d' ' -f1 /proc/uptime)

if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /share 2>/dev/null; then
    S=/share
    mkdir -p $S/jobs $S/run $S/out
    { echo "ip=${IP%/*}"; echo "gid_index=$GIDX"; echo "kernel=$(uname -r)";
      echo "init_start=$T0"; echo "ready=$T1"; } >$S/ready.tmp
    mv $S/ready.tmp $S/ready
    log "job agent on $S"
    while :; do
        for f in $S/jobs/*.sh; do
            [ -e "$f" ] || continue
            n=$(basename "$f" .sh)
            mv "$f" "$S/run/$n.sh"
            if [ "$n" = poweroff ]; then log "poweroff requested"; sync; poweroff -f; fi
            ( cd /tmp && bash "$S/run/$n.sh" >"$S/out/$n.log" 2>&1; echo $? >"$S/out/$n.rc.tmp";
              mv "$S/out/$n.rc.tmp" "$S/out/$n.rc" ) &
        done
        sleep 0.1
    done
fi
log "no 9p share: shell on the console (exit powers off)"
setsid cttyhack bash
poweroff -f
