//! Location of the upstream binaries built by `tools/build-upstream.sh`.
//!
//! Each pinned Go module under `tools/` is built into
//! `$ETCD_LAB_CACHE/upstream/<module>-<first 12 hex of sha256(go.mod + go.sum)>/`
//! (default cache `~/.cache/etcd-lab`). The pins are compiled into this
//! binary, so it finds the set it was built against and never searches PATH.

use std::path::{Path, PathBuf};

use crate::error::{LabError, Result};

/// One pinned Go module of `tools/`.
#[derive(Debug, Clone, Copy)]
pub struct PinnedModule {
    /// Folder name under `tools/`, also the prefix of the cache directory.
    pub name: &'static str,
    go_mod: &'static str,
    go_sum: &'static str,
}

/// `tools/kubernetes`: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
pub const KUBERNETES: PinnedModule = PinnedModule {
    name: "kubernetes",
    go_mod: include_str!("../../../tools/kubernetes/go.mod"),
    go_sum: include_str!("../../../tools/kubernetes/go.sum"),
};

/// `tools/etcd-3.6`: etcd, etcdctl, etcdutl of the 3.6 line (also the lab's backing etcd).
pub const ETCD_3_6: PinnedModule = PinnedModule {
    name: "etcd-3.6",
    go_mod: include_str!("../../../tools/etcd-3.6/go.mod"),
    go_sum: include_str!("../../../tools/etcd-3.6/go.sum"),
};

/// `tools/etcd-3.7`: etcd, etcdctl, etcdutl of the 3.7 line.
pub const ETCD_3_7: PinnedModule = PinnedModule {
    name: "etcd-3.7",
    go_mod: include_str!("../../../tools/etcd-3.7/go.mod"),
    go_sum: include_str!("../../../tools/etcd-3.7/go.sum"),
};

/// `tools/crane`: go-containerregistry's crane (the lab's registry, pulls).
pub const CRANE: PinnedModule = PinnedModule {
    name: "crane",
    go_mod: include_str!("../../../tools/crane/go.mod"),
    go_sum: include_str!("../../../tools/crane/go.sum"),
};

/// All etcd sets.
pub const ETCD_SETS: [PinnedModule; 2] = [ETCD_3_6, ETCD_3_7];

impl PinnedModule {
    /// First 12 hex digits of sha256(go.mod ++ go.sum), as the build script computes it.
    pub fn pin_hash(&self) -> String {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(self.go_mod.as_bytes());
        ctx.update(self.go_sum.as_bytes());
        let digest = ctx.finish();
        digest
            .as_ref()
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The cache directory of this set (whether built or not).
    pub fn dir_in(&self, cache: &Path) -> PathBuf {
        cache
            .join("upstream")
            .join(format!("{}-{}", self.name, self.pin_hash()))
    }

    /// The cache directory of this set under the default cache.
    pub fn dir(&self) -> PathBuf {
        self.dir_in(&cache_dir())
    }

    /// The directory of a completely built set, or an error that says how to build it.
    pub fn built_dir(&self) -> Result<PathBuf> {
        let dir = self.dir();
        if dir.join(".complete").is_file() {
            Ok(dir)
        } else {
            Err(LabError::UpstreamMissing {
                set: self.name.to_owned(),
                dir,
            })
        }
    }

    /// The pinned version of `module` in go.mod (`require` lines), without the leading `v`.
    pub fn version_of(&self, module: &str) -> Option<String> {
        self.go_mod.lines().find_map(|line| {
            let mut words = line.trim().trim_start_matches("require").split_whitespace();
            (words.next() == Some(module))
                .then(|| words.next())
                .flatten()
                .map(|v| v.trim_start_matches('v').to_owned())
        })
    }

    /// Exact etcd version of an etcd set (e.g. `3.6.16`).
    pub fn etcd_version(&self) -> Option<String> {
        self.version_of("go.etcd.io/etcd/server/v3")
    }
}

/// `$ETCD_LAB_CACHE`, default `$HOME/.cache/etcd-lab`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ETCD_LAB_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/etcd-lab")
}

/// The located binaries the lab runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
    pub kubernetes: PathBuf,
    /// The etcd 3.6 set (the backing etcd comes from it).
    pub etcd_3_6: PathBuf,
    /// Exact etcd version -> directory, for every built etcd set.
    pub etcd_images: std::collections::BTreeMap<String, PathBuf>,
}

impl Binaries {
    /// Locates every set; fails when the Kubernetes or etcd 3.6 set is missing.
    pub fn locate() -> Result<Self> {
        let kubernetes = KUBERNETES.built_dir()?;
        let etcd_3_6 = ETCD_3_6.built_dir()?;
        let etcd_images = ETCD_SETS
            .iter()
            .filter_map(|set| Some((set.etcd_version()?, set.built_dir().ok()?)))
            .collect();
        Ok(Self {
            kubernetes,
            etcd_3_6,
            etcd_images,
        })
    }

    pub fn kube(&self, name: &str) -> PathBuf {
        self.kubernetes.join(name)
    }

    pub fn etcd(&self) -> PathBuf {
        self.etcd_3_6.join("etcd")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_go_mod() {
        assert!(
            KUBERNETES
                .version_of("k8s.io/kubernetes")
                .is_some_and(|v| v.starts_with("1."))
        );
        assert!(
            ETCD_3_6
                .etcd_version()
                .is_some_and(|v| v.starts_with("3.6."))
        );
        assert!(
            ETCD_3_7
                .etcd_version()
                .is_some_and(|v| v.starts_with("3.7."))
        );
    }

    #[test]
    fn directory_matches_the_build_script_rule() {
        let dir = KUBERNETES.dir_in(Path::new("/c"));
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert!(name.starts_with("kubernetes-"));
        assert_eq!(name.len(), "kubernetes-".len() + 12);
    }
}
