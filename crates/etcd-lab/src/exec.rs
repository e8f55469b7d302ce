//! `etcd-lab exec`: run a command inside the lab network, with cluster DNS.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use etcd_lab_common::IoError;
use etcd_lab_node::network::CLIENT_NETNS;

use crate::error::LabError;
use crate::upstream::Binaries;

/// Replaces this process with `command` run in the client namespace
/// (`ip netns exec` also binds `/etc/netns/etcdlab-client/resolv.conf`).
/// The lab's kubectl and etcdctl come first on PATH. Returns only on error.
pub fn exec_in_lab(command: &[OsString]) -> LabError {
    if command.is_empty() {
        return LabError::Invalid("etcd-lab exec needs a command: etcd-lab exec -- CMD...".into());
    }
    if !std::path::Path::new("/run/netns")
        .join(CLIENT_NETNS)
        .exists()
    {
        return LabError::NotUp(std::path::Path::new("/run/netns").join(CLIENT_NETNS));
    }
    let mut process = Command::new("ip");
    process.args(["netns", "exec", CLIENT_NETNS]).args(command);
    if let Ok(binaries) = Binaries::locate() {
        process.env("PATH", search_path(&binaries));
    }
    let error = process.exec();
    IoError::new(format!("run {:?} in {CLIENT_NETNS}", command), error).into()
}

/// `<kubernetes bin>:<etcd 3.6 bin>:$PATH`.
pub fn search_path(binaries: &Binaries) -> OsString {
    let mut path = OsString::new();
    path.push(&binaries.kubernetes);
    path.push(":");
    path.push(&binaries.etcd_3_6);
    if let Some(rest) = std::env::var_os("PATH") {
        path.push(":");
        path.push(rest);
    }
    path
}
