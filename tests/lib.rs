//! Shared helpers for the integration tests.

use std::path::PathBuf;

/// The directory holding this crate (`tests/` in the workspace).
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The bundled captures of real Linux rdma_rxe traffic.
pub fn pcap_dir() -> PathBuf {
    tests_dir().join("data").join("pcaps")
}

pub mod sim;
