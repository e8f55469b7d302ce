//! The PID namespace of an image's container. After `unshare(CLONE_NEWPID)`
//! the caller stays where it is and its first child is PID 1 of the new
//! namespace, as a container runtime's init is. So the runner of an
//! image's container runs in two steps:
//!
//! 1. [`supervise_init`]: join the cgroup and the pod's network namespace,
//!    unshare the PID namespace and start the runner again as its first
//!    child (`etcd-lab run-container --spec FILE --init`); stay outside as
//!    that child's parent, the process the agent knows as the container's:
//!    pass on every signal the agent may send (SIGKILL needs no passing:
//!    the agent also kills the container's cgroup) and exit as the child
//!    does, by the same signal or with the same code.
//! 2. [`enter_as_init`] in the child: undo the parent's signal mask, die
//!    with the parent (`PR_SET_PDEATHSIG`), then build the root and exec
//!    as on the fast path. Everything in the namespace dies with PID 1.
//!
//! As in any container, PID 1 ignores a signal it has no handler for: a
//! process that does not handle SIGTERM runs until the grace period ends.

use std::convert::Infallible;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use etcd_lab_common::IoContext;
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::unistd::Pid;

use super::ContainerError;

/// Signals the parent passes on to the container.
const PASSED_ON: [Signal; 7] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

fn watched() -> SigSet {
    let mut set = SigSet::empty();
    for s in PASSED_ON {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    set
}

/// Step 1, in the namespaces the cgroup and network joins left this
/// process in: unshares the PID namespace, starts the init step as its
/// first process and exits as that one does. Returns only on error.
pub(super) fn supervise_init(spec_path: &Path) -> Result<Infallible, ContainerError> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID)
        .map_err(|e| sys("unshare (pid)", e))?;
    let watched = watched();
    // Blocked before the child exists, so that no signal is lost between
    // its start and the first wait; the child undoes it.
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&watched), None)
        .map_err(|e| sys("block signals", e))?;
    let exe = Path::new("/proc/self/exe");
    let mut child = std::process::Command::new(exe)
        .arg("run-container")
        .arg("--spec")
        .arg(spec_path)
        .arg("--init")
        .spawn()
        .context(|| "start the container's PID 1".into())?;
    let pid = i32::try_from(child.id()).map(Pid::from_raw).ok();
    loop {
        match watched.wait() {
            Ok(Signal::SIGCHLD) => {
                if let Ok(Some(status)) = child.try_wait() {
                    exit_as(status);
                }
            }
            Ok(received) => {
                if let Some(pid) = pid {
                    let _ = kill(pid, received);
                }
            }
            Err(_) => {}
        }
    }
}

/// Step 2, in the child (PID 1 of the new namespace): the signal mask of
/// a fresh process, and death with the parent.
pub(super) fn enter_as_init() -> Result<(), ContainerError> {
    set_pdeathsig(Signal::SIGKILL).map_err(|e| sys("PR_SET_PDEATHSIG", e))?;
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(|e| sys("restore the signal mask", e))?;
    Ok(())
}

/// Ends this process as the child ended.
fn exit_as(status: ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    if let Some(by) = status.signal().and_then(|s| Signal::try_from(s).ok()) {
        let mut only = SigSet::empty();
        only.add(by);
        // The default disposition of every passed-on signal ends the
        // process; a blocked one is delivered once unblocked.
        let _ = kill(Pid::this(), by);
        let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
        let _ = kill(Pid::this(), Signal::SIGKILL);
    }
    std::process::exit(255)
}

fn sys(context: &str, source: nix::Error) -> ContainerError {
    ContainerError::Sys {
        context: context.to_owned(),
        source,
    }
}
