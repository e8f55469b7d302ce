//! The hosted control plane scenario of the README's test command, run as
//! `make demo-hosted` runs it: `etcd-hosted` must pass (every object the
//! tenant API server acknowledged is listed after a majority loss, a
//! member replacement and a rolling upgrade of etcd; after a restore from
//! a full backup into a new cluster, every one written up to the backup's
//! reported revision and none acknowledged after it finished; the
//! informer lists again after the restore and its cache ends equal to the
//! API server's list) and say so. Needs root, the
//! upstream binaries and `etcd-operator` beside `etcd-hosted`
//! (`cargo build --workspace --bins`).

use std::process::Command;

#[test]
fn a_tenant_api_server_keeps_every_object_through_etcd_faults() {
    let output = Command::new(env!("CARGO_BIN_EXE_etcd-hosted"))
        .output()
        .expect("run etcd-hosted");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    println!("{stdout}");
    assert!(output.status.success(), "etcd-hosted: {}", output.status);
    for phase in [
        "majority of etcd's nodes down 30 s, then back",
        "a member's volume wiped: replaced",
        "rolling upgrade 3.6.16 -> 3.7.3",
        "restore from a full backup into a new cluster",
    ] {
        assert!(
            stdout.contains(&format!("| {phase} |")),
            "phase {phase} missing"
        );
    }
    assert!(
        stdout.contains("every one listed at the end")
            && stdout.contains("every object written up to it is there, none acknowledged after the backup finished"),
        "{stdout}"
    );
}
