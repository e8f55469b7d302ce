//! A container's environment, built like the kubelet does.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::container::DEFAULT_PATH;

/// Data of ConfigMaps and Secrets of the pod's namespace, by name.
#[derive(Debug, Default, Clone)]
pub struct KeyedObjects {
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
}

/// What the environment is built from.
#[derive(Debug, Clone)]
pub struct EnvInputs<'a> {
    pub pod: &'a Pod,
    pub pod_ip: Ipv4Addr,
    pub host_ip: Ipv4Addr,
    pub hostname: &'a str,
    /// ClusterIP and port of `default/kubernetes`.
    pub kubernetes_service: Option<(String, i32)>,
    pub objects: &'a KeyedObjects,
}

/// Why an environment cannot be built (the container waits with
/// `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("configmap {0:?} not found")]
    ConfigMap(String),
    #[error("secret {0:?} not found")]
    Secret(String),
    #[error("couldn't find key {key} in {kind} {name}")]
    Key {
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("unsupported fieldRef {0:?}")]
    FieldRef(String),
}

/// ConfigMaps and Secrets referenced by the containers' env/envFrom.
pub fn referenced_objects(containers: &[&Container]) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for c in containers {
        for e in c.env.iter().flatten() {
            if let Some(from) = &e.value_from {
                if let Some(r) = &from.config_map_key_ref {
                    cms.insert(r.name.clone());
                }
                if let Some(r) = &from.secret_key_ref {
                    secrets.insert(r.name.clone());
                }
            }
        }
        for f in c.env_from.iter().flatten() {
            if let Some(r) = &f.config_map_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &f.secret_ref {
                secrets.insert(r.name.clone());
            }
        }
    }
    (cms, secrets)
}

/// Builds the environment of `container` in order: PATH, HOSTNAME,
/// KUBERNETES_* , envFrom, env (with `$(VAR)` expansion).
pub fn container_env(
    container: &Container,
    inputs: &EnvInputs<'_>,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOSTNAME".into(), inputs.hostname.into()),
    ];
    if let Some((ip, port)) = &inputs.kubernetes_service {
        env.extend([
            ("KUBERNETES_SERVICE_HOST".into(), ip.clone()),
            ("KUBERNETES_SERVICE_PORT".into(), port.to_string()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.to_string()),
            ("KUBERNETES_PORT".into(), format!("tcp://{ip}:{port}")),
            (
                format!("KUBERNETES_PORT_{port}_TCP"),
                format!("tcp://{ip}:{port}"),
            ),
            (format!("KUBERNETES_PORT_{port}_TCP_PROTO"), "tcp".into()),
            (format!("KUBERNETES_PORT_{port}_TCP_PORT"), port.to_string()),
            (format!("KUBERNETES_PORT_{port}_TCP_ADDR"), ip.clone()),
        ]);
    }
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            match inputs.objects.config_maps.get(&r.name) {
                Some(d) => Some(d),
                None if r.optional == Some(true) => None,
                None => return Err(EnvError::ConfigMap(r.name.clone())),
            }
        } else if let Some(r) = &from.secret_ref {
            match inputs.objects.secrets.get(&r.name) {
                Some(d) => Some(d),
                None if r.optional == Some(true) => None,
                None => return Err(EnvError::Secret(r.name.clone())),
            }
        } else {
            None
        };
        for (k, v) in data.into_iter().flatten() {
            set(&mut env, format!("{prefix}{k}"), v.clone());
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(from) = &var.value_from {
            if let Some(field) = &from.field_ref {
                Some(field_value(&field.field_path, inputs)?)
            } else if let Some(r) = &from.config_map_key_ref {
                lookup(
                    &inputs.objects.config_maps,
                    "configmap",
                    &r.name,
                    &r.key,
                    r.optional,
                )?
            } else if let Some(r) = &from.secret_key_ref {
                lookup(
                    &inputs.objects.secrets,
                    "secret",
                    &r.name,
                    &r.key,
                    r.optional,
                )?
            } else if from.resource_field_ref.is_some() {
                Some("0".into())
            } else {
                None
            }
        } else {
            let current: BTreeMap<String, String> = env.iter().cloned().collect();
            Some(expand(var.value.as_deref().unwrap_or(""), &current))
        };
        if let Some(v) = value {
            set(&mut env, var.name.clone(), v);
        }
    }
    Ok(env)
}

fn set(env: &mut Vec<(String, String)>, key: String, value: String) {
    if let Some(slot) = env.iter_mut().find(|(k, _)| *k == key) {
        slot.1 = value;
    } else {
        env.push((key, value));
    }
}

fn lookup(
    objects: &BTreeMap<String, BTreeMap<String, String>>,
    kind: &'static str,
    name: &str,
    key: &str,
    optional: Option<bool>,
) -> Result<Option<String>, EnvError> {
    let optional = optional == Some(true);
    match objects.get(name) {
        None if optional => Ok(None),
        None if kind == "secret" => Err(EnvError::Secret(name.into())),
        None => Err(EnvError::ConfigMap(name.into())),
        Some(data) => match data.get(key) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(EnvError::Key {
                kind,
                name: name.into(),
                key: key.into(),
            }),
        },
    }
}

fn field_value(path: &str, inputs: &EnvInputs<'_>) -> Result<String, EnvError> {
    let meta = &inputs.pod.metadata;
    let spec = inputs.pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "status.podIP" | "status.podIPs" => inputs.pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => inputs.host_ip.to_string(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        other => {
            if let Some(key) = map_key(other, "metadata.labels") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(&key))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(key) = map_key(other, "metadata.annotations") {
                meta.annotations
                    .as_ref()
                    .and_then(|l| l.get(&key))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(EnvError::FieldRef(other.into()));
            }
        }
    })
}

/// `metadata.labels['key']` -> `key`.
fn map_key(path: &str, prefix: &str) -> Option<String> {
    let rest = path.strip_prefix(prefix)?;
    let inner = rest.strip_prefix("['")?.strip_suffix("']")?;
    Some(inner.to_owned())
}

/// Kubernetes `$(VAR)` expansion: known variables are replaced, unknown
/// references are kept as written, `$$` escapes a `$`.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec};

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn expands_references_like_kubernetes() {
        let vars = BTreeMap::from([("A".to_owned(), "x".to_owned())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
    }

    #[test]
    fn field_refs_and_service_variables() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("e-0".into());
        pod.metadata.namespace = Some("ns".into());
        pod.spec = Some(PodSpec {
            node_name: Some("n1".into()),
            ..Default::default()
        });
        let container = Container {
            name: "etcd".into(),
            env: Some(vec![
                field("POD_NAME", "metadata.name"),
                field("POD_NS", "metadata.namespace"),
                field("POD_IP", "status.podIP"),
                field("NODE", "spec.nodeName"),
                EnvVar {
                    name: "URL".into(),
                    value: Some("http://$(POD_IP):2379".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let objects = KeyedObjects::default();
        let inputs = EnvInputs {
            pod: &pod,
            pod_ip: Ipv4Addr::new(10, 244, 1, 10),
            host_ip: Ipv4Addr::new(10, 244, 1, 2),
            hostname: "e-0",
            kubernetes_service: Some(("10.96.0.1".into(), 443)),
            objects: &objects,
        };
        let env: BTreeMap<_, _> = container_env(&container, &inputs)
            .expect("env")
            .into_iter()
            .collect();
        assert_eq!(env["POD_NAME"], "e-0");
        assert_eq!(env["POD_NS"], "ns");
        assert_eq!(env["NODE"], "n1");
        assert_eq!(env["URL"], "http://10.244.1.10:2379");
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
    }
}
