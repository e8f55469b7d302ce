//! The `MajorityDataLost` condition as a person reads it: which survivors
//! keep their volumes but cannot be read, which survivor holds the newest
//! data at which revision, and the approval it asks for
//! (`spec.recovery: {approvedIncarnation, approvedSurvivor,
//! approvedRevision}`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::TestResult;
use crate::conditions::condition_true;
use crate::e2e::Harness;

/// The survivor the condition names as the newest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewestSurvivor {
    pub name: String,
    pub revision: i64,
    pub raft_index: u64,
}

/// The approval the condition asks a person to set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub incarnation: String,
    pub survivor: String,
    pub revision: i64,
}

impl Approval {
    /// The `spec.recovery` fields of this approval.
    pub fn recovery(&self) -> Value {
        json!({
            "approvedIncarnation": self.incarnation,
            "approvedSurvivor": self.survivor,
            "approvedRevision": self.revision,
        })
    }
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let rest = &text[from..];
    Some(&rest[..rest.find(end)?])
}

/// The survivors named as unreadable ("survivors X, Y keep their volumes
/// but cannot be read"), if the message says so.
pub fn unreadable_survivors(message: &str) -> Option<Vec<String>> {
    let anchor = " keep their volumes but cannot be read";
    let head = &message[..message.find(anchor)?];
    let list = &head[head.rfind("survivors ")? + "survivors ".len()..];
    Some(list.split(", ").map(str::to_owned).collect())
}

/// "newest survivor X at revision N (raft index I)", if the message says so.
pub fn newest_survivor(message: &str) -> Option<NewestSurvivor> {
    let name = between(message, "newest survivor ", " at revision ")?;
    let revision = between(message, &format!("{name} at revision "), " (raft index ")?;
    let raft_index = between(
        message,
        &format!("at revision {revision} (raft index "),
        ")",
    )?;
    Some(NewestSurvivor {
        name: name.to_owned(),
        revision: revision.parse().ok()?,
        raft_index: raft_index.parse().ok()?,
    })
}

/// "set spec.recovery: {approvedIncarnation: T, approvedSurvivor: S,
/// approvedRevision: N}", if the message asks for it.
pub fn approval(message: &str) -> Option<Approval> {
    let fields = between(message, "set spec.recovery: {", "}")?;
    let incarnation = between(fields, "approvedIncarnation: ", ", ")?;
    let survivor = between(fields, "approvedSurvivor: ", ", ")?;
    let revision = fields.split("approvedRevision: ").nth(1)?;
    Some(Approval {
        incarnation: incarnation.to_owned(),
        survivor: survivor.to_owned(),
        revision: revision.trim().parse().ok()?,
    })
}

impl Harness {
    /// Checks that `approval` names the incarnation (cluster token) in
    /// cluster `name`'s status.
    pub async fn check_approved_incarnation(&self, name: &str, approval: &Approval) -> TestResult {
        let token = self
            .status(name)
            .await?
            .cluster_token
            .ok_or("no cluster token")?;
        if approval.incarnation != token {
            return Err(format!(
                "the approval names incarnation {}, status {token}",
                approval.incarnation
            )
            .into());
        }
        Ok(())
    }

    /// The message of cluster `name`'s `MajorityDataLost` condition while it
    /// is True.
    pub async fn majority_data_lost(&self, name: &str) -> TestResult<Option<String>> {
        let status = self.status(name).await?;
        if !condition_true(&status, "MajorityDataLost") {
            return Ok(None);
        }
        Ok(status
            .conditions
            .iter()
            .find(|c| c.type_ == "MajorityDataLost")
            .map(|c| c.message.clone()))
    }

    /// Waits until cluster `name`'s `MajorityDataLost` condition is True
    /// with a message that `accept` takes; returns the message.
    pub async fn wait_majority_data_lost(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        accept: impl Fn(&str) -> bool,
    ) -> TestResult<String> {
        let deadline = std::time::Instant::now() + timeout;
        let mut last = None;
        loop {
            match self.majority_data_lost(name).await {
                Ok(Some(message)) if accept(&message) => return Ok(message),
                Ok(Some(message)) => {
                    if last.as_ref() != Some(&message) {
                        eprintln!("MajorityDataLost (not yet {what}): {message}");
                    }
                    last = Some(message);
                }
                Ok(None) => {}
                Err(error) => eprintln!("status not read: {error}"),
            }
            if std::time::Instant::now() > deadline {
                let status = self.status(name).await?;
                return Err(format!(
                    "timed out waiting for {what}; conditions: {:#?}",
                    status.conditions
                )
                .into());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
