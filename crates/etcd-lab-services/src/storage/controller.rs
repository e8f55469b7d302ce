//! How the storage controllers run: a kube-runtime `Controller` over every
//! object of one kind, with one retry rule for failed passes.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::{Context, StorageError};

/// Reconciles every object of `K` in all namespaces until the watch ends.
/// A failed pass is retried after `retry_after`; a lost race with another
/// writer only shows in the debug log, any other failure goes to `warn`.
/// `name` tells the controllers apart in the log.
pub(super) async fn run<K, R, F>(
    ctx: Arc<Context>,
    name: &'static str,
    reconcile: R,
    retry_after: Duration,
    warn: fn(&K, &StorageError),
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    R: FnMut(Arc<K>, Arc<Context>) -> F,
    F: Future<Output = Result<Action, StorageError>> + Send + 'static,
{
    let objects: Api<K> = Api::all(ctx.client.clone());
    let error_policy = move |object: Arc<K>, error: &StorageError, _: Arc<Context>| {
        if error.is_conflict() {
            tracing::debug!("conflict, retrying: {error}");
        } else {
            warn(&object, error);
        }
        Action::requeue(retry_after)
    };
    Controller::new(objects, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!("{name}: {e}");
            }
        })
        .await;
}
