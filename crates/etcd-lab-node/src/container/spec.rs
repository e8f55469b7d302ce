//! The file the agent writes for `etcd-lab run-container --spec FILE`.

use std::path::{Path, PathBuf};

use etcd_lab_common::IoContext;
use serde::{Deserialize, Serialize};

/// Everything `run_container` needs to build the container and exec it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// Network namespace name under `/run/netns` to join.
    pub netns: String,
    /// Hostname of the pod (a new UTS namespace is created when set).
    #[serde(default)]
    pub hostname: Option<String>,
    /// Empty directory on which the container root (a tmpfs) is mounted.
    pub root_dir: PathBuf,
    /// cgroup2 directory to join before anything else.
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
    /// File bound at `/etc/hosts`.
    pub hosts_file: PathBuf,
    /// File bound at `/etc/resolv.conf`.
    pub resolv_conf: PathBuf,
    /// Files of the image bound read-only into `/usr/local/bin` over the
    /// host's directories (the fast path, when `image_root` is unset).
    #[serde(default)]
    pub image_files: Vec<ImageFile>,
    /// The image's unpacked root filesystem: the container's root is an
    /// overlay on it (writes stay with the container), and the container
    /// gets a PID namespace of its own, its process PID 1 there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_root: Option<PathBuf>,
    /// `readOnlyRootFilesystem` (honoured for image roots).
    #[serde(default)]
    pub read_only_root: bool,
    /// Volume mounts, in order.
    #[serde(default)]
    pub mounts: Vec<BindMount>,
    /// argv; `argv[0]` is looked up in the container's `PATH` when it has no `/`.
    pub argv: Vec<String>,
    /// Environment, in order.
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Working directory inside the container.
    #[serde(default)]
    pub working_dir: Option<PathBuf>,
    /// runAsUser.
    #[serde(default)]
    pub uid: Option<u32>,
    /// runAsGroup.
    #[serde(default)]
    pub gid: Option<u32>,
    /// Supplementary groups (fsGroup, supplementalGroups).
    #[serde(default)]
    pub supplementary_groups: Vec<u32>,
}

/// One executable of an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageFile {
    /// File on the host.
    pub source: PathBuf,
    /// Name under `/usr/local/bin`.
    pub name: String,
}

/// A bind mount of a host directory or file into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BindMount {
    pub source: PathBuf,
    /// Absolute path in the container.
    pub target: PathBuf,
    #[serde(default)]
    pub read_only: bool,
}

impl ContainerSpec {
    /// Reads a spec file.
    pub fn load(path: &Path) -> Result<Self, super::ContainerError> {
        let text =
            std::fs::read_to_string(path).context(|| format!("read spec {}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| super::ContainerError::Spec(e.to_string()))
    }
}

/// Resolves `argv0` against `PATH` from `env` (or the default PATH), testing
/// candidates with `exists` (a path inside the container root).
pub fn resolve_executable(
    argv0: &str,
    env: &[(String, String)],
    exists: impl Fn(&str) -> bool,
) -> Option<String> {
    if argv0.contains('/') {
        return Some(argv0.to_owned());
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or(DEFAULT_PATH);
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| format!("{}/{argv0}", dir.trim_end_matches('/')))
        .find(|candidate| exists(candidate))
}

/// PATH used when the container sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_against_container_path() {
        let env = vec![("PATH".to_owned(), "/a:/usr/local/bin".to_owned())];
        let found = resolve_executable("etcd", &env, |p| p == "/usr/local/bin/etcd");
        assert_eq!(found.as_deref(), Some("/usr/local/bin/etcd"));
        assert_eq!(
            resolve_executable("/x/y", &env, |_| false).as_deref(),
            Some("/x/y")
        );
        assert_eq!(resolve_executable("nope", &[], |_| false), None);
        let found = resolve_executable("sh", &[], |p| p == "/bin/sh");
        assert_eq!(found.as_deref(), Some("/bin/sh"));
    }
}
