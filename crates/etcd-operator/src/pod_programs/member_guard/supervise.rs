//! The guard as etcd's parent while a new member joins
//! ([`super::first_join`]): it starts etcd, passes on the signals the
//! container gets (SIGTERM, SIGINT, SIGHUP, SIGQUIT), reads etcd's metrics
//! until the member has published, restarts etcd on the publish race, and
//! exits as etcd exits. Outside a join the guard execs etcd instead.

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use super::MemberGuardArgs;
use super::check::check_volume;
use super::first_join::{
    JoinSample, JoinStep, JoinWatch, MAX_RESTARTS, POLL_INTERVAL, STUCK_AFTER, WATCH_LIMIT,
};
use super::peer_reach::{self, PeerWait};
use super::refusal::MemberGuardError;
use crate::pod_programs::file_error::io;

/// The longest read of the metrics page.
const READ_TIMEOUT: Duration = Duration::from_millis(500);

/// The largest metrics page read (etcd's is about 150 KiB).
const PAGE_LIMIT: u64 = 8 << 20;

/// How long etcd may take to stop on SIGTERM before a restart kills it.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Runs etcd (`args.exec`) as a child, watching its join at `metrics`, and
/// returns the exit code the guard should end with: etcd's own, or 128 plus
/// the signal that ended it.
pub fn run_watched(args: &MemberGuardArgs, metrics: SocketAddr) -> Result<u8, MemberGuardError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(MemberGuardError::Watch)?;
    runtime.block_on(supervise(args, metrics))
}

/// A signal for etcd, or the end of its process.
enum Event {
    Signal(Signal),
    Exited(ExitStatus),
    Tick,
}

async fn supervise(args: &MemberGuardArgs, metrics: SocketAddr) -> Result<u8, MemberGuardError> {
    let (program, rest) = args
        .exec
        .split_first()
        .ok_or_else(|| MemberGuardError::Watch(std::io::Error::other("no command to run")))?;
    let mut signals = Signals::register().map_err(MemberGuardError::Watch)?;
    if let Some(code) = wait_for_a_peer_or_a_signal(rest, &mut signals).await {
        return Ok(code);
    }
    let started = Instant::now();
    let mut restarts = 0;
    let mut terminating = false;
    loop {
        let mut child = Command::new(program)
            .args(rest)
            .spawn()
            .map_err(io("starting", Path::new(program)))?;
        let pid = child_pid(&child)?;
        let mut watch = (restarts < MAX_RESTARTS && !terminating).then(JoinWatch::default);
        let mut ticks = tokio::time::interval(POLL_INTERVAL);
        let restart = loop {
            match next_event(&mut child, &mut signals, &mut ticks, watch.is_some()).await? {
                Event::Exited(status) => return Ok(exit_code(status)),
                Event::Signal(forwarded) => {
                    pass_on(pid, forwarded, &mut terminating);
                    if terminating {
                        watch = None;
                    }
                }
                Event::Tick => {
                    let Some(current) = watch.as_mut() else {
                        continue;
                    };
                    if started.elapsed() > WATCH_LIMIT {
                        watch = None;
                        continue;
                    }
                    let sample = read_join_sample(metrics).await;
                    match current.observe(sample.as_ref(), Instant::now()) {
                        JoinStep::Watch => {}
                        JoinStep::Joined => {
                            tracing::info!("etcd has joined and published its name");
                            watch = None;
                        }
                        JoinStep::Restart => break sample,
                    }
                }
            }
        };
        tracing::warn!(
            applied_index = restart.map(|sample| sample.applied_index),
            "etcd applied the leader's snapshot but its request to publish its name is still \
             pending {} ms later: the request was committed inside that snapshot, and etcd would \
             wait out its request timeout before asking again; restarting etcd on the data it \
             now holds",
            STUCK_AFTER.as_millis()
        );
        send(pid, Signal::SIGTERM);
        let stopped = stop(&mut child, pid, &mut signals, &mut terminating).await?;
        if terminating {
            return Ok(exit_code(stopped));
        }
        // Every start of etcd is checked, this one too.
        check_volume(args)?;
        restarts += 1;
    }
}

/// Waits until a peer accepts a connection from this Pod
/// ([`super::peer_reach`]); `Some(exit code)` when a signal other than
/// SIGHUP ends the guard meanwhile (etcd has not started).
async fn wait_for_a_peer_or_a_signal(etcd_args: &[String], signals: &mut Signals) -> Option<u8> {
    let peers = peer_reach::peer_addresses(etcd_args);
    let wait = peer_reach::wait_for_a_peer(&peers, peer_reach::WAIT_LIMIT);
    tokio::pin!(wait);
    loop {
        tokio::select! {
            waited = &mut wait => {
                match waited {
                    PeerWait::Reached { peer, after } => tracing::info!(
                        %peer,
                        waited_ms = after.as_millis(),
                        "a peer accepts connections from this Pod: starting etcd"
                    ),
                    PeerWait::NotReached { after } => tracing::warn!(
                        peers = ?peers,
                        waited_ms = after.as_millis(),
                        "no peer accepted a connection from this Pod: starting etcd, which \
                         retries on its own"
                    ),
                }
                return None;
            }
            signal = signals.next() => {
                if signal != Signal::SIGHUP {
                    return Some(u8::try_from(128 + signal as i32).unwrap_or(1));
                }
            }
        }
    }
}

/// Waits for etcd to stop after SIGTERM, passing on signals, and kills it
/// after [`STOP_GRACE`].
async fn stop(
    child: &mut Child,
    pid: Pid,
    signals: &mut Signals,
    terminating: &mut bool,
) -> Result<ExitStatus, MemberGuardError> {
    let deadline = tokio::time::sleep(STOP_GRACE);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            status = child.wait() => return status.map_err(MemberGuardError::Watch),
            forwarded = signals.next() => pass_on(pid, forwarded, terminating),
            () = &mut deadline => send(pid, Signal::SIGKILL),
        }
    }
}

async fn next_event(
    child: &mut Child,
    signals: &mut Signals,
    ticks: &mut tokio::time::Interval,
    watching: bool,
) -> Result<Event, MemberGuardError> {
    tokio::select! {
        status = child.wait() => status.map(Event::Exited).map_err(MemberGuardError::Watch),
        forwarded = signals.next() => Ok(Event::Signal(forwarded)),
        _ = ticks.tick(), if watching => Ok(Event::Tick),
    }
}

fn child_pid(child: &Child) -> Result<Pid, MemberGuardError> {
    let id = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| MemberGuardError::Watch(std::io::Error::other("etcd has no process id")))?;
    Ok(Pid::from_raw(id))
}

/// Passes a signal the guard got on to etcd; any but SIGHUP ends etcd, so
/// no restart follows it.
fn pass_on(pid: Pid, signal: Signal, terminating: &mut bool) {
    *terminating |= signal != Signal::SIGHUP;
    send(pid, signal);
}

/// Sends a signal to etcd; one that has exited already is not an error.
fn send(pid: Pid, signal: Signal) {
    if let Err(error) = kill(pid, signal) {
        tracing::debug!(%error, ?signal, "etcd did not take the signal");
    }
}

/// etcd's exit code, or 128 plus the signal that ended it (as a shell
/// reports it).
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

/// The signals passed on to etcd.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> std::io::Result<Signals> {
        Ok(Signals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}

/// Reads etcd's metrics page at `address` (plain HTTP/1.0) and the figures
/// of a join on it; `None` when it cannot be read or lacks them.
pub async fn read_join_sample(address: SocketAddr) -> Option<JoinSample> {
    let page = tokio::time::timeout(READ_TIMEOUT, read_metrics_page(address))
        .await
        .ok()?
        .ok()?;
    JoinSample::parse(&page)
}

async fn read_metrics_page(address: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\nAccept: text/plain\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.take(PAGE_LIMIT).read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of the response head"))?;
    if !head.starts_with("HTTP/1.") || head.split(' ').nth(1) != Some("200") {
        return Err(std::io::Error::other("the metrics page did not answer 200"));
    }
    Ok(body.to_owned())
}
