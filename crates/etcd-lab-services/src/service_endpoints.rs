//! Which Services have endpoints and which EndpointSlices belong to them,
//! read the same way by cluster DNS and the service proxy (pure).

use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Label of an EndpointSlice naming its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// A Service that leads to endpoints: named, in a namespace, with a spec,
/// and not of type ExternalName (a CNAME, with neither a ClusterIP nor
/// endpoints).
#[derive(Clone, Copy, Debug)]
pub struct RoutedService<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub spec: &'a ServiceSpec,
}

impl<'a> RoutedService<'a> {
    /// `None` for a Service without endpoints of its own.
    pub fn of(service: &'a Service) -> Option<Self> {
        let (Some(name), Some(namespace), Some(spec)) = (
            service.metadata.name.as_deref(),
            service.metadata.namespace.as_deref(),
            service.spec.as_ref(),
        ) else {
            return None;
        };
        (spec.type_.as_deref() != Some("ExternalName")).then_some(Self {
            name,
            namespace,
            spec,
        })
    }

    /// Whether `slice` holds IPv4 endpoints of this Service.
    pub fn owns_ipv4_slice(&self, slice: &EndpointSlice) -> bool {
        slice.metadata.namespace.as_deref() == Some(self.namespace)
            && slice.address_type == "IPv4"
            && slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .is_some_and(|s| s == self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<K: serde::de::DeserializeOwned>(json: serde_json::Value) -> K {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn external_name_services_have_no_endpoints() {
        let external: Service = object(serde_json::json!({
            "metadata": {"name": "db", "namespace": "app"},
            "spec": {"type": "ExternalName", "externalName": "db.example.com"}
        }));
        assert!(RoutedService::of(&external).is_none());
    }

    #[test]
    fn a_service_owns_the_ipv4_slices_labelled_with_its_name_in_its_namespace() {
        let service: Service = object(serde_json::json!({
            "metadata": {"name": "etcd", "namespace": "db"},
            "spec": {"clusterIP": "None"}
        }));
        let service = RoutedService::of(&service).unwrap();
        let slice = |namespace: &str, label: &str, address_type: &str| -> EndpointSlice {
            object(serde_json::json!({
                "metadata": {"name": "s", "namespace": namespace, "labels": {SERVICE_NAME_LABEL: label}},
                "addressType": address_type,
                "endpoints": []
            }))
        };
        assert!(service.owns_ipv4_slice(&slice("db", "etcd", "IPv4")));
        assert!(!service.owns_ipv4_slice(&slice("other", "etcd", "IPv4")));
        assert!(!service.owns_ipv4_slice(&slice("db", "etcd-client", "IPv4")));
        assert!(!service.owns_ipv4_slice(&slice("db", "etcd", "IPv6")));
    }
}
