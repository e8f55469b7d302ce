//! The built binary as a person first meets it, without an API server: its
//! help names every subcommand, and a missing kubeconfig fails with the
//! next step. (This target also makes `cargo test --workspace --no-run`
//! build the binary, which the end-to-end test runs on the lab.)

use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_kubectl-etcd");

#[test]
fn help_names_every_subcommand() {
    let output = Command::new(BINARY).arg("--help").output().expect("runs");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for subcommand in [
        "status",
        "approve-recovery",
        "backup",
        "restore",
        "pause",
        "resume",
        "renew-certificates",
        "rotate-ca",
    ] {
        assert!(help.contains(subcommand), "{subcommand} missing:\n{help}");
    }
    assert!(
        help.contains("--namespace") && help.contains("--context"),
        "{help}"
    );
}

#[test]
fn without_a_kubeconfig_it_says_what_to_do() {
    let missing = tempfile::tempdir().expect("dir");
    let output = Command::new(BINARY)
        .args(["status", "main"])
        .env("KUBECONFIG", missing.path().join("none"))
        .env("HOME", missing.path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.starts_with("error: "), "{error}");
    assert!(error.contains("next: "), "{error}");
    assert!(error.contains("KUBECONFIG"), "{error}");
}
