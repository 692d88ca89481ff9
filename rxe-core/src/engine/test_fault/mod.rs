//! Faults put into a device **on purpose, for testing fuzzers only**: a
//! fuzzer's oracles are only worth something if they fire on a broken
//! peer, and this makes an rxe-rs device (an `rxe pingpong` server, say)
//! that broken peer.
//!
//! **Only in builds with the cargo feature `test-fault`**, which neither
//! the release drop-in library nor the default `rxe` binary has: without
//! it [`TestFault`] is an enum with no variants, `EngineConfig::test_fault`
//! can only be `None`, and every check below is compiled away (a test
//! reads the built artefacts for the faults' names). With the feature the
//! fault is still off unless the program sets [`EngineConfig::test_fault`]:
//! the verbs layer does so from the environment variable `RXE_TEST_FAULT`
//! of the process that opens the device (this crate reads no environment),
//! once, when the device's engine is built; nothing a packet carries can
//! switch it on, change it or name another opcode.
//!
//! The faults, each tripped on a QP by the first request *packet* it
//! receives with the opcode byte given (whatever its PSN, before any check
//! of the responder), and then lasting as long as the QP:
//!
//! * `wedge-after-opcode=0xNN`: the QP stops answering anything. That
//!   packet and every later one is dropped unanswered, the QP sends nothing
//!   more (no response, no request, no retransmission) and its timers stop:
//!   the program that owns it waits for ever, like a hung NIC. A fuzzer's
//!   liveness oracle (a fresh connection to the program must work) fires.
//! * `garble-after-opcode=0xNN`: every packet the QP sends from then on,
//!   responses and requests alike, is cut to 14 bytes (the BTH and half an
//!   extension header) after its ICRC was computed: no parser takes it. A
//!   fuzzer's peer-wire oracle (every packet the peer sends parses) fires.
//!
//! And one that needs no trip, on every QP of the device from the start:
//!
//! * `ignore-write-access`: the responder executes an RDMA WRITE whatever
//!   the remote-write permission of the QP and of the region its R_Key
//!   names (the key, the protection domain and the range are still
//!   checked): a region registered for remote READ only (an `ib_read_bw`
//!   server's) can be written by anyone who holds its key. A fuzzer's canary
//!   oracle (a region the peer registered without remote write stays
//!   unchanged) fires.
//! * `corrupt-unaligned-read`: a READ that starts at an offset in its
//!   region's memory that is not a multiple of 8 is answered with the
//!   first payload byte of every response packet inverted, like a DMA
//!   engine that mishandles unaligned starts. The region is read as usual
//!   (exactly the bytes the READ asked for, nothing else); only the packet
//!   is wrong. A READ of a whole buffer (aligned, as every perftest buffer
//!   is) comes back right, so a fuzzer's canary oracle stays quiet, and
//!   its data oracle (a READ of a random part must return the bytes the
//!   whole-buffer READ returned) fires.
//! * `accept-neighbour-rkey`: the responder takes an R_Key (of a READ,
//!   WRITE or atomic) whose slot holds a live region or window but whose
//!   low 8 bits (the variant, which tells successive users of a slot
//!   apart) are wrong as if it were that entry's own key: the key a
//!   requester was granted, with a bit of its variant flipped, reaches the
//!   region. Everything else is checked against the entry it reaches (its
//!   protection domain, rights and range): no byte outside a registered
//!   region is ever read or written, and a key of a region that is gone
//!   names nothing. A fuzzer's rkey oracle (no request with a key the peer
//!   did not grant is executed) fires.
//!
//! [`EngineConfig::test_fault`]: super::EngineConfig::test_fault

#[cfg(feature = "test-fault")]
mod on;
#[cfg(feature = "test-fault")]
pub use on::TestFault;

#[cfg(not(feature = "test-fault"))]
mod off;
#[cfg(not(feature = "test-fault"))]
pub use off::TestFault;

/// Where garbled packets are cut.
pub(crate) const GARBLE_LEN: usize = 14;
