//! The pinned upstream builds of `tools/build-upstream.sh` the tests run:
//! etcd 3.6 (`etcd`, `etcdctl`, `etcdutl`) and the object-store servers.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// `$ETCD_LAB_CACHE/upstream/<set>-<pin hash>/` of a completely built set,
/// the rule of `tools/build-upstream.sh`: the first 12 hex digits of the
/// SHA-256 of `go.mod` + `go.sum` + the module's own `.go` files (byte
/// order) for a Go module, of `package.json` + `package-lock.json` for an
/// npm set (`tools/azurite/install.sh`). Panics naming the script to run
/// when the set is not built.
pub fn upstream_set(set: &str) -> PathBuf {
    built_set(set).unwrap_or_else(|missing| panic!("{missing}"))
}

/// [`upstream_set`], or what is missing and how to build it.
pub fn built_set(set: &str) -> Result<PathBuf, String> {
    let dir = upstream_set_dir(set);
    if dir.join(".complete").exists() {
        Ok(dir)
    } else {
        Err(format!(
            "{} is missing: run tools/build-upstream.sh",
            dir.display()
        ))
    }
}

/// Where `set` is built, whether it is or not.
pub fn upstream_set_dir(set: &str) -> PathBuf {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools")
        .join(set);
    let files: Vec<String> = if tools.join("go.mod").exists() {
        let mut sources: Vec<String> = std::fs::read_dir(&tools)
            .expect("set directory")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| name.ends_with(".go"))
            .collect();
        sources.sort();
        ["go.mod".to_string(), "go.sum".to_string()]
            .into_iter()
            .chain(sources)
            .collect()
    } else {
        vec!["package.json".to_string(), "package-lock.json".to_string()]
    };
    let mut pins = Vec::new();
    for file in &files {
        pins.extend(
            std::fs::read(tools.join(file)).unwrap_or_else(|e| panic!("{file} of {set}: {e}")),
        );
    }
    let hash = hex::encode(Sha256::digest(&pins));
    etcd_lab::upstream::cache_dir().join(format!("upstream/{set}-{}", &hash[..12]))
}

/// A binary of the pinned etcd 3.6 set (`etcd`, `etcdctl`, `etcdutl`);
/// `ETCD_BIN` names another `etcd`.
pub fn etcd_bin(name: &str) -> PathBuf {
    built_etcd_bin(name).unwrap_or_else(|missing| panic!("{missing}"))
}

/// [`etcd_bin`], or what is missing and how to build it.
pub fn built_etcd_bin(name: &str) -> Result<PathBuf, String> {
    if name == "etcd"
        && let Some(path) = std::env::var_os("ETCD_BIN")
    {
        return Ok(PathBuf::from(path));
    }
    Ok(built_set("etcd-3.6")?.join(name))
}
