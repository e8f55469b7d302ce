//! Shared watch plumbing: reflectors that keep an in-memory copy of a kind
//! and wake a rebuild when anything changes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

/// A store of all objects of `K` and the future that keeps it current; the
/// future notifies `changed` after every watch event.
pub fn reflect<K>(api: Api<K>, changed: Arc<Notify>) -> (Store<K>, impl Future<Output = ()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let driver = async move {
        watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(|event| {
                if let Err(e) = &event {
                    tracing::debug!("watch {}: {e}", K::kind(&()));
                }
                changed.notify_one();
                async {}
            })
            .await;
    };
    (store, driver)
}

/// Calls `rebuild` after every burst of changes, at most once per
/// `debounce`, forever.
pub async fn rebuild_on_change(changed: &Notify, debounce: Duration, mut rebuild: impl FnMut()) {
    loop {
        changed.notified().await;
        tokio::time::sleep(debounce).await;
        rebuild();
    }
}
