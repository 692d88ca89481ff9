//! The queue pair state machine, written down as data.
//!
//! A queue pair (QP) is always in one of seven states (IBTA 10.3.1). The
//! consumer moves it with `ibv_modify_qp`; the engine moves it on its own only
//! when something fails (into SQE or ERR). This module decides whether a
//! modify call is legal: which state changes exist, which attributes each
//! change requires and which it accepts, and whether the attribute values are
//! in range. It changes nothing itself: [`check_modify`] answers "yes, and the
//! QP ends up in this state" or an error that says exactly what is wrong.
//!
//! # The states
//!
//! ```text
//!            (a)           (b)          (c)
//!   RESET -------> INIT -------> RTR -------> RTS <-------(g)------- SQE
//!                                             | ^                      ^
//!                                         (e) | | (f)                  |
//!                                             v |                      |
//!                                             SQD        RTS ----------+
//!                                                        a send failed (UC/UD
//!                                                        only; the engine, not
//!                                                        a modify, moves it)
//!
//!   attribute-only self-loops: RESET, INIT, RTS (d), SQD, ERR
//!   every state           --modify-->                    RESET
//!   every state but RESET --modify, or a fatal error-->  ERR
//! ```
//!
//! * **RESET**: the QP exists but does nothing; work requests cannot be
//!   posted. A newly created QP starts here.
//! * **INIT**: receives may be posted but nothing is processed yet.
//! * **RTR** (ready to receive): incoming requests are processed; the QP
//!   knows its peer but does not send.
//! * **RTS** (ready to send): fully operational.
//! * **SQD** (send queue drained): no new sends start; once the ones in
//!   flight finish, send-side attributes may be changed.
//! * **SQE** (send queue error, UC and UD only): a send failed; receives still
//!   work. RC never enters SQE: an RC send error takes the QP to ERR.
//! * **ERR**: everything posted completes with `IBV_WC_WR_FLUSH_ERR`.
//!
//! # What each transition needs
//!
//! The rules are IBTA table 10.3 as the Linux kernel encodes it in
//! `qp_state_table` (`drivers/infiniband/core/verbs.c`), restricted to the
//! RC, UC and UD transports. "Required" attributes must be in the mask;
//! "optional" ones may be; anything else is refused. `IBV_QP_STATE` is always
//! accepted.
//!
//! * (a) **RESET→INIT**: UD requires `PKEY_INDEX | PORT | QKEY`; UC and RC
//!   require `PKEY_INDEX | PORT | ACCESS_FLAGS`. (RESET→RESET takes nothing.)
//! * **INIT→INIT**: the same attributes as RESET→INIT, all optional.
//! * (b) **INIT→RTR**: the QP learns its peer and starts receiving.
//!   UD requires nothing, optional `PKEY_INDEX | QKEY`.
//!   UC requires `AV | PATH_MTU | DEST_QPN | RQ_PSN`;
//!   RC requires those and `MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER` (responder
//!   resources and the RNR delay it asks senders to wait).
//!   UC and RC accept `ALT_PATH | ACCESS_FLAGS | PKEY_INDEX`.
//! * (c) **RTR→RTS**: the QP starts sending. UD and UC require `SQ_PSN`;
//!   RC requires `TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC`.
//!   Optional: UD `CUR_STATE | QKEY`; UC `CUR_STATE | ALT_PATH | ACCESS_FLAGS
//!   | PATH_MIG_STATE`; RC the same plus `MIN_RNR_TIMER`.
//! * (d) **RTS→RTS**: nothing required; optional UD `CUR_STATE | QKEY`, UC
//!   `CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE`, RC the same plus
//!   `MIN_RNR_TIMER`.
//! * (e) **RTS→SQD**: optional `EN_SQD_ASYNC_NOTIFY` (all types).
//! * (f) **SQD→RTS**: as RTR→RTS's optional attributes, nothing required.
//! * **SQD→SQD**: the drained send queue may be reconfigured. Optional: UD
//!   `PKEY_INDEX | QKEY`; UC `AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX |
//!   PATH_MIG_STATE`; RC `PORT | AV | TIMEOUT | RETRY_CNT | RNR_RETRY |
//!   MAX_QP_RD_ATOMIC | MAX_DEST_RD_ATOMIC | ALT_PATH | ACCESS_FLAGS |
//!   PKEY_INDEX | MIN_RNR_TIMER | PATH_MIG_STATE`.
//! * (g) **SQE→RTS** (UD, UC): optional UD `CUR_STATE | QKEY`, UC
//!   `CUR_STATE | ACCESS_FLAGS`.
//! * **any→RESET**, **any but RESET→ERR**, **ERR→ERR**: nothing required or
//!   accepted. (The kernel has no RESET→ERR: a QP in RESET holds nothing
//!   to flush.)
//!
//! Nothing else is legal. In particular there is no RTR→RTR, and no modify
//! ever enters SQE: only the engine puts a QP there.
//!
//! # Details that trip people up
//!
//! * As in libibverbs, a mask without `IBV_QP_STATE` asks to stay in the
//!   current state: it is an attribute-only modify, legal only where the
//!   table has the self-transition (RESET, INIT, RTS, SQD, ERR).
//! * `IBV_QP_CUR_STATE` only states the caller's belief: if it differs from
//!   the real state the call fails with [`ModifyError::CurStateMismatch`].
//!   It is accepted only on the transitions into RTS (as in the kernel's
//!   `ib_modify_qp_is_ok`, which refuses it outside RTR/RTS/SQD/SQE).
//! * The table allows `ALT_PATH`, but RoCE soft devices have no alternate
//!   path, so it is refused with [`ModifyError::Unsupported`] rather than
//!   silently ignored. `PATH_MIG_STATE` is taken where the table allows it
//!   and changes nothing (no path migration happens; the kernel's rxe takes
//!   it too). `IBV_QP_CAP` (queue sizes) is never modifiable here.
//! * For UC, `REMOTE_READ` and `REMOTE_ATOMIC` in `ACCESS_FLAGS` are
//!   accepted (the kernel accepts them) but mean nothing: UC carries no READ
//!   or atomic operations.

use crate::psn::Psn;
use crate::types::{Access, AddressVector, DeviceCaps, Mtu, QpAttr, QpAttrMask, QpState, QpType};
use core::fmt;
use std::net::IpAddr;

/// One legal state change and the attributes it needs, for one QP type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// State before the modify.
    pub from: QpState,
    /// State after the modify.
    pub to: QpState,
    /// Attributes that must be in the mask (`IBV_QP_STATE` aside).
    pub required: QpAttrMask,
    /// Attributes that may be in the mask.
    pub optional: QpAttrMask,
}

/// The seven states, in the order of the verbs enum.
const ALL_STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

/// Every attribute bit this module knows, lowest first.
const ALL_ATTRS: [QpAttrMask; 21] = [
    QpAttrMask::STATE,
    QpAttrMask::CUR_STATE,
    QpAttrMask::EN_SQD_ASYNC_NOTIFY,
    QpAttrMask::ACCESS_FLAGS,
    QpAttrMask::PKEY_INDEX,
    QpAttrMask::PORT,
    QpAttrMask::QKEY,
    QpAttrMask::AV,
    QpAttrMask::PATH_MTU,
    QpAttrMask::TIMEOUT,
    QpAttrMask::RETRY_CNT,
    QpAttrMask::RNR_RETRY,
    QpAttrMask::RQ_PSN,
    QpAttrMask::MAX_QP_RD_ATOMIC,
    QpAttrMask::ALT_PATH,
    QpAttrMask::MIN_RNR_TIMER,
    QpAttrMask::SQ_PSN,
    QpAttrMask::MAX_DEST_RD_ATOMIC,
    QpAttrMask::PATH_MIG_STATE,
    QpAttrMask::CAP,
    QpAttrMask::DEST_QPN,
];

/// Attributes the table permits but this device refuses.
const UNSUPPORTED: QpAttrMask = QpAttrMask::CAP.union(QpAttrMask::ALT_PATH);

/// The access flags that mean something on a QP (the FLUSH rights as
/// the kernel's rxe takes them from 6.2 on).
const QP_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::FLUSH_GLOBAL)
    .union(Access::FLUSH_PERSISTENT);

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// `mask!(A | B)` is `QpAttrMask::A | QpAttrMask::B`, usable in a `const`.
macro_rules! mask {
    () => {
        QpAttrMask::empty()
    };
    ($($bit:ident)|+) => {
        QpAttrMask::empty()$(.union(QpAttrMask::$bit))+
    };
}

/// What one transition needs from one QP type.
#[derive(Debug, Clone, Copy)]
struct Params {
    required: QpAttrMask,
    optional: QpAttrMask,
}

/// Legal for this type, with nothing required and nothing accepted.
const BARE: Option<Params> = Some(Params {
    required: mask!(),
    optional: mask!(),
});

/// Legal for this type with these required attributes.
const fn req(required: QpAttrMask) -> Option<Params> {
    Some(Params {
        required,
        optional: mask!(),
    })
}

/// Legal for this type with these optional attributes.
const fn opt(optional: QpAttrMask) -> Option<Params> {
    Some(Params {
        required: mask!(),
        optional,
    })
}

/// Legal for this type with these required and optional attributes.
const fn req_opt(required: QpAttrMask, optional: QpAttrMask) -> Option<Params> {
    Some(Params { required, optional })
}

/// One row of the table: a state change and, per type, whether it is legal
/// (`Some`) and what it needs.
#[derive(Debug, Clone, Copy)]
struct Row {
    from: QpState,
    to: QpState,
    ud: Option<Params>,
    uc: Option<Params>,
    rc: Option<Params>,
}

impl Row {
    const fn params(&self, qp_type: QpType) -> Option<Params> {
        match qp_type {
            QpType::Ud => self.ud,
            QpType::Uc => self.uc,
            QpType::Rc => self.rc,
        }
    }
}

/// A transition legal for all three types with nothing required or accepted.
const fn bare(from: QpState, to: QpState) -> Row {
    Row {
        from,
        to,
        ud: BARE,
        uc: BARE,
        rc: BARE,
    }
}

/// Every legal transition: IBTA table 10.3 as the kernel's `qp_state_table`
/// has it, for UD, UC and RC. Any (from, to, type) not listed is illegal.
const TABLE: [Row; 22] = {
    // Note: `Err` below is `QpState::Err` (the glob import shadows the prelude).
    use QpState::*;
    [
        // RESET
        bare(Reset, Reset),
        Row {
            from: Reset,
            to: Init,
            ud: req(mask!(PKEY_INDEX | PORT | QKEY)),
            uc: req(mask!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
            rc: req(mask!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
        },
        // INIT
        bare(Init, Reset),
        bare(Init, Err),
        Row {
            from: Init,
            to: Init,
            ud: opt(mask!(PKEY_INDEX | PORT | QKEY)),
            uc: opt(mask!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
            rc: opt(mask!(PKEY_INDEX | PORT | ACCESS_FLAGS)),
        },
        Row {
            from: Init,
            to: Rtr,
            ud: opt(mask!(PKEY_INDEX | QKEY)),
            uc: req_opt(
                mask!(AV | PATH_MTU | DEST_QPN | RQ_PSN),
                mask!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
            ),
            rc: req_opt(
                mask!(AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER),
                mask!(ALT_PATH | ACCESS_FLAGS | PKEY_INDEX),
            ),
        },
        // RTR
        bare(Rtr, Reset),
        bare(Rtr, Err),
        Row {
            from: Rtr,
            to: Rts,
            ud: req_opt(mask!(SQ_PSN), mask!(CUR_STATE | QKEY)),
            uc: req_opt(
                mask!(SQ_PSN),
                mask!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
            ),
            rc: req_opt(
                mask!(TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC),
                mask!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE),
            ),
        },
        // RTS
        bare(Rts, Reset),
        bare(Rts, Err),
        Row {
            from: Rts,
            to: Rts,
            ud: opt(mask!(CUR_STATE | QKEY)),
            uc: opt(mask!(CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE)),
            rc: opt(mask!(
                CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER
            )),
        },
        Row {
            from: Rts,
            to: Sqd,
            ud: opt(mask!(EN_SQD_ASYNC_NOTIFY)),
            uc: opt(mask!(EN_SQD_ASYNC_NOTIFY)),
            rc: opt(mask!(EN_SQD_ASYNC_NOTIFY)),
        },
        // SQD
        bare(Sqd, Reset),
        bare(Sqd, Err),
        Row {
            from: Sqd,
            to: Rts,
            ud: opt(mask!(CUR_STATE | QKEY)),
            uc: opt(mask!(CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE)),
            rc: opt(mask!(
                CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE
            )),
        },
        Row {
            from: Sqd,
            to: Sqd,
            ud: opt(mask!(PKEY_INDEX | QKEY)),
            uc: opt(mask!(
                AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE
            )),
            rc: opt(mask!(
                PORT | AV
                    | TIMEOUT
                    | RETRY_CNT
                    | RNR_RETRY
                    | MAX_QP_RD_ATOMIC
                    | MAX_DEST_RD_ATOMIC
                    | ALT_PATH
                    | ACCESS_FLAGS
                    | PKEY_INDEX
                    | MIN_RNR_TIMER
                    | PATH_MIG_STATE
            )),
        },
        // SQE (UC and UD only; RC keeps the escape to RESET and ERR so that
        // no state is ever a dead end, but has no SQE->RTS).
        bare(Sqe, Reset),
        bare(Sqe, Err),
        Row {
            from: Sqe,
            to: Rts,
            ud: opt(mask!(CUR_STATE | QKEY)),
            uc: opt(mask!(CUR_STATE | ACCESS_FLAGS)),
            rc: None,
        },
        // ERR
        bare(Err, Reset),
        bare(Err, Err),
    ]
};

/// The table entry for `from → to` on a `qp_type` QP, or `None` if that
/// transition is illegal.
pub fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<Transition> {
    TABLE
        .iter()
        .find(|row| row.from == from && row.to == to)
        .and_then(|row| {
            row.params(qp_type).map(|p| Transition {
                from,
                to,
                required: p.required,
                optional: p.optional,
            })
        })
}

/// Every legal transition for `qp_type`, in table order.
pub fn legal_transitions(qp_type: QpType) -> impl Iterator<Item = Transition> {
    TABLE
        .iter()
        .filter_map(move |row| transition(qp_type, row.from, row.to))
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// The rule an attribute value broke (see [`ModifyError::InvalidValue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueRule {
    /// The value must be at most this.
    AtMost(u64),
    /// The value must be less than this (an index into a table of this size).
    LessThan(u64),
    /// The value must be exactly this.
    Equals(u64),
    /// Only these flag bits may be set.
    FlagsWithin(u64),
    /// The value must be given (`attr.av` must be `Some`); the reported value
    /// is 0.
    Present,
}

/// Why a modify call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModifyError {
    /// The table has no `current → requested` for this QP type.
    InvalidTransition {
        /// The QP's transport type.
        qp_type: QpType,
        /// The QP's state.
        current: QpState,
        /// The state asked for (the current one if `IBV_QP_STATE` was not in
        /// the mask).
        requested: QpState,
    },
    /// A required attribute is not in the mask.
    MissingAttribute {
        /// The first (lowest) missing bit.
        attr: QpAttrMask,
        /// The QP's transport type.
        qp_type: QpType,
        /// The QP's state.
        current: QpState,
        /// The state asked for.
        requested: QpState,
    },
    /// The mask holds an attribute this transition does not accept.
    UnexpectedAttribute {
        /// The first (lowest) offending bit.
        attr: QpAttrMask,
        /// The QP's transport type.
        qp_type: QpType,
        /// The QP's state.
        current: QpState,
        /// The state asked for.
        requested: QpState,
    },
    /// An attribute value is out of range.
    InvalidValue {
        /// The attribute.
        attr: QpAttrMask,
        /// The value given (bytes for `PATH_MTU`, the flag bits for
        /// `ACCESS_FLAGS`).
        value: u64,
        /// The rule it broke.
        rule: ValueRule,
    },
    /// `IBV_QP_CUR_STATE` was given and is not the QP's state.
    CurStateMismatch {
        /// What the caller said the state is.
        given: QpState,
        /// What the state is.
        actual: QpState,
    },
    /// The attribute is legal in verbs but not on this device
    /// (`ALT_PATH`, `PATH_MIG_STATE`) or not modifiable at all (`CAP`).
    Unsupported {
        /// The first (lowest) such bit.
        attr: QpAttrMask,
    },
}

/// The libibverbs name of an attribute bit (`"IBV_QP_PATH_MTU"`). Give one
/// bit; if several are set this names the lowest, and an empty mask gives
/// `"(no attribute)"`.
pub fn attr_name(bit: QpAttrMask) -> &'static str {
    let Some(bit) = lowest_bit(bit.bits()) else {
        return "(no attribute)";
    };
    match bit {
        QpAttrMask::STATE => "IBV_QP_STATE",
        QpAttrMask::CUR_STATE => "IBV_QP_CUR_STATE",
        QpAttrMask::EN_SQD_ASYNC_NOTIFY => "IBV_QP_EN_SQD_ASYNC_NOTIFY",
        QpAttrMask::ACCESS_FLAGS => "IBV_QP_ACCESS_FLAGS",
        QpAttrMask::PKEY_INDEX => "IBV_QP_PKEY_INDEX",
        QpAttrMask::PORT => "IBV_QP_PORT",
        QpAttrMask::QKEY => "IBV_QP_QKEY",
        QpAttrMask::AV => "IBV_QP_AV",
        QpAttrMask::PATH_MTU => "IBV_QP_PATH_MTU",
        QpAttrMask::TIMEOUT => "IBV_QP_TIMEOUT",
        QpAttrMask::RETRY_CNT => "IBV_QP_RETRY_CNT",
        QpAttrMask::RNR_RETRY => "IBV_QP_RNR_RETRY",
        QpAttrMask::RQ_PSN => "IBV_QP_RQ_PSN",
        QpAttrMask::MAX_QP_RD_ATOMIC => "IBV_QP_MAX_QP_RD_ATOMIC",
        QpAttrMask::ALT_PATH => "IBV_QP_ALT_PATH",
        QpAttrMask::MIN_RNR_TIMER => "IBV_QP_MIN_RNR_TIMER",
        QpAttrMask::SQ_PSN => "IBV_QP_SQ_PSN",
        QpAttrMask::MAX_DEST_RD_ATOMIC => "IBV_QP_MAX_DEST_RD_ATOMIC",
        QpAttrMask::PATH_MIG_STATE => "IBV_QP_PATH_MIG_STATE",
        QpAttrMask::CAP => "IBV_QP_CAP",
        QpAttrMask::DEST_QPN => "IBV_QP_DEST_QPN",
        _ => "(unknown QP attribute bit)",
    }
}

/// The lowest set bit of `bits`, if any.
fn lowest_bit(bits: u32) -> Option<QpAttrMask> {
    (bits != 0).then(|| QpAttrMask::from_bits_retain(bits & bits.wrapping_neg()))
}

/// "an RC QP", "a UC QP", "a UD QP".
fn a_qp(qp_type: QpType) -> &'static str {
    match qp_type {
        QpType::Rc => "an RC QP",
        QpType::Uc => "a UC QP",
        QpType::Ud => "a UD QP",
    }
}

/// Displays a mask as `IBV_QP_A | IBV_QP_B`.
#[derive(Debug, Clone, Copy)]
struct Names(QpAttrMask);

impl fmt::Display for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bits = self.0.bits();
        let mut first = true;
        while let Some(bit) = lowest_bit(bits) {
            if !first {
                f.write_str(" | ")?;
            }
            first = false;
            f.write_str(attr_name(bit))?;
            bits &= !bit.bits();
        }
        Ok(())
    }
}

/// Where a limit on an attribute comes from, for error messages.
fn limit_origin(attr: QpAttrMask) -> &'static str {
    match attr {
        QpAttrMask::TIMEOUT => " (a 5-bit timer code: 4.096 us x 2^timeout)",
        QpAttrMask::RETRY_CNT => " (a 3-bit retry count)",
        QpAttrMask::RNR_RETRY => " (a 3-bit retry count, 7 = retry forever)",
        QpAttrMask::MIN_RNR_TIMER => " (a 5-bit RNR timer code)",
        QpAttrMask::DEST_QPN => " (QP numbers are 24 bits)",
        QpAttrMask::MAX_QP_RD_ATOMIC => " (the device's max_qp_init_rd_atom)",
        QpAttrMask::MAX_DEST_RD_ATOMIC => " (the device's max_qp_rd_atom)",
        QpAttrMask::PKEY_INDEX => " (the device's P_Key table size, max_pkeys)",
        QpAttrMask::PATH_MTU => " bytes (the port's active MTU)",
        QpAttrMask::PORT => " (a soft RoCE device has one port, number 1)",
        _ => "",
    }
}

impl fmt::Display for ModifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ModifyError::InvalidTransition {
                qp_type,
                current,
                requested,
            } => {
                write!(
                    f,
                    "{current}->{requested} is not a legal transition for {}",
                    a_qp(qp_type)
                )?;
                if current == requested {
                    write!(
                        f,
                        " ({current} takes no attribute-only modify, and a mask without \
                         IBV_QP_STATE keeps the current state)"
                    )?;
                }
                write!(f, "; from {current} {} may go to ", a_qp(qp_type))?;
                let targets: Vec<QpState> = ALL_STATES
                    .into_iter()
                    .filter(|&to| transition(qp_type, current, to).is_some())
                    .collect();
                for (i, to) in targets.iter().enumerate() {
                    if i > 0 {
                        f.write_str(if i + 1 == targets.len() { " or " } else { ", " })?;
                    }
                    write!(f, "{to}")?;
                }
                Ok(())
            }
            ModifyError::MissingAttribute {
                attr,
                qp_type,
                current,
                requested,
            } => {
                write!(
                    f,
                    "{current}->{requested} on {} requires {}",
                    a_qp(qp_type),
                    attr_name(attr)
                )?;
                if let Some(t) = transition(qp_type, current, requested) {
                    if t.required != attr {
                        write!(f, " (it requires all of {})", Names(t.required))?;
                    }
                }
                Ok(())
            }
            ModifyError::UnexpectedAttribute {
                attr,
                qp_type,
                current,
                requested,
            } => {
                write!(
                    f,
                    "{} is not accepted by {current}->{requested} on {}",
                    attr_name(attr),
                    a_qp(qp_type)
                )?;
                match transition(qp_type, current, requested) {
                    Some(t) if !(t.required | t.optional).is_empty() => {
                        write!(
                            f,
                            " (it accepts IBV_QP_STATE | {})",
                            Names(t.required | t.optional)
                        )
                    }
                    _ => write!(f, " (it accepts only IBV_QP_STATE)"),
                }
            }
            ModifyError::InvalidValue { attr, value, rule } => {
                let name = attr_name(attr);
                match rule {
                    ValueRule::AtMost(limit) => write!(
                        f,
                        "{name} = {value} is out of range: at most {limit}{}",
                        limit_origin(attr)
                    ),
                    ValueRule::LessThan(limit) => write!(
                        f,
                        "{name} = {value} is out of range: must be less than {limit}{}",
                        limit_origin(attr)
                    ),
                    ValueRule::Equals(expected) => write!(
                        f,
                        "{name} = {value} is invalid: must be {expected}{}",
                        limit_origin(attr)
                    ),
                    ValueRule::FlagsWithin(allowed) => write!(
                        f,
                        "{name} = {value:#x} sets flags {:#x} a QP cannot take: only \
                         LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC ({allowed:#x}) \
                         apply to a QP",
                        value & !allowed
                    ),
                    ValueRule::Present => write!(
                        f,
                        "{name} is in the mask but no value was given (attr.av is None)"
                    ),
                }
            }
            ModifyError::CurStateMismatch { given, actual } => write!(
                f,
                "IBV_QP_CUR_STATE says the QP is in {given}, but it is in {actual}"
            ),
            ModifyError::Unsupported { attr } => {
                let why = match attr {
                    QpAttrMask::CAP => {
                        "queue capacities are fixed when the QP is created and cannot be modified"
                    }
                    QpAttrMask::ALT_PATH => {
                        "RoCE soft devices have no alternate path (no automatic path migration)"
                    }
                    _ => "this device does not support it",
                };
                write!(f, "{} is not supported: {why}", attr_name(attr))
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// Checks a path MTU against the port's active MTU.
pub fn check_path_mtu(mtu: Mtu, port_max: Mtu) -> Result<(), ModifyError> {
    if mtu > port_max {
        return Err(ModifyError::InvalidValue {
            attr: QpAttrMask::PATH_MTU,
            value: mtu.bytes() as u64,
            rule: ValueRule::AtMost(port_max.bytes() as u64),
        });
    }
    Ok(())
}

/// `Ok` if `value <= limit`.
fn at_most(attr: QpAttrMask, value: u64, limit: u64) -> Result<(), ModifyError> {
    if value > limit {
        return Err(ModifyError::InvalidValue {
            attr,
            value,
            rule: ValueRule::AtMost(limit),
        });
    }
    Ok(())
}

/// Checks the value of the single attribute `bit`.
fn check_value(
    bit: QpAttrMask,
    attr: &QpAttr,
    caps: &DeviceCaps,
    port_mtu: Mtu,
) -> Result<(), ModifyError> {
    match bit {
        QpAttrMask::ACCESS_FLAGS => {
            // UC has no READ or atomics, so REMOTE_READ / REMOTE_ATOMIC mean
            // nothing there; the kernel accepts them and so do we.
            if !QP_ACCESS.contains(attr.access) {
                return Err(ModifyError::InvalidValue {
                    attr: bit,
                    value: attr.access.bits().into(),
                    rule: ValueRule::FlagsWithin(QP_ACCESS.bits().into()),
                });
            }
            Ok(())
        }
        QpAttrMask::PKEY_INDEX => {
            if attr.pkey_index >= caps.max_pkeys {
                return Err(ModifyError::InvalidValue {
                    attr: bit,
                    value: attr.pkey_index.into(),
                    rule: ValueRule::LessThan(caps.max_pkeys.into()),
                });
            }
            Ok(())
        }
        QpAttrMask::PORT => {
            if attr.port != 1 {
                return Err(ModifyError::InvalidValue {
                    attr: bit,
                    value: attr.port.into(),
                    rule: ValueRule::Equals(1),
                });
            }
            Ok(())
        }
        QpAttrMask::AV => {
            if attr.av.is_none() {
                return Err(ModifyError::InvalidValue {
                    attr: bit,
                    value: 0,
                    rule: ValueRule::Present,
                });
            }
            Ok(())
        }
        QpAttrMask::PATH_MTU => check_path_mtu(attr.path_mtu, port_mtu),
        QpAttrMask::TIMEOUT => at_most(bit, attr.timeout.into(), 31),
        QpAttrMask::RETRY_CNT => at_most(bit, attr.retry_cnt.into(), 7),
        QpAttrMask::RNR_RETRY => at_most(bit, attr.rnr_retry.into(), 7),
        QpAttrMask::MIN_RNR_TIMER => at_most(bit, attr.min_rnr_timer.into(), 31),
        QpAttrMask::MAX_QP_RD_ATOMIC => at_most(
            bit,
            attr.max_rd_atomic.into(),
            caps.max_qp_init_rd_atom.into(),
        ),
        QpAttrMask::MAX_DEST_RD_ATOMIC => at_most(
            bit,
            attr.max_dest_rd_atomic.into(),
            caps.max_qp_rd_atom.into(),
        ),
        QpAttrMask::DEST_QPN => at_most(bit, attr.dest_qpn.into(), 0xFF_FFFF),
        // STATE and CUR_STATE are enums (checked by the caller), QKEY takes
        // any value, PSNs are 24 bits by construction, EN_SQD_ASYNC_NOTIFY is
        // a bool. Unsupported and unknown bits never reach here.
        _ => Ok(()),
    }
}

/// Decides whether `ibv_modify_qp(qp, attr, mask)` is legal for a
/// `qp_type` QP in state `current`, and returns the state it ends up in.
///
/// The checks run in this order and the first failure is returned:
///
/// 1. `CUR_STATE` in the mask must match `current`
///    ([`ModifyError::CurStateMismatch`]).
/// 2. The requested state (`attr.state` if `STATE` is in the mask, else
///    `current`) must be reachable ([`ModifyError::InvalidTransition`]).
/// 3. No `CAP` or `ALT_PATH` ([`ModifyError::Unsupported`]).
/// 4. Every required attribute present ([`ModifyError::MissingAttribute`]).
/// 5. Nothing outside required | optional | `STATE`
///    ([`ModifyError::UnexpectedAttribute`]).
/// 6. Each attribute in the mask in range, lowest bit first
///    ([`ModifyError::InvalidValue`]): `ACCESS_FLAGS` within
///    `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC`,
///    `PKEY_INDEX < caps.max_pkeys`, `PORT == 1`, `AV` given, `PATH_MTU <=
///    port_mtu`, `TIMEOUT <= 31`, `RETRY_CNT <= 7`, `RNR_RETRY <= 7`,
///    `MIN_RNR_TIMER <= 31`, `MAX_QP_RD_ATOMIC <= caps.max_qp_init_rd_atom`,
///    `MAX_DEST_RD_ATOMIC <= caps.max_qp_rd_atom`, `DEST_QPN <= 0xFFFFFF`.
///
/// Only the fields named in `mask` are read.
pub fn check_modify(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: QpAttrMask,
    caps: &DeviceCaps,
    port_mtu: Mtu,
) -> Result<QpState, ModifyError> {
    if mask.contains(QpAttrMask::CUR_STATE) && attr.cur_state != current {
        return Err(ModifyError::CurStateMismatch {
            given: attr.cur_state,
            actual: current,
        });
    }

    let requested = if mask.contains(QpAttrMask::STATE) {
        attr.state
    } else {
        current
    };
    let t = transition(qp_type, current, requested).ok_or(ModifyError::InvalidTransition {
        qp_type,
        current,
        requested,
    })?;

    if let Some(bit) = lowest_bit(mask.bits() & UNSUPPORTED.bits()) {
        return Err(ModifyError::Unsupported { attr: bit });
    }

    if let Some(bit) = lowest_bit(t.required.bits() & !mask.bits()) {
        return Err(ModifyError::MissingAttribute {
            attr: bit,
            qp_type,
            current,
            requested,
        });
    }

    let accepted = t.required | t.optional | QpAttrMask::STATE;
    if let Some(bit) = lowest_bit(mask.bits() & !accepted.bits()) {
        return Err(ModifyError::UnexpectedAttribute {
            attr: bit,
            qp_type,
            current,
            requested,
        });
    }

    for bit in ALL_ATTRS {
        if mask.contains(bit) {
            check_value(bit, attr, caps, port_mtu)?;
        }
    }

    Ok(requested)
}

/// What a QP needs to go RESET → INIT → RTR → RTS: connected to one peer
/// (RC, UC) or ready to send datagrams (UD). [`Connect::steps`] writes
/// down the three modify calls (the three `ibv_modify_qp` calls of
/// rdma-core's `ibv_rc_pingpong`), each with exactly the attributes the
/// transition requires ((a), (b) and (c) above) and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// The QP's transport.
    pub qp_type: QpType,
    /// Remote access granted to incoming requests (RC, UC).
    pub access: Access,
    /// Q_Key (UD).
    pub qkey: u32,
    /// The peer's address (RC, UC).
    pub remote: IpAddr,
    /// The peer's QP number (RC, UC).
    pub dest_qpn: u32,
    /// The first PSN this QP expects (RC, UC).
    pub rq_psn: Psn,
    /// The first PSN this QP sends.
    pub sq_psn: Psn,
    /// Path MTU (RC, UC).
    pub mtu: Mtu,
    /// READs and atomics in flight, each way (RC).
    pub rd_atomic: u8,
    /// RNR timer code asked of senders (RC).
    pub min_rnr_timer: u8,
    /// Transport timer code: 4.096 µs × 2^timeout (RC).
    pub timeout: u8,
    /// Retries on timeout or sequence NAKs (RC).
    pub retry_cnt: u8,
    /// Retries on RNR NAKs, 7 for ever (RC).
    pub rnr_retry: u8,
    /// The device port the QP is bound to (1 on a soft device).
    pub port: u8,
    /// The source GID's index (RC, UC): 0 is the device's own address.
    pub sgid_index: u8,
}

impl Connect {
    /// The three modify calls, in order: INIT, RTR, RTS. A UC QP is
    /// granted only the remote access UC has (remote write): READ and
    /// atomics do not exist on UC, and asking for them is an error.
    pub fn steps(&self) -> [(QpAttr, QpAttrMask); 3] {
        let (ud, rc) = (self.qp_type == QpType::Ud, self.qp_type == QpType::Rc);
        let mut init = QpAttr {
            state: QpState::Init,
            port: self.port,
            pkey_index: 0,
            ..QpAttr::default()
        };
        let mut init_mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT;
        if ud {
            init.qkey = self.qkey;
            init_mask |= QpAttrMask::QKEY;
        } else {
            init.access = if self.qp_type == QpType::Uc {
                self.access & (Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            } else {
                self.access
            };
            init_mask |= QpAttrMask::ACCESS_FLAGS;
        }
        let mut rtr = QpAttr {
            state: QpState::Rtr,
            ..QpAttr::default()
        };
        let mut rtr_mask = QpAttrMask::STATE;
        if !ud {
            let mut av = AddressVector::to(self.remote);
            av.sgid_index = self.sgid_index;
            rtr.av = Some(av);
            rtr.path_mtu = self.mtu;
            rtr.dest_qpn = self.dest_qpn;
            rtr.rq_psn = self.rq_psn;
            rtr_mask |=
                QpAttrMask::AV | QpAttrMask::PATH_MTU | QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN;
        }
        if rc {
            rtr.max_dest_rd_atomic = self.rd_atomic;
            rtr.min_rnr_timer = self.min_rnr_timer;
            rtr_mask |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
        }
        let mut rts = QpAttr {
            state: QpState::Rts,
            sq_psn: self.sq_psn,
            ..QpAttr::default()
        };
        let mut rts_mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
        if rc {
            rts.timeout = self.timeout;
            rts.retry_cnt = self.retry_cnt;
            rts.rnr_retry = self.rnr_retry;
            rts.max_rd_atomic = self.rd_atomic;
            rts_mask |= QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC;
        }
        [(init, init_mask), (rtr, rtr_mask), (rts, rts_mask)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::psn::Psn;
    use crate::types::AddressVector;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv4Addr};

    const TYPES: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

    #[test]
    fn connect_steps_take_every_transport_to_rts() {
        for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
            let c = Connect {
                qp_type,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                qkey: 0x1111_1111,
                remote: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
                dest_qpn: 0x12,
                rq_psn: Psn::new(7),
                sq_psn: Psn::new(9),
                mtu: Mtu::Mtu1024,
                rd_atomic: 4,
                min_rnr_timer: 12,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                port: 1,
                sgid_index: 0,
            };
            let mut state = QpState::Reset;
            for (a, m) in c.steps() {
                state = check_modify(qp_type, state, &a, m, &caps(), Mtu::Mtu4096)
                    .unwrap_or_else(|e| panic!("{qp_type:?} from {state:?}: {e}"));
            }
            assert_eq!(state, QpState::Rts, "{qp_type:?}");
            let [_, (rtr, _), (rts, _)] = c.steps();
            assert_eq!(rts.sq_psn, Psn::new(9));
            if qp_type != QpType::Ud {
                assert_eq!((rtr.dest_qpn, rtr.rq_psn), (0x12, Psn::new(7)));
            }
        }
    }

    fn caps() -> DeviceCaps {
        DeviceCaps {
            max_qp_rd_atom: 8,
            max_qp_init_rd_atom: 16,
            max_pkeys: 1,
            ..Default::default()
        }
    }

    /// Attributes that pass every value check, asking for `from -> to`.
    fn good_attr(from: QpState, to: QpState) -> QpAttr {
        QpAttr {
            state: to,
            cur_state: from,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            pkey_index: 0,
            port: 1,
            qkey: 0x1234_5678,
            av: Some(AddressVector::to(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))),
            path_mtu: Mtu::Mtu1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            rq_psn: Psn::new(100),
            sq_psn: Psn::new(200),
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            dest_qpn: 0x11,
            en_sqd_async_notify: true,
        }
    }

    fn check(
        t: QpType,
        cur: QpState,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<QpState, ModifyError> {
        check_modify(t, cur, attr, mask, &caps(), Mtu::Mtu4096)
    }

    fn bits_of(mask: QpAttrMask) -> impl Iterator<Item = QpAttrMask> {
        ALL_ATTRS.into_iter().filter(move |b| mask.contains(*b))
    }

    // --- the table itself -------------------------------------------------

    #[test]
    fn table_shape() {
        // No duplicate rows.
        for (i, a) in TABLE.iter().enumerate() {
            for b in &TABLE[i + 1..] {
                assert!(
                    !(a.from == b.from && a.to == b.to),
                    "{}->{} twice",
                    a.from,
                    a.to
                );
            }
        }
        for t in TYPES {
            for s in ALL_STATES {
                // Every state can be reset; every state but RESET can be errored.
                assert!(
                    transition(t, s, QpState::Reset).is_some(),
                    "{t:?} {s}->RESET"
                );
                assert_eq!(
                    transition(t, s, QpState::Err).is_some(),
                    s != QpState::Reset
                );
                // No modify ever enters SQE.
                assert!(transition(t, s, QpState::Sqe).is_none(), "{t:?} {s}->SQE");
            }
            for tr in legal_transitions(t) {
                assert!((tr.required & tr.optional).is_empty(), "{t:?} {:?}", tr);
                assert!(!(tr.required | tr.optional).contains(QpAttrMask::STATE));
                assert!(!(tr.required | tr.optional).contains(QpAttrMask::CAP));
                // Required attributes are never unsupported ones.
                assert!((tr.required & UNSUPPORTED).is_empty());
                // CUR_STATE only where the kernel permits it (from RTR/RTS/SQD/SQE).
                if tr.optional.contains(QpAttrMask::CUR_STATE) {
                    assert!(matches!(
                        tr.from,
                        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                    ));
                }
            }
        }
        assert!(transition(QpType::Rc, QpState::Sqe, QpState::Rts).is_none());
        assert!(transition(QpType::Uc, QpState::Sqe, QpState::Rts).is_some());
        assert!(transition(QpType::Rc, QpState::Rtr, QpState::Rtr).is_none());
        assert_eq!(legal_transitions(QpType::Ud).count(), 22);
        assert_eq!(legal_transitions(QpType::Rc).count(), 21);
    }

    #[test]
    fn table_spot_checks_against_kernel() {
        let rc = transition(QpType::Rc, QpState::Init, QpState::Rtr).unwrap();
        assert_eq!(
            rc.required,
            QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER
        );
        let ud = transition(QpType::Ud, QpState::Reset, QpState::Init).unwrap();
        assert_eq!(
            ud.required,
            QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY
        );
        let uc = transition(QpType::Uc, QpState::Rtr, QpState::Rts).unwrap();
        assert_eq!(uc.required, QpAttrMask::SQ_PSN);
        let rc = transition(QpType::Rc, QpState::Rts, QpState::Sqd).unwrap();
        assert_eq!(rc.optional, QpAttrMask::EN_SQD_ASYNC_NOTIFY);
        let ud = transition(QpType::Ud, QpState::Sqd, QpState::Sqd).unwrap();
        assert_eq!(ud.optional, QpAttrMask::PKEY_INDEX | QpAttrMask::QKEY);
    }

    // --- legal transitions ------------------------------------------------

    #[test]
    fn every_legal_transition_with_exactly_required_passes() {
        for t in TYPES {
            for tr in legal_transitions(t) {
                let attr = good_attr(tr.from, tr.to);
                let mask = tr.required | QpAttrMask::STATE;
                assert_eq!(check(t, tr.from, &attr, mask), Ok(tr.to), "{t:?} {tr:?}");
                // With every supported optional attribute as well.
                let mask = mask | (tr.optional - UNSUPPORTED);
                assert_eq!(
                    check(t, tr.from, &attr, mask),
                    Ok(tr.to),
                    "{t:?} {tr:?} +opt"
                );
            }
        }
    }

    #[test]
    fn each_missing_required_bit_is_named() {
        for t in TYPES {
            for tr in legal_transitions(t) {
                let attr = good_attr(tr.from, tr.to);
                for bit in bits_of(tr.required) {
                    let mask = (tr.required - bit) | QpAttrMask::STATE;
                    assert_eq!(
                        check(t, tr.from, &attr, mask),
                        Err(ModifyError::MissingAttribute {
                            attr: bit,
                            qp_type: t,
                            current: tr.from,
                            requested: tr.to
                        }),
                    );
                    let msg = check(t, tr.from, &attr, mask).unwrap_err().to_string();
                    assert!(msg.contains(attr_name(bit)), "{msg}");
                }
            }
        }
    }

    #[test]
    fn each_bit_outside_the_table_is_named() {
        for t in TYPES {
            for tr in legal_transitions(t) {
                let attr = good_attr(tr.from, tr.to);
                for bit in ALL_ATTRS {
                    if (tr.required | tr.optional | QpAttrMask::STATE).contains(bit) {
                        continue;
                    }
                    let mask = tr.required | QpAttrMask::STATE | bit;
                    let got = check(t, tr.from, &attr, mask);
                    let want = if UNSUPPORTED.contains(bit) {
                        ModifyError::Unsupported { attr: bit }
                    } else {
                        ModifyError::UnexpectedAttribute {
                            attr: bit,
                            qp_type: t,
                            current: tr.from,
                            requested: tr.to,
                        }
                    };
                    assert_eq!(got, Err(want), "{t:?} {tr:?} {}", attr_name(bit));
                    assert!(got.unwrap_err().to_string().contains(attr_name(bit)));
                }
            }
        }
    }

    #[test]
    fn unsupported_attributes_are_refused_even_where_the_table_allows_them() {
        let from = QpState::Rtr;
        let attr = good_attr(from, QpState::Rts);
        let base = QpAttrMask::STATE | transition(QpType::Rc, from, QpState::Rts).unwrap().required;
        let bit = QpAttrMask::ALT_PATH;
        let err = check(QpType::Rc, from, &attr, base | bit).unwrap_err();
        assert_eq!(err, ModifyError::Unsupported { attr: bit });
        assert!(err.to_string().contains("not supported"), "{err}");
        // PATH_MIG_STATE is taken where the table allows it (and means
        // nothing without path migration), as the kernel's rxe takes it
        let got = check(QpType::Rc, from, &attr, base | QpAttrMask::PATH_MIG_STATE);
        assert_eq!(got, Ok(QpState::Rts));
        let err = check(QpType::Rc, from, &attr, base | QpAttrMask::CAP).unwrap_err();
        assert_eq!(
            err,
            ModifyError::Unsupported {
                attr: QpAttrMask::CAP
            }
        );
        assert!(err.to_string().contains("IBV_QP_CAP"), "{err}");
    }

    // --- illegal transitions ----------------------------------------------

    #[test]
    fn illegal_transitions_are_refused() {
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        let cases = [
            (QpType::Rc, Reset, Rts),
            (QpType::Ud, Reset, Rtr),
            (QpType::Rc, Reset, QpState::Err),
            (QpType::Rc, Init, Rts),
            (QpType::Uc, Rtr, Init),
            (QpType::Rc, Rtr, Rtr),
            (QpType::Rc, Rts, Sqe),
            (QpType::Uc, Rts, Sqe),
            (QpType::Rc, Sqe, Rts),
            (QpType::Ud, QpState::Err, Init),
            (QpType::Ud, Sqd, Init),
            (QpType::Rc, Rts, Rtr),
        ];
        for (t, from, to) in cases {
            let err = check(t, from, &good_attr(from, to), QpAttrMask::STATE).unwrap_err();
            assert_eq!(
                err,
                ModifyError::InvalidTransition {
                    qp_type: t,
                    current: from,
                    requested: to
                }
            );
        }
        // And every pair the table lacks, whatever the mask.
        for t in TYPES {
            for from in ALL_STATES {
                for to in ALL_STATES {
                    if transition(t, from, to).is_some() {
                        continue;
                    }
                    let attr = good_attr(from, to);
                    for mask in [QpAttrMask::STATE, QpAttrMask::all()] {
                        assert_eq!(
                            check(t, from, &attr, mask),
                            Err(ModifyError::InvalidTransition {
                                qp_type: t,
                                current: from,
                                requested: to
                            })
                        );
                    }
                }
            }
        }
    }

    // --- attribute-only modify --------------------------------------------

    #[test]
    fn stateless_modify_keeps_the_state_where_allowed() {
        let attr = QpAttr {
            state: QpState::Reset,
            ..good_attr(QpState::Rts, QpState::Rts)
        };
        // RTS: attribute-only modify is RTS->RTS; attr.state is not read.
        let mask = QpAttrMask::ACCESS_FLAGS | QpAttrMask::MIN_RNR_TIMER;
        assert_eq!(
            check(QpType::Rc, QpState::Rts, &attr, mask),
            Ok(QpState::Rts)
        );
        assert_eq!(
            check(QpType::Ud, QpState::Rts, &attr, QpAttrMask::QKEY),
            Ok(QpState::Rts)
        );
        assert_eq!(
            check(QpType::Rc, QpState::Rts, &attr, QpAttrMask::empty()),
            Ok(QpState::Rts)
        );
        assert_eq!(
            check(QpType::Uc, QpState::Init, &attr, QpAttrMask::PKEY_INDEX),
            Ok(QpState::Init)
        );
        assert_eq!(
            check(QpType::Rc, QpState::Sqd, &attr, QpAttrMask::TIMEOUT),
            Ok(QpState::Sqd)
        );
        // RTR has no RTR->RTR.
        let err = check(QpType::Rc, QpState::Rtr, &attr, QpAttrMask::ACCESS_FLAGS).unwrap_err();
        assert_eq!(
            err,
            ModifyError::InvalidTransition {
                qp_type: QpType::Rc,
                current: QpState::Rtr,
                requested: QpState::Rtr
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("RTR->RTR") && msg.contains("IBV_QP_STATE"),
            "{msg}"
        );
        // Not allowed in RTS: the attribute is named.
        assert_eq!(
            check(QpType::Rc, QpState::Rts, &attr, QpAttrMask::TIMEOUT),
            Err(ModifyError::UnexpectedAttribute {
                attr: QpAttrMask::TIMEOUT,
                qp_type: QpType::Rc,
                current: QpState::Rts,
                requested: QpState::Rts
            })
        );
    }

    // --- CUR_STATE ---------------------------------------------------------

    #[test]
    fn cur_state() {
        let rts = transition(QpType::Rc, QpState::Rtr, QpState::Rts).unwrap();
        let mask = QpAttrMask::STATE | QpAttrMask::CUR_STATE | rts.required;
        let attr = good_attr(QpState::Rtr, QpState::Rts);
        assert_eq!(
            check(QpType::Rc, QpState::Rtr, &attr, mask),
            Ok(QpState::Rts)
        );
        let wrong = QpAttr {
            cur_state: QpState::Init,
            ..attr
        };
        let err = check(QpType::Rc, QpState::Rtr, &wrong, mask).unwrap_err();
        assert_eq!(
            err,
            ModifyError::CurStateMismatch {
                given: QpState::Init,
                actual: QpState::Rtr
            }
        );
        assert_eq!(
            err.to_string(),
            "IBV_QP_CUR_STATE says the QP is in INIT, but it is in RTR"
        );
        // Without CUR_STATE in the mask the field is not read.
        assert_eq!(
            check(
                QpType::Rc,
                QpState::Rtr,
                &wrong,
                mask - QpAttrMask::CUR_STATE
            ),
            Ok(QpState::Rts)
        );
        // CUR_STATE is refused outside RTR/RTS/SQD/SQE, even when correct.
        let init = transition(QpType::Rc, QpState::Reset, QpState::Init).unwrap();
        let attr = good_attr(QpState::Reset, QpState::Init);
        assert_eq!(
            check(
                QpType::Rc,
                QpState::Reset,
                &attr,
                init.required | QpAttrMask::STATE | QpAttrMask::CUR_STATE
            ),
            Err(ModifyError::UnexpectedAttribute {
                attr: QpAttrMask::CUR_STATE,
                qp_type: QpType::Rc,
                current: QpState::Reset,
                requested: QpState::Init
            })
        );
    }

    // --- values -------------------------------------------------------------

    /// Runs `from -> to` on RC with the transition's required mask and `f`
    /// applied to good attributes.
    fn rc_with(
        from: QpState,
        to: QpState,
        f: impl FnOnce(&mut QpAttr),
    ) -> Result<QpState, ModifyError> {
        let tr = transition(QpType::Rc, from, to).unwrap();
        let mut attr = good_attr(from, to);
        f(&mut attr);
        check(QpType::Rc, from, &attr, tr.required | QpAttrMask::STATE)
    }

    fn invalid(attr: QpAttrMask, value: u64, rule: ValueRule) -> Result<QpState, ModifyError> {
        Err(ModifyError::InvalidValue { attr, value, rule })
    }

    #[test]
    fn value_limits_at_the_boundary() {
        use QpState::{Init, Reset, Rtr, Rts};
        let ok = |s| Ok(s);
        // RTR -> RTS: TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC.
        assert_eq!(rc_with(Rtr, Rts, |a| a.timeout = 31), ok(Rts));
        assert_eq!(
            rc_with(Rtr, Rts, |a| a.timeout = 32),
            invalid(QpAttrMask::TIMEOUT, 32, ValueRule::AtMost(31))
        );
        assert_eq!(rc_with(Rtr, Rts, |a| a.retry_cnt = 7), ok(Rts));
        assert_eq!(
            rc_with(Rtr, Rts, |a| a.retry_cnt = 8),
            invalid(QpAttrMask::RETRY_CNT, 8, ValueRule::AtMost(7))
        );
        assert_eq!(rc_with(Rtr, Rts, |a| a.rnr_retry = 7), ok(Rts));
        assert_eq!(
            rc_with(Rtr, Rts, |a| a.rnr_retry = 8),
            invalid(QpAttrMask::RNR_RETRY, 8, ValueRule::AtMost(7))
        );
        assert_eq!(rc_with(Rtr, Rts, |a| a.max_rd_atomic = 16), ok(Rts));
        assert_eq!(rc_with(Rtr, Rts, |a| a.max_rd_atomic = 0), ok(Rts));
        assert_eq!(
            rc_with(Rtr, Rts, |a| a.max_rd_atomic = 17),
            invalid(QpAttrMask::MAX_QP_RD_ATOMIC, 17, ValueRule::AtMost(16))
        );
        // INIT -> RTR: MIN_RNR_TIMER, MAX_DEST_RD_ATOMIC, DEST_QPN, PATH_MTU, AV.
        assert_eq!(rc_with(Init, Rtr, |a| a.min_rnr_timer = 31), ok(Rtr));
        assert_eq!(
            rc_with(Init, Rtr, |a| a.min_rnr_timer = 32),
            invalid(QpAttrMask::MIN_RNR_TIMER, 32, ValueRule::AtMost(31))
        );
        assert_eq!(rc_with(Init, Rtr, |a| a.max_dest_rd_atomic = 8), ok(Rtr));
        assert_eq!(
            rc_with(Init, Rtr, |a| a.max_dest_rd_atomic = 9),
            invalid(QpAttrMask::MAX_DEST_RD_ATOMIC, 9, ValueRule::AtMost(8))
        );
        assert_eq!(rc_with(Init, Rtr, |a| a.dest_qpn = 0xFF_FFFF), ok(Rtr));
        assert_eq!(
            rc_with(Init, Rtr, |a| a.dest_qpn = 0x100_0000),
            invalid(
                QpAttrMask::DEST_QPN,
                0x100_0000,
                ValueRule::AtMost(0xFF_FFFF)
            )
        );
        assert_eq!(rc_with(Init, Rtr, |a| a.path_mtu = Mtu::Mtu4096), ok(Rtr));
        assert_eq!(
            rc_with(Init, Rtr, |a| a.av = None),
            invalid(QpAttrMask::AV, 0, ValueRule::Present)
        );
        // RESET -> INIT: PKEY_INDEX, PORT, ACCESS_FLAGS.
        assert_eq!(rc_with(Reset, Init, |a| a.pkey_index = 0), ok(Init));
        assert_eq!(
            rc_with(Reset, Init, |a| a.pkey_index = 1),
            invalid(QpAttrMask::PKEY_INDEX, 1, ValueRule::LessThan(1))
        );
        assert_eq!(
            rc_with(Reset, Init, |a| a.port = 0),
            invalid(QpAttrMask::PORT, 0, ValueRule::Equals(1))
        );
        assert_eq!(
            rc_with(Reset, Init, |a| a.port = 2),
            invalid(QpAttrMask::PORT, 2, ValueRule::Equals(1))
        );
        assert_eq!(rc_with(Reset, Init, |a| a.access = QP_ACCESS), ok(Init));
        assert_eq!(
            rc_with(Reset, Init, |a| a.access = Access::empty()),
            ok(Init)
        );
        assert_eq!(
            rc_with(Reset, Init, |a| a.access =
                Access::LOCAL_WRITE | Access::MW_BIND),
            invalid(
                QpAttrMask::ACCESS_FLAGS,
                0x11,
                ValueRule::FlagsWithin(0x30F)
            )
        );
        // UC accepts REMOTE_READ / REMOTE_ATOMIC (meaningless, as in the kernel).
        let tr = transition(QpType::Uc, Reset, Init).unwrap();
        let attr = QpAttr {
            access: QP_ACCESS,
            ..good_attr(Reset, Init)
        };
        assert_eq!(
            check(QpType::Uc, Reset, &attr, tr.required | QpAttrMask::STATE),
            ok(Init)
        );
        // The first offending bit (lowest) is reported.
        assert_eq!(
            rc_with(Rtr, Rts, |a| {
                a.timeout = 40;
                a.retry_cnt = 9
            }),
            invalid(QpAttrMask::TIMEOUT, 40, ValueRule::AtMost(31))
        );
        // Values of attributes not in the mask are not read.
        assert_eq!(rc_with(Rtr, Rts, |a| a.min_rnr_timer = 200), ok(Rts));
    }

    #[test]
    fn path_mtu_against_the_port() {
        assert_eq!(check_path_mtu(Mtu::Mtu1024, Mtu::Mtu1024), Ok(()));
        assert_eq!(check_path_mtu(Mtu::Mtu256, Mtu::Mtu1024), Ok(()));
        let err = check_path_mtu(Mtu::Mtu2048, Mtu::Mtu1024).unwrap_err();
        assert_eq!(
            err,
            ModifyError::InvalidValue {
                attr: QpAttrMask::PATH_MTU,
                value: 2048,
                rule: ValueRule::AtMost(1024)
            }
        );
        assert!(err.to_string().contains("IBV_QP_PATH_MTU = 2048"), "{err}");
        // Through check_modify, with the port's MTU as given.
        let tr = transition(QpType::Uc, QpState::Init, QpState::Rtr).unwrap();
        let attr = QpAttr {
            path_mtu: Mtu::Mtu4096,
            ..good_attr(QpState::Init, QpState::Rtr)
        };
        let mask = tr.required | QpAttrMask::STATE;
        let caps = caps();
        assert_eq!(
            check_modify(QpType::Uc, QpState::Init, &attr, mask, &caps, Mtu::Mtu4096),
            Ok(QpState::Rtr)
        );
        assert_eq!(
            check_modify(QpType::Uc, QpState::Init, &attr, mask, &caps, Mtu::Mtu1024),
            Err(ModifyError::InvalidValue {
                attr: QpAttrMask::PATH_MTU,
                value: 4096,
                rule: ValueRule::AtMost(1024)
            })
        );
    }

    // --- messages -----------------------------------------------------------

    #[test]
    fn messages_say_what_is_wrong() {
        let e = ModifyError::MissingAttribute {
            attr: QpAttrMask::TIMEOUT,
            qp_type: QpType::Rc,
            current: QpState::Rtr,
            requested: QpState::Rts,
        };
        let msg = e.to_string();
        assert!(
            msg.starts_with("RTR->RTS on an RC QP requires IBV_QP_TIMEOUT"),
            "{msg}"
        );
        assert!(msg.contains("IBV_QP_MAX_QP_RD_ATOMIC"), "{msg}");

        let e = ModifyError::InvalidTransition {
            qp_type: QpType::Rc,
            current: QpState::Reset,
            requested: QpState::Rts,
        };
        assert_eq!(
            e.to_string(),
            "RESET->RTS is not a legal transition for an RC QP; from RESET an RC QP may go to \
             RESET or INIT"
        );
        let e = ModifyError::InvalidTransition {
            qp_type: QpType::Uc,
            current: QpState::Rts,
            requested: QpState::Sqe,
        };
        assert_eq!(
            e.to_string(),
            "RTS->SQE is not a legal transition for a UC QP; from RTS a UC QP may go to \
             RESET, RTS, SQD or ERR"
        );

        let e = ModifyError::UnexpectedAttribute {
            attr: QpAttrMask::QKEY,
            qp_type: QpType::Rc,
            current: QpState::Reset,
            requested: QpState::Init,
        };
        assert_eq!(
            e.to_string(),
            "IBV_QP_QKEY is not accepted by RESET->INIT on an RC QP (it accepts IBV_QP_STATE | \
             IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT)"
        );
        let e = ModifyError::UnexpectedAttribute {
            attr: QpAttrMask::QKEY,
            qp_type: QpType::Ud,
            current: QpState::Rts,
            requested: QpState::Err,
        };
        assert!(
            e.to_string().ends_with("(it accepts only IBV_QP_STATE)"),
            "{e}"
        );

        let e = ModifyError::InvalidValue {
            attr: QpAttrMask::TIMEOUT,
            value: 32,
            rule: ValueRule::AtMost(31),
        };
        assert!(e
            .to_string()
            .starts_with("IBV_QP_TIMEOUT = 32 is out of range: at most 31"));
        let e = ModifyError::InvalidValue {
            attr: QpAttrMask::ACCESS_FLAGS,
            value: 0x13,
            rule: ValueRule::FlagsWithin(0xF),
        };
        assert!(e.to_string().contains("sets flags 0x10"), "{e}");
        let e = ModifyError::Unsupported {
            attr: QpAttrMask::ALT_PATH,
        };
        assert!(
            e.to_string()
                .starts_with("IBV_QP_ALT_PATH is not supported"),
            "{e}"
        );
    }

    #[test]
    fn attr_names() {
        let mut seen = std::collections::HashSet::new();
        for bit in ALL_ATTRS {
            let name = attr_name(bit);
            assert!(name.starts_with("IBV_QP_"), "{name}");
            assert!(seen.insert(name), "{name} twice");
        }
        assert_eq!(attr_name(QpAttrMask::PATH_MTU), "IBV_QP_PATH_MTU");
        assert_eq!(
            attr_name(QpAttrMask::PATH_MTU | QpAttrMask::CAP),
            "IBV_QP_PATH_MTU"
        );
        assert_eq!(attr_name(QpAttrMask::empty()), "(no attribute)");
        assert_eq!(
            attr_name(QpAttrMask::from_bits_retain(1 << 30)),
            "(unknown QP attribute bit)"
        );
        assert_eq!(
            QpAttrMask::all().bits(),
            (1 << 21) - 1,
            "ALL_ATTRS must list every bit"
        );
    }

    // --- properties ---------------------------------------------------------

    fn qp_type() -> impl Strategy<Value = QpType> {
        prop::sample::select(TYPES.to_vec())
    }

    fn state() -> impl Strategy<Value = QpState> {
        prop::sample::select(ALL_STATES.to_vec())
    }

    fn mtu() -> impl Strategy<Value = Mtu> {
        prop::sample::select(vec![
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ])
    }

    prop_compose! {
        fn any_attr()(
            state in state(),
            cur_state in state(),
            access in any::<u32>(),
            pkey_index in prop_oneof![0u16..3, any::<u16>()],
            port in prop_oneof![Just(1u8), any::<u8>()],
            qkey in any::<u32>(),
            has_av in any::<bool>(),
            path_mtu in mtu(),
            small in prop::array::uniform6(prop_oneof![0u8..40, any::<u8>()]),
            psns in (any::<u32>(), any::<u32>()),
            dest_qpn in prop_oneof![0u32..0x100_0010, any::<u32>()],
            en_sqd_async_notify in any::<bool>(),
        ) -> QpAttr {
            QpAttr {
                state,
                cur_state,
                access: Access::from_bits_retain(access & 0x3F),
                pkey_index,
                port,
                qkey,
                av: has_av.then(|| AddressVector::to(IpAddr::V4(Ipv4Addr::LOCALHOST))),
                path_mtu,
                timeout: small[0],
                retry_cnt: small[1],
                rnr_retry: small[2],
                rq_psn: Psn::new(psns.0),
                sq_psn: Psn::new(psns.1),
                max_rd_atomic: small[3],
                max_dest_rd_atomic: small[4],
                min_rnr_timer: small[5],
                dest_qpn,
                en_sqd_async_notify,
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Never panics; `Ok` only for what the table allows.
        #[test]
        fn ok_implies_the_table_allows_it(
            t in qp_type(),
            current in state(),
            attr in any_attr(),
            mask in prop_oneof![
                any::<u32>(),
                0u32..(1 << 21),
                // Sparse masks hit legal combinations more often.
                (any::<u32>(), any::<u32>()).prop_map(|(a, b)| a & b & ((1 << 21) - 1)),
            ],
            port_mtu in mtu(),
            near in prop::option::of((any::<prop::sample::Index>(), any::<u32>(), 0u32..32)),
        ) {
            let (mut current, mut attr, mut mask) =
                (current, attr, QpAttrMask::from_bits_retain(mask));
            if let Some((pick, subset, flip)) = near {
                // Near a legal modify: a table entry's mask, perhaps with one
                // bit flipped (a missing, extra, unsupported or unknown bit).
                let all: Vec<Transition> = legal_transitions(t).collect();
                let tr = all[pick.index(all.len())];
                current = tr.from;
                attr.state = tr.to;
                if attr.cur_state != current && subset & 1 == 0 {
                    attr.cur_state = current;
                }
                mask = tr.required
                    | (QpAttrMask::from_bits_retain(subset) & tr.optional)
                    | QpAttrMask::STATE;
                if flip < 24 {
                    mask = QpAttrMask::from_bits_retain(mask.bits() ^ (1 << flip));
                }
            }
            let result = check_modify(t, current, &attr, mask, &caps(), port_mtu);
            if let Err(e) = result {
                let _ = e.to_string();
            }
            if let Ok(next) = result {
                let want = if mask.contains(QpAttrMask::STATE) { attr.state } else { current };
                prop_assert_eq!(next, want);
                let tr = transition(t, current, next);
                prop_assert!(tr.is_some());
                let tr = tr.unwrap();
                let accepted = tr.required | tr.optional | QpAttrMask::STATE;
                prop_assert_eq!(mask.bits() & !accepted.bits(), 0);
                prop_assert!(mask.contains(tr.required));
                prop_assert!(!mask.intersects(UNSUPPORTED));
                if mask.contains(QpAttrMask::CUR_STATE) {
                    prop_assert_eq!(attr.cur_state, current);
                }
            }
        }

        /// A legal transition with its required attributes, any subset of its
        /// supported optional ones and in-range values always passes.
        #[test]
        fn legal_masks_with_good_values_pass(
            t in qp_type(),
            pick in any::<prop::sample::Index>(),
            extra in any::<u32>(),
            timeout in 0u8..=31,
            retry in 0u8..=7,
            rnr in 0u8..=7,
            min_rnr in 0u8..=31,
            rd in 0u8..=16,
            dest_rd in 0u8..=8,
            dest_qpn in 0u32..=0xFF_FFFF,
            access in 0u32..=0xF,
        ) {
            let all: Vec<Transition> = legal_transitions(t).collect();
            let tr = all[pick.index(all.len())];
            let optional = QpAttrMask::from_bits_retain(extra) & (tr.optional - UNSUPPORTED);
            let mask = tr.required | optional | QpAttrMask::STATE;
            let attr = QpAttr {
                timeout,
                retry_cnt: retry,
                rnr_retry: rnr,
                min_rnr_timer: min_rnr,
                max_rd_atomic: rd,
                max_dest_rd_atomic: dest_rd,
                dest_qpn,
                access: Access::from_bits_retain(access),
                ..good_attr(tr.from, tr.to)
            };
            prop_assert_eq!(check(t, tr.from, &attr, mask), Ok(tr.to));
        }
    }
}
