//! The steps of a CA rotation, as status records them (what each step
//! does: the operator's `tls::rotation`).

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One step of a CA rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CaRotationStep {
    /// A new CA trusted beside the current one, signing nothing yet.
    TrustNewCa,
    /// The new CA signs every certificate; the old one is still trusted.
    SignWithNewCa,
    /// The old CA is no longer trusted.
    RetireOldCa,
}

impl CaRotationStep {
    /// The step in words, for status and Events.
    pub fn describe(self) -> &'static str {
        match self {
            Self::TrustNewCa => "trusting a new CA beside the current one",
            Self::SignWithNewCa => "issuing every certificate from the new CA",
            Self::RetireOldCa => "no longer trusting the old CA",
        }
    }
}

impl fmt::Display for CaRotationStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::TrustNewCa => "TrustNewCa",
            Self::SignWithNewCa => "SignWithNewCa",
            Self::RetireOldCa => "RetireOldCa",
        };
        f.write_str(name)
    }
}
