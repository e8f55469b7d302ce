//! Volumes made of files: configMap, secret, downwardAPI, projected.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::Api;
use kube::api::PostParams;

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
            std::fs::write(&tmp, data).map_err(|e| io(&tmp, e))?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(*mode))
                .map_err(|e| io(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
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
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))
}

fn io(path: &Path, source: std::io::Error) -> VolumeError {
    VolumeError::Io {
        context: path.display().to_string(),
        source,
    }
}

/// Gives group `gid` ownership and group rw (plus setgid on directories), as the kubelet does for fsGroup.
pub(super) fn apply_fs_group(path: &Path, gid: u32) -> Result<(), VolumeError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| io(path, e))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, None, Some(gid)).map_err(|e| io(path, e))?;
    let mode = meta.permissions().mode();
    let extra = if meta.is_dir() { 0o2070 } else { 0o060 };
    std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode((mode | extra) & 0o7777),
    )
    .map_err(|e| io(path, e))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(|e| io(path, e))?.flatten() {
            apply_fs_group(&entry.path(), gid)?;
        }
    }
    Ok(())
}

fn keyed(
    data: BTreeMap<String, Vec<u8>>,
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

async fn config_map_data(
    ctx: &VolumeContext<'_>,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, VolumeError> {
    match Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?
    {
        Some(cm) => {
            let mut out: BTreeMap<String, Vec<u8>> = cm
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            out.extend(
                cm.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            );
            Ok(Some(out))
        }
        None if optional => Ok(None),
        None => Err(VolumeError::NotReady(format!(
            "configmap {name:?} not found"
        ))),
    }
}

async fn secret_data(
    ctx: &VolumeContext<'_>,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, VolumeError> {
    match Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?
    {
        Some(s) => {
            let mut out: BTreeMap<String, Vec<u8>> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            out.extend(
                s.string_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes())),
            );
            Ok(Some(out))
        }
        None if optional => Ok(None),
        None => Err(VolumeError::NotReady(format!("secret {name:?} not found"))),
    }
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
        if let Some(data) = config_map_data(ctx, ns, &cm.name, cm.optional == Some(true)).await? {
            keyed(data, cm.items.as_ref(), mode, &mut set, &volume.name)?;
        }
    } else if let Some(s) = &volume.secret {
        let mode = s.default_mode.map(|m| m as u32).unwrap_or(0o644);
        let name = s.secret_name.clone().unwrap_or_default();
        if let Some(data) = secret_data(ctx, ns, &name, s.optional == Some(true)).await? {
            keyed(data, s.items.as_ref(), mode, &mut set, &volume.name)?;
        }
    } else if let Some(d) = &volume.downward_api {
        let mode = d.default_mode.map(|m| m as u32).unwrap_or(0o644);
        for item in d.items.iter().flatten() {
            if let Some(data) = downward_file(pod, item) {
                set.add(
                    &item.path,
                    data,
                    item.mode.map(|m| m as u32).unwrap_or(mode),
                )?;
            }
        }
    } else if let Some(p) = &volume.projected {
        let mode = p.default_mode.map(|m| m as u32).unwrap_or(0o644);
        for source in p.sources.iter().flatten() {
            if let Some(cm) = &source.config_map {
                if cm.name == "kube-root-ca.crt" && !cm.optional.unwrap_or(false) {
                    // Served from the lab CA file when the configmap is not published yet.
                    let data = match config_map_data(ctx, ns, &cm.name, true).await? {
                        Some(d) => d,
                        None => BTreeMap::from([(
                            "ca.crt".to_owned(),
                            std::fs::read(ctx.ca_cert).map_err(|e| io(ctx.ca_cert, e))?,
                        )]),
                    };
                    keyed(data, cm.items.as_ref(), mode, &mut set, &volume.name)?;
                } else if let Some(data) =
                    config_map_data(ctx, ns, &cm.name, cm.optional == Some(true)).await?
                {
                    keyed(data, cm.items.as_ref(), mode, &mut set, &volume.name)?;
                }
            }
            if let Some(s) = &source.secret
                && let Some(data) = secret_data(ctx, ns, &s.name, s.optional == Some(true)).await?
            {
                keyed(data, s.items.as_ref(), mode, &mut set, &volume.name)?;
            }
            if let Some(d) = &source.downward_api {
                for item in d.items.iter().flatten() {
                    if let Some(data) = downward_file(pod, item) {
                        set.add(
                            &item.path,
                            data,
                            item.mode.map(|m| m as u32).unwrap_or(mode),
                        )?;
                    }
                }
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
}
