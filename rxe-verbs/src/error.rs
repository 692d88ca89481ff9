//! The one error type of the verbs API. Work-request failures are not
//! errors but completions with a status; these are the calls the stack
//! refuses outright.

use rxe_core::engine::EngineError;

/// Why a verbs call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine refused the call (the message names the argument).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The connection manager refused a command (rdma_cm).
    #[error(transparent)]
    Cm(#[from] rxe_core::cm::CmError),
    /// A work request in a list was refused; the ones before it were posted.
    #[error("work request {index} (wr_id {wr_id}) refused: {source}")]
    BadWorkRequest {
        /// Its position in the list.
        index: usize,
        /// Its id.
        wr_id: u64,
        /// Why.
        #[source]
        source: EngineError,
    },
    /// An argument is out of range.
    #[error("{name}: {reason}")]
    InvalidArgument {
        /// The argument.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The device could not be opened or its socket failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
    /// Nothing arrived within the time asked for.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// A region or window is still in use.
    #[error("{0} is still in use")]
    Busy(&'static str),
    /// The object belongs to another device.
    #[error("{0} belongs to another device")]
    WrongDevice(&'static str),
    /// The backend serving the device cannot do this (for example memory
    /// windows on a native device, or a packet capture of native traffic).
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was asked for, and on which backend.
        what: String,
    },
}

pub(crate) fn unsupported(what: impl Into<String>) -> Error {
    Error::Unsupported { what: what.into() }
}

pub(crate) fn invalid(name: &'static str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        name,
        reason: reason.into(),
    }
}
