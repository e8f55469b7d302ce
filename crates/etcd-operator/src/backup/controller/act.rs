//! The act both backup controllers share: take a full backup of a cluster
//! into its destination, after reading what it needs ([`super::observe`]),
//! recording the object it is taken for as its writer.

use super::Context;
use super::observe;
use crate::api::BackupDestination;
use crate::backup::{BackupError, BackupStore, BackupWriter, TakenBackup, take_backup};

/// Reads the cluster, the destination's Secrets and the member endpoints,
/// then takes a backup written by `writer`. Returns it with the store it
/// went to.
pub(super) async fn back_up(
    ctx: &Context,
    writer: BackupWriter,
    cluster: &str,
    destination: &BackupDestination,
) -> Result<(TakenBackup, BackupStore), BackupError> {
    let namespace = writer.namespace.clone();
    let namespace = namespace.as_str();
    observe::cluster(&ctx.client, namespace, cluster).await?;
    let secrets =
        observe::destination_secrets(&ctx.client, namespace, destination, &ctx.store_settings)
            .await?;
    let store = secrets.open(destination, namespace, cluster)?;
    let endpoints = observe::member_endpoints(&ctx.client, namespace, cluster).await?;
    let options = ctx.options.written_by(writer);
    let taken = take_backup(&store, &endpoints, namespace, cluster, &options).await?;
    Ok((taken, store))
}
