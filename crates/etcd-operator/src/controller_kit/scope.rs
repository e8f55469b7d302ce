//! What a controller watches: one namespace, or all of them.
//!
//! The kinds a controller reconciles are watched untyped
//! ([`untyped`]): a typed list or watch fails as a whole when one object
//! does not decode (a newer CRD version, a field of another type), and then
//! no object of that kind would be reconciled at all. Each pass decodes its
//! own object ([`super::unreadable`]).

use k8s_openapi::NamespaceResourceScope;
use kube::api::{ApiResource, DynamicObject};
use kube::{Api, Client, Resource};

/// Objects of kind `K` in `namespace`, or in every namespace when `None`.
pub fn typed<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// Objects of `resource`, untyped, in `namespace` or in every namespace
/// when `None`: one object that does not decode cannot fail the list or
/// watch of the others.
pub fn untyped(
    client: &Client,
    namespace: Option<&str>,
    resource: &ApiResource,
) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    }
}
