//! Where the clients find the members: the client URLs of the ready
//! member Pods, remembered for while the API server is away.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::sync::Mutex;

/// The member Pods' client URLs, refreshed from the API when it answers.
#[derive(Clone)]
pub struct Endpoints {
    pods: Api<Pod>,
    last: Arc<Mutex<Vec<String>>>,
}

impl Endpoints {
    /// Endpoints of the member Pods `pods` lists.
    pub fn new(pods: Api<Pod>) -> Self {
        Self {
            pods,
            last: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The ready members' URLs now, or the last known ones while the API
    /// server does not answer or no member is ready.
    pub async fn current(&self) -> Vec<String> {
        let fresh = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            test_kit::writer::ready_endpoints(&self.pods),
        )
        .await;
        let mut last = self.last.lock().await;
        if let Ok(Ok(urls)) = fresh
            && !urls.is_empty()
        {
            *last = urls;
        }
        last.clone()
    }
}
