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
    let object = observe::cluster(&ctx.client, namespace, cluster).await?;
    let tls =
        observe::cluster_tls(&ctx.client, &object, &ctx.store_settings.cluster_domain).await?;
    let secrets =
        observe::destination_secrets(&ctx.client, namespace, destination, &ctx.store_settings)
            .await?;
    let store = secrets.open(destination, namespace, cluster)?;
    let scheme = crate::etcd::scheme(tls.as_deref());
    let endpoints = observe::member_endpoints(&ctx.client, namespace, cluster, scheme).await?;
    let mut options = ctx.options.written_by(writer);
    options.settings.tls = tls;
    let taken = take_backup(&store, &endpoints, namespace, cluster, &options).await?;
    Ok((taken, store))
}
