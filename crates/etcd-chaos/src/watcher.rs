//! A watcher of every key of the campaign: it records the revision of each
//! event it is sent. When its stream breaks it starts a new one from the
//! revision after the last it saw, so the streams together must cover
//! every change; each is checked on its own
//! ([`linearizability::check_watch_stream`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{ConnectOptions, WatchOptions};
use linearizability::{WatchEnd, WatchStream};
use tokio::task::JoinHandle;

use crate::endpoints::Endpoints;
use crate::workload::PREFIX;

/// The watcher, running until [`Watcher::finish`].
pub struct Watcher {
    /// The revision after which the watcher may stop (0: not yet asked).
    until: Arc<AtomicU64>,
    /// The streams that ended so far.
    streams: Arc<Mutex<Vec<WatchStream>>>,
    task: JoinHandle<()>,
}

/// A stream that delivers nothing for this long while the clients write
/// (a member cut off from its leader keeps a watch open but silent) is
/// left for another member's.
const SILENCE: Duration = Duration::from_secs(10);

impl Watcher {
    /// Watches [`PREFIX`] from `start_revision` on through the members.
    pub fn start(endpoints: Endpoints, start_revision: u64) -> Self {
        let until = Arc::new(AtomicU64::new(0));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(watch(
            endpoints,
            start_revision,
            until.clone(),
            streams.clone(),
        ));
        Self {
            until,
            streams,
            task,
        }
    }

    /// Lets the watcher stop once it has seen an event at or after
    /// `revision` (a last write of the campaign), and returns its streams.
    /// Waits at most `timeout`; returns whether it caught up by then (the
    /// streams that ended are returned either way).
    pub async fn finish(self, revision: u64, timeout: Duration) -> (Vec<WatchStream>, bool) {
        self.until.store(revision, Ordering::SeqCst);
        let abort = self.task.abort_handle();
        let caught_up = matches!(tokio::time::timeout(timeout, self.task).await, Ok(Ok(())));
        abort.abort();
        let streams = self.streams.lock().map(|s| s.clone()).unwrap_or_default();
        (streams, caught_up)
    }
}

async fn watch(
    endpoints: Endpoints,
    start_revision: u64,
    until: Arc<AtomicU64>,
    streams: Arc<Mutex<Vec<WatchStream>>>,
) {
    let mut next = start_revision;
    let mut attempt = 0usize;
    loop {
        let mut stream = WatchStream {
            start_revision: Some(next),
            revisions: Vec::new(),
            end: WatchEnd::Interrupted,
        };
        let caught_up = follow(&endpoints, attempt, &mut stream, &until).await;
        if let Some(last) = stream.revisions.last() {
            next = last + 1;
        }
        let compacted = matches!(stream.end, WatchEnd::Compacted { .. });
        if caught_up {
            stream.end = WatchEnd::CaughtUp;
        }
        if let WatchEnd::Compacted { compact_revision } = stream.end {
            // The revisions it needed are gone: the next stream starts at
            // the compaction (what a real client has to do).
            next = next.max(compact_revision);
        }
        if (!stream.revisions.is_empty() || caught_up || compacted)
            && let Ok(mut streams) = streams.lock()
        {
            streams.push(stream);
        }
        if caught_up {
            return;
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Follows one stream until it breaks (returns false) or has seen an
/// event at or after the revision `until` names (returns true).
async fn follow(
    endpoints: &Endpoints,
    attempt: usize,
    stream: &mut WatchStream,
    until: &AtomicU64,
) -> bool {
    let urls = endpoints.current().await;
    if urls.is_empty() {
        return false;
    }
    let url = urls[attempt % urls.len()].clone();
    let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
    let Ok(mut client) = etcd_client::Client::connect([url], Some(options)).await else {
        return false;
    };
    let start = i64::try_from(stream.start_revision.unwrap_or(1)).unwrap_or(1);
    let Ok(mut events) = client
        .watch(
            PREFIX,
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(start)
                    .with_progress_notify(),
            ),
        )
        .await
    else {
        return false;
    };
    let mut silent = Duration::ZERO;
    loop {
        let reached = |stream: &WatchStream| {
            let until = until.load(Ordering::SeqCst);
            until > 0 && stream.revisions.last().is_some_and(|r| *r >= until)
        };
        if reached(stream) {
            return true;
        }
        // A quiet stream is checked for the end every second; a member
        // silent for long is left for another.
        let message = match tokio::time::timeout(Duration::from_secs(1), events.message()).await {
            Err(_) => {
                silent += Duration::from_secs(1);
                if silent >= SILENCE {
                    return false;
                }
                continue;
            }
            Ok(message) => message,
        };
        silent = Duration::ZERO;
        match message {
            Ok(Some(response)) => {
                if response.canceled() {
                    let compact = response.compact_revision();
                    if compact > 0 {
                        stream.end = WatchEnd::Compacted {
                            compact_revision: u64::try_from(compact).unwrap_or(0),
                        };
                    }
                    return false;
                }
                for event in response.events() {
                    if let Some(kv) = event.kv() {
                        stream
                            .revisions
                            .push(u64::try_from(kv.mod_revision()).unwrap_or(0));
                    }
                }
            }
            Ok(None) | Err(_) => return false,
        }
    }
}
