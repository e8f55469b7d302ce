//! Volumes made of files: configMap, secret, downwardAPI, projected.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use etcd_lab_common::IoContext;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use k8s_openapi::{ByteString, NamespaceResourceScope};
use kube::api::PostParams;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::{VolumeContext, VolumeError};

/// Files of a volume: relative path -> (contents, mode).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSet {
    pub files: BTreeMap<PathBuf, (Vec<u8>, u32)>,
}

impl FileSet {
    fn add(&mut self, path: &str, data: Vec<u8>, mode: u32) -> Result<(), VolumeError> {
        let rel = PathBuf::from(path);
        if rel.as_os_str().is_empty()
            || rel.components().any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(VolumeError::Invalid {
                volume: path.into(),
                message: "file path must be relative and stay in the volume".into(),
            });
        }
        self.files.insert(rel, (data, mode));
        Ok(())
    }

    /// Writes the files (atomically each) and removes files no longer present.
    pub fn write_to(&self, dir: &Path) -> Result<(), VolumeError> {
        mkdir(dir)?;
        for (rel, (data, mode)) in &self.files {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                mkdir(parent)?;
            }
            let tmp = path.with_extension("lab-tmp");
            std::fs::write(&tmp, data).context(|| format!("write {}", tmp.display()))?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(*mode))
                .context(|| format!("set the mode of {}", tmp.display()))?;
            std::fs::rename(&tmp, &path).context(|| format!("rename to {}", path.display()))?;
        }
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = PathBuf::from(entry.file_name());
                let is_file = entry.file_type().is_ok_and(|t| t.is_file());
                if is_file && !self.files.contains_key(&name) {
                    std::fs::remove_file(entry.path()).ok();
                }
            }
        }
        Ok(())
    }
}

pub(super) fn mkdir(dir: &Path) -> Result<(), VolumeError> {
    std::fs::create_dir_all(dir).context(|| format!("create {}", dir.display()))?;
    Ok(())
}

/// Gives group `gid` ownership and group rw (plus setgid on directories), as the kubelet does for fsGroup.
pub(super) fn apply_fs_group(path: &Path, gid: u32) -> Result<(), VolumeError> {
    let meta = std::fs::symlink_metadata(path).context(|| format!("stat {}", path.display()))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, None, Some(gid))
        .context(|| format!("chown {} to group {gid}", path.display()))?;
    let mode = meta.permissions().mode();
    let extra = if meta.is_dir() { 0o2070 } else { 0o060 };
    std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode((mode | extra) & 0o7777),
    )
    .context(|| format!("set the mode of {}", path.display()))?;
    if meta.is_dir() {
        let entries = std::fs::read_dir(path).context(|| format!("list {}", path.display()))?;
        for entry in entries.flatten() {
            apply_fs_group(&entry.path(), gid)?;
        }
    }
    Ok(())
}

/// The keys of a ConfigMap or Secret, as the files of a volume hold them.
type KeyedData = BTreeMap<String, Vec<u8>>;

fn keyed(
    data: KeyedData,
    items: Option<&Vec<KeyToPath>>,
    mode: u32,
    set: &mut FileSet,
    what: &str,
) -> Result<(), VolumeError> {
    match items {
        Some(items) => {
            for item in items {
                let value = data
                    .get(&item.key)
                    .cloned()
                    .ok_or_else(|| VolumeError::Invalid {
                        volume: what.into(),
                        message: format!("key {:?} not found", item.key),
                    })?;
                set.add(
                    &item.path,
                    value,
                    item.mode.map(|m| m as u32).unwrap_or(mode),
                )?;
            }
        }
        None => {
            for (k, v) in data {
                set.add(&k, v, mode)?;
            }
        }
    }
    Ok(())
}

/// The keys of the ConfigMap or Secret `name` a volume's files come from,
/// read with `keys`. A missing object is `None` when the volume marks it
/// optional, and not ready otherwise.
async fn source_keys<K>(
    ctx: &VolumeContext<'_>,
    ns: &str,
    name: &str,
    optional: bool,
    keys: fn(K) -> KeyedData,
) -> Result<Option<KeyedData>, VolumeError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    match Api::<K>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?
    {
        Some(object) => Ok(Some(keys(object))),
        None if optional => Ok(None),
        None => Err(VolumeError::NotReady(format!(
            "{} {name:?} not found",
            K::kind(&()).to_lowercase()
        ))),
    }
}

fn text_keys(data: Option<BTreeMap<String, String>>) -> impl Iterator<Item = (String, Vec<u8>)> {
    data.into_iter().flatten().map(|(k, v)| (k, v.into_bytes()))
}

fn binary_keys(
    data: Option<BTreeMap<String, ByteString>>,
) -> impl Iterator<Item = (String, Vec<u8>)> {
    data.into_iter().flatten().map(|(k, v)| (k, v.0))
}

/// A ConfigMap's `data` and `binaryData` (which wins on a shared key).
fn config_map_keys(config_map: ConfigMap) -> KeyedData {
    text_keys(config_map.data)
        .chain(binary_keys(config_map.binary_data))
        .collect()
}

/// A Secret's `data` and `stringData` (which wins on a shared key).
fn secret_keys(secret: Secret) -> KeyedData {
    binary_keys(secret.data)
        .chain(text_keys(secret.string_data))
        .collect()
}

fn downward_file(pod: &Pod, file: &DownwardAPIVolumeFile) -> Option<Vec<u8>> {
    let path = &file.field_ref.as_ref()?.field_path;
    let meta = &pod.metadata;
    let map_text = |m: Option<&BTreeMap<String, String>>| {
        m.map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v:?}\n"))
                .collect::<String>()
        })
        .unwrap_or_default()
    };
    Some(
        match path.as_str() {
            "metadata.name" => meta.name.clone().unwrap_or_default(),
            "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
            "metadata.uid" => meta.uid.clone().unwrap_or_default(),
            "metadata.labels" => map_text(meta.labels.as_ref()),
            "metadata.annotations" => map_text(meta.annotations.as_ref()),
            _ => return None,
        }
        .into_bytes(),
    )
}

/// Adds the downwardAPI `items` whose field this node serves; `mode` unless
/// an item sets its own.
fn downward_files(
    pod: &Pod,
    items: Option<&[DownwardAPIVolumeFile]>,
    mode: u32,
    set: &mut FileSet,
) -> Result<(), VolumeError> {
    for item in items.into_iter().flatten() {
        if let Some(data) = downward_file(pod, item) {
            set.add(
                &item.path,
                data,
                item.mode.map(|m| m as u32).unwrap_or(mode),
            )?;
        }
    }
    Ok(())
}

/// Builds the files of a configMap/secret/downwardAPI/projected volume.
pub(super) async fn file_volume(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    volume: &Volume,
) -> Result<FileSet, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut set = FileSet::default();
    if let Some(cm) = &volume.config_map {
        let mode = cm.default_mode.map(|m| m as u32).unwrap_or(0o644);
        let optional = cm.optional == Some(true);
        if let Some(data) = source_keys(ctx, ns, &cm.name, optional, config_map_keys).await? {
            keyed(data, cm.items.as_ref(), mode, &mut set, &volume.name)?;
        }
    } else if let Some(s) = &volume.secret {
        let mode = s.default_mode.map(|m| m as u32).unwrap_or(0o644);
        let name = s.secret_name.clone().unwrap_or_default();
        let optional = s.optional == Some(true);
        if let Some(data) = source_keys(ctx, ns, &name, optional, secret_keys).await? {
            keyed(data, s.items.as_ref(), mode, &mut set, &volume.name)?;
        }
    } else if let Some(d) = &volume.downward_api {
        let mode = d.default_mode.map(|m| m as u32).unwrap_or(0o644);
        downward_files(pod, d.items.as_deref(), mode, &mut set)?;
    } else if let Some(p) = &volume.projected {
        let mode = p.default_mode.map(|m| m as u32).unwrap_or(0o644);
        for source in p.sources.iter().flatten() {
            if let Some(cm) = &source.config_map {
                let optional = cm.optional == Some(true);
                // kube-root-ca.crt comes from the lab CA file until the configmap is published.
                let root_ca = cm.name == "kube-root-ca.crt" && !optional;
                let fetched =
                    source_keys(ctx, ns, &cm.name, optional || root_ca, config_map_keys).await?;
                let data = match fetched {
                    None if root_ca => Some(BTreeMap::from([(
                        "ca.crt".to_owned(),
                        std::fs::read(ctx.ca_cert)
                            .context(|| format!("read {}", ctx.ca_cert.display()))?,
                    )])),
                    fetched => fetched,
                };
                if let Some(data) = data {
                    keyed(data, cm.items.as_ref(), mode, &mut set, &volume.name)?;
                }
            }
            if let Some(s) = &source.secret
                && let Some(data) =
                    source_keys(ctx, ns, &s.name, s.optional == Some(true), secret_keys).await?
            {
                keyed(data, s.items.as_ref(), mode, &mut set, &volume.name)?;
            }
            if let Some(d) = &source.downward_api {
                downward_files(pod, d.items.as_deref(), mode, &mut set)?;
            }
            if let Some(t) = &source.service_account_token {
                let token =
                    request_token(ctx, pod, t.audience.clone(), t.expiration_seconds).await?;
                set.add(
                    &t.path,
                    token.into_bytes(),
                    if mode == 0o644 { 0o600 | 0o044 } else { mode },
                )?;
            }
        }
    } else {
        return Err(VolumeError::Invalid {
            volume: volume.name.clone(),
            message: "unsupported volume type".into(),
        });
    }
    Ok(set)
}

async fn request_token(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    audience: Option<String>,
    expiration_seconds: Option<i64>,
) -> Result<String, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: audience.map(|a| vec![a]),
            expiration_seconds: Some(expiration_seconds.unwrap_or(3607)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let response = Api::<ServiceAccount>::namespaced(ctx.client.clone(), ns)
        .create_token_request(&sa, &PostParams::default(), &request)
        .await?;
    response
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| VolumeError::NotReady(format!("no token returned for service account {sa}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_files_and_removes_stale_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut set = FileSet::default();
        set.add("a", b"1".to_vec(), 0o600).expect("add");
        set.add("sub/b", b"2".to_vec(), 0o644).expect("add");
        std::fs::write(dir.path().join("stale"), "x").expect("stale");
        set.write_to(dir.path()).expect("write");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a")).expect("a"),
            "1"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("sub/b")).expect("b"),
            "2"
        );
        assert!(!dir.path().join("stale").exists());
        let mode = std::fs::metadata(dir.path().join("a"))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(set.add("../x", vec![], 0o644).is_err());
    }

    #[test]
    fn binary_config_map_keys_and_secret_string_keys_win() {
        fn object<K: DeserializeOwned>(json: serde_json::Value) -> K {
            serde_json::from_value(json).expect("object")
        }
        let keys =
            |a: &str, b: &str| KeyedData::from([("a".into(), a.into()), ("b".into(), b.into())]);
        let config_map = object(serde_json::json!({
            "data": {"a": "text", "b": "text"},
            "binaryData": {"b": "YmluYXJ5"}
        }));
        assert_eq!(config_map_keys(config_map), keys("text", "binary"));
        let secret = object(serde_json::json!({
            "data": {"a": "YmluYXJ5", "b": "YmluYXJ5"},
            "stringData": {"b": "text"}
        }));
        assert_eq!(secret_keys(secret), keys("binary", "text"));
    }
}
