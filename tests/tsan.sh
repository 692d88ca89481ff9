#!/usr/bin/env bash
# tests/tsan.sh - the verbs layer's threads under ThreadSanitizer, in two
# parts (see "Concurrency" in docs/reliability.md):
#
# 1. Rust: rxe-verbs' unit tests and rxe-verbs/tests/threads.rs (the
#    progress thread with its real socket, application threads posting and
#    polling over real UDP, completion channels, destroy during traffic).
# 2. The drop-in C library (rxe-verbs/ibverbs: libibverbs.so.1 and
#    librdmacm.so.1), built instrumented, under C programs:
#    a. tests/c/verbs_threads.c, our own: eight threads posting, polling,
#       waiting on a completion channel, taking async events, creating and
#       destroying CQs and QPs during traffic, destroying a receiver and
#       its armed CQ under the sender's feet; and tests/c/rdmacm_threads.c:
#       rdma_cm listeners destroyed while six client threads' connection
#       requests for them arrive and a server thread takes the
#       CONNECT_REQUESTs. Both compiled with gcc
#       -fsanitize=thread and linked with rustc's TSan runtime (the one
#       the library's instrumentation is made for), exported (-rdynamic)
#       so that the library's __tsan_* calls resolve to it: one runtime.
#    b. Debian's ibv_rc_pingpong -e, ibv_srq_pingpong -e and rping,
#       unmodified, with the environment `rxe exec` gives (the library as
#       libibverbs.so.1 and librdmacm.so.1 first in LD_LIBRARY_PATH,
#       RXE_DEVICES). rustc's runtime is a static archive that cannot be
#       made into a shared object (its TLS is local-exec), so these get
#       GCC's libtsan.so.2 preloaded, plus tests/c/tsan_memintrinsics.c for
#       the three entry points newer LLVM calls and GCC 12's runtime lacks
#       (__tsan_memcpy, __tsan_memmove, __tsan_memset). Skipped if the
#       programs or libtsan.so.2 are not installed.
#
# The standard library comes prebuilt, not instrumented (no rust-src here
# for -Zbuild-std): its own synchronisation is invisible to TSan, so
# tests/tsan.supp names the std internals whose reports are false
# positives. Nothing of rxe-rs is suppressed. Any report fails the run
# (halt_on_error, exit code 66). A few minutes, most of them building; the
# build goes to target/tsan. Arguments go to the Rust test binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer"
export CARGO_TARGET_DIR="${TSAN_TARGET_DIR:-$PWD/target/tsan}"
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 abort_on_error=0 exitcode=66 ${TSAN_OPTIONS:-}"
host=$(rustc -vV | sed -n 's/^host: //p')

# --- 1. Rust ----------------------------------------------------------------
# --target keeps build scripts and proc macros out of the instrumented build.
cargo test -p rxe-verbs --target "$host" --lib --test threads -- "$@"

# --- 2. The drop-in C library ----------------------------------------------
cargo build -p rxe-ibverbs --target "$host"
lib="$CARGO_TARGET_DIR/$host/debug/libibverbs.so"
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/lib"
ln -s "$lib" "$work/lib/libibverbs.so.1"
ln -s "$lib" "$work/lib/librdmacm.so.1"

# Runs a program on the library (what `rxe exec -d ADDR... --` sets up),
# killed after two minutes; prints its output when it fails.
on_rxe() {
    local devices=$1 name=$2
    shift 2
    if ! RXE_DEVICES="$devices" LD_LIBRARY_PATH="$work/lib" timeout 120 "$@" \
        >"$work/$name.out" 2>&1; then
        echo "tsan.sh: $name failed (exit code 66: ThreadSanitizer reported):" >&2
        cat "$work/$name.out" >&2
        return 1
    fi
    echo "tsan.sh: $name: ok"
}

# 2a. Our C program, instrumented by gcc, on rustc's runtime.
rt="$(rustc --print sysroot)/lib/rustlib/$host/lib/librustc-stable_rt.tsan.a"
gcc -Wall -Werror -O1 -g -fsanitize=thread -c tests/c/verbs_threads.c -o "$work/verbs_threads.o"
gcc -o "$work/verbs_threads" "$work/verbs_threads.o" -rdynamic \
    -Wl,--whole-archive "$rt" -Wl,--no-whole-archive -libverbs -lpthread -ldl -lm -lrt
on_rxe rxe0=127.0.7.2,rxe1=127.0.7.3 verbs_threads "$work/verbs_threads"
tail -n 1 "$work/verbs_threads.out"
gcc -Wall -Werror -O1 -g -fsanitize=thread -c tests/c/rdmacm_threads.c -o "$work/rdmacm_threads.o"
gcc -o "$work/rdmacm_threads" "$work/rdmacm_threads.o" -rdynamic \
    -Wl,--whole-archive "$rt" -Wl,--no-whole-archive -lrdmacm -libverbs -lpthread -ldl -lm -lrt
on_rxe rxe0=127.0.7.20,rxe1=127.0.7.21 rdmacm_threads \
    "$work/rdmacm_threads" 127.0.7.20 127.0.7.21 19720 64
grep '^#' "$work/rdmacm_threads.out"
tail -n 1 "$work/rdmacm_threads.out"

# 2b. Debian's programs, uninstrumented, on GCC's runtime preloaded.
libtsan=$(gcc -print-file-name=libtsan.so.2)
if [ ! -e "$libtsan" ] || ! command -v ibv_rc_pingpong >/dev/null; then
    echo "tsan.sh: no libtsan.so.2 or no ibv_rc_pingpong: Debian's programs skipped"
    exit 0
fi
gcc -O1 -fno-builtin -fPIC -shared -o "$work/libtsan_memintrinsics.so" tests/c/tsan_memintrinsics.c
preload="$(readlink -f "$libtsan") $work/libtsan_memintrinsics.so"

# A server on ADDR0 and a client on ADDR1, each its own process; both must
# succeed. The server's rdma_cm or TCP port must be listening first.
pair() {
    local name=$1 a0=$2 a1=$3 ready=$4
    shift 4
    local sargs=() cargs=() side=s
    for a in "$@"; do
        if [ "$a" = "--" ]; then side=c; continue; fi
        if [ $side = s ]; then sargs+=("$a"); else cargs+=("$a"); fi
    done
    on_rxe "rxe0=$a0" "$name-server" env LD_PRELOAD="$preload" "${sargs[@]}" &
    local server=$!
    pids+=("$server")
    for _ in $(seq 300); do
        grep -q "$ready" /proc/net/tcp /proc/net/unix 2>/dev/null && break
        sleep 0.1
    done
    on_rxe "rxe0=$a1" "$name-client" env LD_PRELOAD="$preload" "${cargs[@]}"
    wait "$server"
}

# The out-of-band TCP port, as /proc/net/tcp shows a listener (hex).
tcp() { printf ':%04X 00000000:0000 0A' "$1"; }

pair rc_pingpong 127.0.7.10 127.0.7.11 "$(tcp 19711)" \
    ibv_rc_pingpong -d rxe0 -g 0 -n 200 -e -p 19711 -- \
    ibv_rc_pingpong -d rxe0 -g 0 -n 200 -e -p 19711 127.0.0.1
pair srq_pingpong 127.0.7.12 127.0.7.13 "$(tcp 19712)" \
    ibv_srq_pingpong -d rxe0 -g 0 -n 100 -e -p 19712 -- \
    ibv_srq_pingpong -d rxe0 -g 0 -n 100 -e -p 19712 127.0.0.1
if command -v rping >/dev/null; then
    # rping's CM thread and CQ thread on librdmacm and libibverbs.
    pair rping 127.0.7.14 127.0.7.15 "@rxe-rs/v1/127.0.7.14/svc/" \
        rping -s -a 127.0.7.14 -p 19713 -C 20 -- \
        rping -c -a 127.0.7.14 -p 19713 -C 20 -V -v
fi
