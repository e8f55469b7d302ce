//! The act both backup controllers share: take a full backup of a cluster
//! into its destination, after reading what it needs ([`super::observe`]).

use super::Context;
use super::observe;
use crate::api::BackupDestination;
use crate::backup::{BackupError, BackupStore, TakenBackup, take_backup};

/// Reads the cluster, the destination's Secrets and the member endpoints,
/// then takes a backup. Returns it with the store it went to.
pub(super) async fn back_up(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    destination: &BackupDestination,
) -> Result<(TakenBackup, BackupStore), BackupError> {
    observe::cluster(&ctx.client, namespace, cluster).await?;
    let secrets = observe::destination_secrets(&ctx.client, namespace, destination).await?;
    let store = secrets.open(destination, namespace, cluster)?;
    let endpoints = observe::member_endpoints(&ctx.client, namespace, cluster).await?;
    let taken = take_backup(&store, &endpoints, namespace, cluster, &ctx.options).await?;
    Ok((taken, store))
}
