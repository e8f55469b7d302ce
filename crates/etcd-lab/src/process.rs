//! Detached processes of the lab: each one runs in its own session, writes
//! stdout and stderr to its log file, has a pid file and lives in its own
//! cgroup from its first instruction on.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_lab_common::IoContext;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::cgroup::LabCgroups;
use crate::error::{LabError, Result};

/// What to start.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// Component name: used in messages.
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Appended stdout + stderr.
    pub log: PathBuf,
    pub pid_file: PathBuf,
    /// Group below `<cgroup2>/etcd-lab/`.
    pub cgroup: String,
    /// Network namespace (under /run/netns) to start in; the host's when `None`.
    pub netns: Option<String>,
    /// Started again a second after it exits, as a kubelet restarts a
    /// static Pod (the pid file names the supervising shell; SIGTERM to
    /// it stops the process and the supervision).
    pub restart_on_exit: bool,
}

/// The shell step that puts itself in the cgroup, then forks the process in
/// a new session; the process is reparented to init when the shell exits.
///
/// Descriptors inherited from whoever started the lab (other than 0-2) are
/// closed first: a lab left running must not keep them open, such as the
/// test lock `flock /run/etcd-lab-tests.lock make demo` holds on fd 3
/// (bash, as dash cannot close descriptors above 9).
const LAUNCHER: &str = r#"for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
cgroup="$1"; log="$2"; pidfile="$3"; shift 3
echo $$ > "$cgroup/cgroup.procs" || exit 90
setsid "$@" </dev/null >>"$log" 2>&1 &
echo $! > "$pidfile.tmp" && mv "$pidfile.tmp" "$pidfile""#;

/// The supervising shell of a process started again when it exits:
/// `$1` names it in the log, the rest is the command.
const SUPERVISOR: &str = r#"name="$1"; shift
child=0
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
while :; do
  "$@" &
  child=$!
  wait "$child"
  status=$?
  echo "etcd-lab: $name exited (status $status); starting it again in 1 s"
  sleep 1 &
  wait $!
done"#;

/// Starts `spec` detached and returns its pid.
pub fn spawn(spec: &ProcessSpec, cgroups: &LabCgroups) -> Result<i32> {
    let group = cgroups.create(&spec.cgroup)?;
    for path in [&spec.log, &spec.pid_file] {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).context(|| format!("create {}", parent.display()))?;
        }
    }
    let mut command = Command::new("/bin/bash");
    command
        .arg("-c")
        .arg(LAUNCHER)
        .arg("etcd-lab-launcher")
        .arg(&group)
        .arg(&spec.log)
        .arg(&spec.pid_file);
    if spec.restart_on_exit {
        command
            .arg("/bin/bash")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("etcd-lab-supervisor")
            .arg(&spec.name);
    }
    if let Some(netns) = &spec.netns {
        command
            .arg("nsenter")
            .arg(format!("--net=/run/netns/{netns}"));
    }
    // etcd reads every `ETCD_*` variable as a flag (`ETCD_LAB_DIR` included):
    // the lab's processes are configured by their arguments only.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ETCD") {
            command.env_remove(name);
        }
    }
    command
        .arg(&spec.program)
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let output = command
        .output()
        .context(|| format!("start {}", spec.name))?;
    if !output.status.success() {
        return Err(LabError::Command {
            command: format!("start {}", spec.name),
            message: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        });
    }
    read_pid(&spec.pid_file).ok_or_else(|| LabError::Command {
        command: format!("start {}", spec.name),
        message: format!("no pid in {}", spec.pid_file.display()),
    })
}

/// The pid in a pid file.
pub fn read_pid(pid_file: &Path) -> Option<i32> {
    std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

/// Whether `pid` runs (exists and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The pid of a component if its pid file names a live process of the lab's cgroup.
pub fn running(pid_file: &Path, cgroups: &LabCgroups, cgroup: &str) -> Option<i32> {
    let pid = read_pid(pid_file)?;
    (alive(pid) && cgroups.holds(pid, Some(cgroup))).then_some(pid)
}

/// SIGTERM, then SIGKILL after `grace`; waits until the process is gone.
pub fn stop(pid: i32, grace: Duration) {
    let target = Pid::from_raw(pid);
    let _ = kill(target, Signal::SIGTERM);
    // A frozen (SIGSTOPped) process handles SIGTERM only once it runs again.
    let _ = kill(target, Signal::SIGCONT);
    let deadline = Instant::now() + grace;
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if alive(pid) {
        let _ = kill(target, Signal::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The last `lines` lines of a log file.
pub fn log_tail(log: &Path, lines: usize) -> String {
    match std::fs::read(log) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", log.display()),
    }
}
