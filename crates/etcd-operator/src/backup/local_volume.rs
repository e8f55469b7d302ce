//! Whether a `local` destination outlives the operator's Pod: in a Pod, a
//! path that is not on a volume mounted into the container is the
//! container's writable layer, lost with the Pod. An operator run outside
//! a cluster (a host process) writes to its host's filesystem.

use std::path::Path;

/// Whether this process runs in a Kubernetes Pod (the kubelet sets the
/// Service host of the API server in every container's environment).
pub fn in_a_pod() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// The mount point `path` lives under, from `/proc/self/mountinfo`'s
/// text: the longest mount point that is `path` or one of its ancestors.
pub fn mount_point_of(mountinfo: &str, path: &Path) -> Option<String> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|mount| path.starts_with(Path::new(mount)))
        .max_by_key(String::len)
}

/// mountinfo writes a space, tab, newline and backslash as octal escapes.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Why a `local` destination at `path` would be lost with this Pod, if it
/// would: run in a Pod and not under a mounted volume.
pub fn lost_with_the_pod(path: &str) -> Option<String> {
    if !in_a_pod() {
        return None;
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mount_point_of(&mountinfo, Path::new(path))?;
    (mount == "/").then(|| {
        format!(
            "local destination {path} is on the operator container's own filesystem, which is lost with the operator's Pod: mount a volume at {path} in the operator's Deployment, or use s3, gcs or azure"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
23 22 0:5 / /proc rw - proc proc rw
40 22 259:2 / /var/backups rw - ext4 /dev/vdb rw
41 40 259:3 / /var/backups/etcd\\040copies rw - ext4 /dev/vdc rw
";

    #[test]
    fn the_longest_mount_point_above_the_path_counts() {
        let at = |p: &str| mount_point_of(MOUNTINFO, Path::new(p));
        assert_eq!(at("/tmp/etcd-backups").as_deref(), Some("/"));
        assert_eq!(at("/var/backups").as_deref(), Some("/var/backups"));
        assert_eq!(at("/var/backups/main").as_deref(), Some("/var/backups"));
        assert_eq!(
            at("/var/backups/etcd copies/x").as_deref(),
            Some("/var/backups/etcd copies")
        );
        // A sibling whose name only starts like a mount point is not under it.
        assert_eq!(at("/var/backupsold").as_deref(), Some("/"));
    }
}
