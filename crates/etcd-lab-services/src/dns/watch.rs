//! Keeps the record table in line with Services, EndpointSlices and Pods.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tokio::sync::{Notify, watch};

use super::records::{RecordTable, build_table};
use crate::informer::{rebuild_on_change, reflect};

/// How long a burst of changes may last before the table is rebuilt.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Rebuilds the table after changes, forever.
pub async fn run(client: kube::Client, domain: String, sender: watch::Sender<Arc<RecordTable>>) {
    let changed = Arc::new(Notify::new());
    let (services, services_driver) = reflect(Api::<Service>::all(client.clone()), changed.clone());
    let (slices, slices_driver) =
        reflect(Api::<EndpointSlice>::all(client.clone()), changed.clone());
    let (pods, pods_driver) = reflect(Api::<Pod>::all(client), changed.clone());
    let rebuild = async {
        // A table built from a partial list would answer NXDOMAIN for names
        // that exist: wait for the three initial lists.
        let ready = futures::future::join3(
            services.wait_until_ready(),
            slices.wait_until_ready(),
            pods.wait_until_ready(),
        );
        if let (Ok(()), Ok(()), Ok(())) = ready.await {
            changed.notify_one();
            rebuild_on_change(&changed, DEBOUNCE, || {
                let services = services.state();
                let slices = slices.state();
                let pods = pods.state();
                let table = build_table(
                    &domain,
                    &services.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                    &slices.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                    &pods.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                );
                let count = table.record_count();
                sender.send_if_modified(|current| {
                    if **current == table {
                        return false;
                    }
                    tracing::debug!(names = count, "dns: table rebuilt");
                    *current = Arc::new(table);
                    true
                });
            })
            .await;
        }
    };
    tokio::join!(services_driver, slices_driver, pods_driver, rebuild);
}
