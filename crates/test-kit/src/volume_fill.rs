//! A full disk for a test: the volume bound to a claim filled from outside
//! until only `leave_bytes` are available to non-root writers, and emptied
//! again (see [`etcd_lab::disk_full`]). Works whether or not a pod has the
//! volume mounted.

use etcd_lab::Lab;
use etcd_lab::disk_full::{Filled, Unfilled};

use crate::TestResult;

/// Fills the volume of `namespace/claim` until `leave_bytes` (rounded down
/// to whole blocks) are available to non-root writers; `0` makes their
/// next write that needs a block fail with `ENOSPC`.
pub async fn fill_volume(
    lab: &Lab,
    namespace: &str,
    claim: &str,
    leave_bytes: u64,
) -> TestResult<Filled> {
    Ok(lab.volume_fill(namespace, claim, leave_bytes).await?)
}

/// Removes what [`fill_volume`] put in the volume of `namespace/claim`.
pub async fn unfill_volume(lab: &Lab, namespace: &str, claim: &str) -> TestResult<Unfilled> {
    Ok(lab.volume_unfill(namespace, claim).await?)
}
