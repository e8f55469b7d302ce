//! The watcher: follows the newest full backup of its own schedule, watches
//! the whole keyspace after the chain's end and writes segments; reports
//! gaps and starts a new full backup (and so a new chain) at once.
//!
//! - A watcher extends only chains after full backups of its own writer
//!   (`snapshot.writer` of its options: the `EtcdBackupSchedule`, compared
//!   by kind, namespace and name), when it starts and when it looks for a
//!   newer one: two schedules of one cluster writing to the same folder
//!   keep one chain each, and a one-shot `EtcdBackup` (or a backup of
//!   another tool) heads no chain. Restores may still use any backup. A
//!   watcher without a writer (tools, tests) follows the newest full
//!   backup whoever wrote it.
//! - `interval` is the longest a delivered write waits to be stored: a
//!   segment is closed `interval` after its first event arrived, less the
//!   time recent uploads took, so that its upload ends within the interval;
//!   or as soon as it holds `max_segment_bytes` (checked between watch
//!   responses, which etcd fills with whole revisions, so a revision never
//!   spans two segments). The watch is read on while a segment uploads;
//!   segments are stored one at a time, in order (a segment exists once its
//!   metadata does, and a chain has no hole), so memory holds at most two.
//!   An interval without events writes nothing; the watcher asks etcd for
//!   its watch progress instead: etcd answers with its current revision
//!   once it has sent every event up to it, which moves the recovery point
//!   of an idle cluster and keeps its loss window at zero.
//! - The watch starts at the chain's last revision itself, not the one
//!   after: etcd answers a progress request only at or past a watch's
//!   start revision, so a watch started after the current revision of a
//!   quiet cluster would never be answered. The events of that revision
//!   are already durable and skipped. When etcd has compacted exactly that
//!   revision, the watch starts after it.
//! - The first put of a chain that uses a lease makes the watcher ask etcd
//!   for the lease's granted TTL and record it in the segment (see
//!   [`super::leases`]), so that a replay gives the key its lease back.
//! - Memory holds one segment (plus one watch response), and the IDs of the
//!   chain's leases (bounded).
//! - A failed upload (after its retries), a broken watch or an unreachable
//!   cluster drop the unwritten events and resume, after back-off, from the
//!   revision after the chain's end: etcd's history is the buffer. Only
//!   when etcd has compacted that history is there a gap.
//! - On start (operator restart) the chain after the newest full backup of
//!   its writer is listed and verified and the watch resumes after its end;
//!   a hole, a corrupt segment, or a compacted history is a gap.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_client::{Client, ConnectOptions, EventType, WatchOptions, WatchStream};
use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::buffer::SegmentBuffer;
use super::chain::{ChainGap, GapKind, segment_chain};
use super::leases::{KnownLeases, granted_ttls, new_leases};
use super::progress::{IncrementalProgress, SupersededChain, answer_within};
use super::segment::{PendingSegment, SegmentMetadata, base_name, store_segment};
use crate::backup::restore::sealed_like_store;
use crate::backup::segment_format::{EventKind, SegmentEvent};
use crate::backup::{
    BackupError, BackupMetadata, BackupStore, SnapshotOptions, TakenBackup, list_backups,
    take_backup,
};
use crate::etcd::{ClientTls, format_id, with_tls};

/// Largest watch response accepted: etcd sends up to 1,000 whole revisions
/// per response, each up to the server's request limit.
const WATCH_MAX_MESSAGE: usize = 256 * 1024 * 1024;
/// How often the watcher looks for a newer full backup of its writer that
/// it was not told about (taken by another replica of the operator, or by
/// the schedule while the announcement was lost).
const NEWER_BASE_CHECK: Duration = Duration::from_secs(60);
/// Capacity of the notice channel; notices beyond it are dropped (the
/// progress still counts them).
const NOTICES: usize = 64;
/// Upload durations remembered to close segments early enough.
const UPLOADS_REMEMBERED: usize = 8;
/// Time allowed, beside the upload, for the watch to deliver a write after
/// etcd acknowledged it (the segment's clock starts at the delivery).
const DELIVERY_MARGIN: Duration = Duration::from_millis(50);

/// The members' client URLs, and the TLS to reach them with (`None` for
/// a plaintext cluster).
#[derive(Debug, Clone)]
pub struct MemberEndpoints {
    /// Client URLs (`http://` or `https://`).
    pub urls: Vec<String>,
    /// The operator's client TLS for the cluster.
    pub tls: Option<Arc<ClientTls>>,
}

/// Where the cluster's members are and how to reach them, asked again at
/// every (re)connection because pod IPs change and certificates renew.
pub type EndpointsFn =
    Arc<dyn Fn() -> BoxFuture<'static, Result<MemberEndpoints, BackupError>> + Send + Sync>;

/// Plaintext endpoints that never change (tests, static clusters).
pub fn fixed_endpoints(endpoints: Vec<String>) -> EndpointsFn {
    Arc::new(move || {
        let urls = endpoints.clone();
        Box::pin(async move { Ok(MemberEndpoints { urls, tls: None }) })
    })
}

/// How a watcher runs.
#[derive(Debug, Clone)]
pub struct IncrementalOptions {
    /// Namespace of the `EtcdCluster` (recorded in full backups).
    pub namespace: String,
    /// Name of the `EtcdCluster`.
    pub cluster: String,
    /// Longest time a delivered write waits to be stored: a segment is
    /// closed early enough for its upload to end within it.
    pub interval: Duration,
    /// A segment is closed once it holds this many encoded bytes.
    pub max_segment_bytes: usize,
    /// How full backups are taken after a gap. Its writer is also whose
    /// full backups the watcher extends.
    pub snapshot: SnapshotOptions,
    /// Gaps counted before this watcher started (from status).
    pub gaps_before: u64,
    /// First wait after a failure; doubles up to `max_back_off`.
    pub min_back_off: Duration,
    /// Longest wait after failures.
    pub max_back_off: Duration,
}

impl IncrementalOptions {
    /// Options with the API's defaults (4 s, 16 MiB) for a cluster.
    pub fn new(namespace: &str, cluster: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
            interval: Duration::from_secs(4),
            max_segment_bytes: 16 * 1024 * 1024,
            snapshot: SnapshotOptions::default(),
            gaps_before: 0,
            min_back_off: Duration::from_secs(1),
            max_back_off: Duration::from_secs(60),
        }
    }
}

/// What a watcher did that is worth an Event.
#[derive(Debug, Clone)]
pub enum IncrementalNotice {
    /// The watcher follows a full backup, from a revision on.
    Following {
        /// Base name of the full backup.
        base: String,
        /// The first revision watched.
        from_revision: i64,
        /// Segments already in its chain (resumed) or 0.
        segments: usize,
    },
    /// A gap: the chain cannot be continued; a full backup follows.
    Gap(ChainGap),
    /// A full backup taken because of a gap (or because none existed).
    FullBackupTaken(Box<TakenBackup>),
    /// A failure; the watcher retries after back-off.
    Failed(String),
}

/// The handle of a running watcher.
pub struct IncrementalHandle {
    progress: watch::Receiver<IncrementalProgress>,
    notices: Option<mpsc::Receiver<IncrementalNotice>>,
    bases: watch::Sender<Option<BackupMetadata>>,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl IncrementalHandle {
    /// The watcher's progress now.
    pub fn progress(&self) -> IncrementalProgress {
        self.progress.borrow().clone()
    }

    /// A receiver of progress updates.
    pub fn subscribe(&self) -> watch::Receiver<IncrementalProgress> {
        self.progress.clone()
    }

    /// The notices (once; `None` afterwards).
    pub fn take_notices(&mut self) -> Option<mpsc::Receiver<IncrementalNotice>> {
        self.notices.take()
    }

    /// Tells the watcher about a full backup taken elsewhere (the cron
    /// schedule): it closes its segment and starts a chain after it.
    pub fn announce_base(&self, base: BackupMetadata) {
        self.bases.send_replace(Some(base));
    }

    /// Whether the task has ended (it ends only when stopped or panicked).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the watcher: it writes the segment it holds, then ends; after
    /// `grace` it is aborted.
    pub async fn stop(self, grace: Duration) {
        self.cancel.cancel();
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Starts a watcher for the cluster whose backups live in `store`.
pub fn spawn(
    store: BackupStore,
    endpoints: EndpointsFn,
    options: IncrementalOptions,
) -> IncrementalHandle {
    let progress = IncrementalProgress {
        gaps: options.gaps_before,
        answer_within: answer_within(options.interval),
        ..IncrementalProgress::default()
    };
    let (progress_tx, progress_rx) = watch::channel(progress);
    let (notices_tx, notices_rx) = mpsc::channel(NOTICES);
    let (bases_tx, bases_rx) = watch::channel(None);
    let cancel = CancellationToken::new();
    let watcher = Watcher {
        store,
        endpoints,
        options,
        progress: progress_tx,
        notices: notices_tx,
        bases: bases_rx,
        bases_open: true,
        needs_full: None,
        failures: 0,
        received_high: 0,
        compacted: 0,
    };
    let task = tokio::spawn(watcher.run(cancel.clone()));
    IncrementalHandle {
        progress: progress_rx,
        notices: Some(notices_rx),
        bases: bases_tx,
        cancel,
        task,
    }
}

/// The chain being written.
#[derive(Debug, Clone)]
struct Position {
    base: BackupMetadata,
    /// Every revision up to this one is in the base or a durable segment.
    last_revision: i64,
    segments: u64,
    /// The leases recorded in the chain's durable segments (this run).
    leases: KnownLeases,
}

/// How one watch ended without error.
enum WatchEnd {
    /// Stopped by the handle.
    Cancelled,
    /// Follow another base (newer full backup) or take one (gap).
    Restart,
}

struct Watcher {
    store: BackupStore,
    endpoints: EndpointsFn,
    options: IncrementalOptions,
    progress: watch::Sender<IncrementalProgress>,
    notices: mpsc::Sender<IncrementalNotice>,
    bases: watch::Receiver<Option<BackupMetadata>>,
    bases_open: bool,
    /// A gap was seen and no full backup taken since.
    needs_full: Option<DateTime<Utc>>,
    failures: u32,
    /// The newest revision any watch has delivered (durable or not): the
    /// writes up to it count as pending until the recovery point reaches
    /// it, across reconnections.
    received_high: i64,
    /// The newest revision etcd said it compacted.
    compacted: i64,
}

impl Watcher {
    async fn run(mut self, cancel: CancellationToken) {
        let mut position: Option<Position> = None;
        loop {
            let outcome = tokio::select! {
                () = cancel.cancelled() => return,
                outcome = self.prepare(&mut position) => outcome,
            };
            let outcome = match (outcome, &mut position) {
                (Ok(()), Some(position)) => self.watch(position, &cancel).await,
                (Ok(()), None) => Ok(WatchEnd::Restart),
                (Err(error), _) => Err(error),
            };
            match outcome {
                Ok(WatchEnd::Cancelled) => return,
                Ok(WatchEnd::Restart) => {}
                Err(error) => {
                    self.failures += 1;
                    let wait = back_off(
                        self.failures,
                        self.options.min_back_off,
                        self.options.max_back_off,
                    );
                    tracing::warn!(
                        cluster = %self.options.cluster,
                        "incremental backup: {error}; retrying in {wait:?}"
                    );
                    let message = error.to_string();
                    self.progress
                        .send_modify(|p| p.last_error = Some(message.clone()));
                    self.notify(IncrementalNotice::Failed(message));
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }

    /// Makes sure there is a chain to extend: takes the full backup a gap
    /// asks for, or finds the newest full backup and checks its chain.
    async fn prepare(&mut self, position: &mut Option<Position>) -> Result<(), BackupError> {
        if let Some(seen) = self.needs_full {
            // A full backup taken elsewhere since the gap will do.
            let announced = self
                .announced()
                .filter(|b| b.started_at > seen && self.sealed_alike(b));
            let base = match announced {
                Some(base) => base,
                None => self.take_full().await?,
            };
            self.needs_full = None;
            let previous = position.take();
            *position = Some(self.follow(base, None, previous.as_ref()));
            return Ok(());
        }
        if position.is_some() {
            return Ok(());
        }
        let base = match self.announced() {
            Some(base) => base,
            None => match self.newest_own().await? {
                Some(base) => base,
                None => self.take_full().await?,
            },
        };
        if !self.sealed_alike(&base) {
            // One key opens a whole chain: after a key change (or encryption
            // turned on or off) the chain starts again from a full backup.
            let base = self.take_full().await?;
            *position = Some(self.follow(base, None, None));
            return Ok(());
        }
        let chain = segment_chain(&self.store, &base).await?;
        if let Some(gap) = chain.gap {
            self.gap(gap);
            return Ok(());
        }
        *position = Some(self.follow(base, Some((chain.segments, chain.last_revision)), None));
        Ok(())
    }

    /// Whether `base` is sealed as this watcher seals segments (same key,
    /// or both plaintext): only such a base can head the chain it writes.
    fn sealed_alike(&self, base: &BackupMetadata) -> bool {
        sealed_like_store(&self.store, base.encryption.as_ref())
    }

    /// Whether this watcher's writer wrote `base`: only such a base heads
    /// the chains it writes. Without a writer, any base does.
    fn is_own(&self, base: &BackupMetadata) -> bool {
        match (&self.options.snapshot.writer, &base.written_by) {
            (Some(own), Some(writer)) => own.is(writer),
            (Some(_), None) => false,
            (None, _) => true,
        }
    }

    /// The newest full backup of this watcher's writer in the folder.
    async fn newest_own(&self) -> Result<Option<BackupMetadata>, BackupError> {
        let backups = list_backups(&self.store).await?;
        Ok(backups.into_iter().rev().find(|b| self.is_own(b)))
    }

    /// The newest full backup announced by the controller (the schedule's
    /// own), if any.
    fn announced(&self) -> Option<BackupMetadata> {
        self.bases.borrow().clone().filter(|b| self.is_own(b))
    }

    /// Starts following `base`, with its verified chain when resuming;
    /// `previous` is the chain it extended until now, kept in use while it
    /// restores further than the new one.
    fn follow(
        &mut self,
        base: BackupMetadata,
        resumed: Option<(Vec<SegmentMetadata>, i64)>,
        previous: Option<&Position>,
    ) -> Position {
        let (segments, last_revision) = resumed.unwrap_or((Vec::new(), base.revision));
        let last_segment = segments.last().cloned();
        let durable_at = last_segment
            .as_ref()
            .map_or(base.started_at, |s| s.closed_at);
        let name = base_name(&base);
        let covers_received = last_revision >= self.received_high;
        self.progress.send_modify(|p| {
            p.superseded = still_needed(p.superseded.take(), previous, &base, last_revision);
            p.base = Some(name.clone());
            p.base_revision = Some(base.revision);
            p.segments = segments.len() as u64;
            p.last_segment = last_segment;
            p.chain_durable_to(last_revision);
            if covers_received {
                p.pending_since = None;
            }
            // Switching to a newer full backup: the previous chain was
            // closed first, so what was durable stays durable.
            p.durable_at = Some(p.durable_at.map_or(durable_at, |at| at.max(durable_at)));
        });
        self.notify(IncrementalNotice::Following {
            base: name,
            from_revision: last_revision + 1,
            segments: segments.len(),
        });
        Position {
            base,
            last_revision,
            segments: segments.len() as u64,
            leases: KnownLeases::default(),
        }
    }

    /// Records a gap; the next round takes a full backup.
    fn gap(&mut self, gap: ChainGap) {
        let now = Utc::now();
        tracing::warn!(cluster = %self.options.cluster, "incremental backup: {gap}");
        self.progress.send_modify(|p| {
            p.gaps += 1;
            p.last_gap = Some((gap.clone(), now));
        });
        self.notify(IncrementalNotice::Gap(gap));
        self.needs_full = Some(now);
    }

    async fn take_full(&mut self) -> Result<BackupMetadata, BackupError> {
        let endpoints = (self.endpoints)().await?;
        let mut snapshot = self.options.snapshot.clone();
        snapshot.settings.tls = endpoints.tls;
        let taken = take_backup(
            &self.store,
            &endpoints.urls,
            &self.options.namespace,
            &self.options.cluster,
            &snapshot,
        )
        .await?;
        let base = taken.metadata.clone();
        self.progress
            .send_modify(|p| p.last_full = Some(taken.clone()));
        self.notify(IncrementalNotice::FullBackupTaken(Box::new(taken)));
        Ok(base)
    }

    fn notify(&self, notice: IncrementalNotice) {
        if self.notices.try_send(notice).is_err() {
            tracing::debug!("incremental backup notice dropped (nobody reads, or full)");
        }
    }

    /// Watches from the revision after the chain's end and writes segments
    /// until stopped, told to follow another base, or failing.
    async fn watch(
        &mut self,
        position: &mut Position,
        cancel: &CancellationToken,
    ) -> Result<WatchEnd, BackupError> {
        let MemberEndpoints {
            urls: endpoints,
            tls,
        } = (self.endpoints)().await?;
        let etcd_error = |message: String| BackupError::Etcd {
            endpoint: endpoints.join(","),
            message,
        };
        let from = first_watched(position.last_revision, self.compacted);
        let (client, mut stream) = open_watch(&endpoints, from, &self.options, tls.as_deref())
            .await
            .map_err(|e| etcd_error(format!("open the watch: {e}")))?;
        let mut buffer = Segments::default();
        let interval = self.options.interval;
        let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut newer_base_check =
            tokio::time::interval_at(Instant::now() + NEWER_BASE_CHECK, NEWER_BASE_CHECK);
        let silence_limit = (interval * 3).max(Duration::from_secs(30));
        let mut last_heard = Instant::now();
        // The newest revision received (durable or in the buffer).
        let mut received = position.last_revision;
        loop {
            let storing = buffer.storing.is_some();
            let close_at = buffer.close_at(interval).filter(|_| !storing);
            let reading = !(storing && buffer.buffer.is_full(self.options.max_segment_bytes));
            tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    self.flush(position, &mut buffer).await?;
                    return Ok(WatchEnd::Cancelled);
                }
                changed = self.bases.changed(), if self.bases_open => {
                    if changed.is_err() {
                        self.bases_open = false;
                        continue;
                    }
                    if let Some(base) = self
                        .announced()
                        .filter(|b| is_newer(b, &position.base) && self.sealed_alike(b))
                    {
                        self.flush(position, &mut buffer).await?;
                        *position = self.follow(base, None, Some(position));
                        return Ok(WatchEnd::Restart);
                    }
                }
                _ = newer_base_check.tick() => {
                    if let Ok(Some(newest)) = self.newest_own().await
                        && is_newer(&newest, &position.base)
                        && self.sealed_alike(&newest)
                    {
                        self.flush(position, &mut buffer).await?;
                        *position = self.follow(newest, None, Some(position));
                        return Ok(WatchEnd::Restart);
                    }
                }
                stored = stored(&mut buffer.storing) => {
                    self.stored(position, &mut buffer, stored)?;
                    if buffer.is_due(interval, self.options.max_segment_bytes) {
                        buffer.start(&self.store, &position.base);
                    }
                }
                () = sleep_until(close_at) => {
                    buffer.start(&self.store, &position.base);
                }
                _ = ticker.tick() => {
                    if buffer.is_idle() {
                        stream
                            .request_progress()
                            .await
                            .map_err(|e| etcd_error(format!("request the watch progress: {e}")))?;
                    }
                    if last_heard.elapsed() > silence_limit {
                        return Err(etcd_error(format!(
                            "the watch has been silent for {:?}",
                            last_heard.elapsed()
                        )));
                    }
                }
                message = stream.message(), if reading => {
                    last_heard = Instant::now();
                    let response = match message {
                        Ok(Some(response)) => response,
                        Ok(None) => {
                            self.flush(position, &mut buffer).await?;
                            return Err(etcd_error("the watch stream ended".to_string()));
                        }
                        Err(error) => {
                            self.flush(position, &mut buffer).await?;
                            return Err(etcd_error(format!("watch: {error}")));
                        }
                    };
                    if response.canceled() {
                        self.flush(position, &mut buffer).await?;
                        let compacted = response.compact_revision();
                        if compacted > 0 && compacted <= position.last_revision + 1 {
                            // Only the revision watched again is gone: watch
                            // after it, no write is missing.
                            self.compacted = self.compacted.max(compacted);
                            return Ok(WatchEnd::Restart);
                        }
                        if compacted > 0 {
                            self.gap(ChainGap {
                                kind: GapKind::Compacted,
                                after_revision: position.last_revision,
                                message: format!(
                                    "etcd has compacted its history up to revision {}; the chain needs revision {} on",
                                    response.compact_revision(),
                                    position.last_revision + 1
                                ),
                            });
                            return Ok(WatchEnd::Restart);
                        }
                        return Err(etcd_error(format!(
                            "the watch was canceled: {}",
                            response.cancel_reason()
                        )));
                    }
                    if let Some(header) = response.header() {
                        let cluster = format_id(header.cluster_id());
                        if header.cluster_id() != 0 && cluster != position.base.cluster_id {
                            self.flush(position, &mut buffer).await?;
                            self.gap(ChainGap {
                                kind: GapKind::ClusterChanged,
                                after_revision: position.last_revision,
                                message: format!(
                                    "the endpoints serve etcd cluster {cluster}, the full backup is of cluster {}",
                                    position.base.cluster_id
                                ),
                            });
                            return Ok(WatchEnd::Restart);
                        }
                    }
                    if response.created() {
                        continue;
                    }
                    if response.events().is_empty() {
                        // Progress: every event up to the header's revision
                        // has been delivered.
                        let revision = response.header().map_or(0, |h| h.revision());
                        if buffer.is_idle() && revision >= received {
                            self.mark_idle(revision);
                        }
                        continue;
                    }
                    let events: Vec<SegmentEvent> = response
                        .events()
                        .iter()
                        .filter_map(segment_event)
                        .filter(|e| e.revision > position.last_revision)
                        .collect();
                    let unrecorded = new_leases(&events, |l| {
                        position.leases.contains(l) || buffer.has_lease(l)
                    });
                    let learned = match granted_ttls(&client, unrecorded).await {
                        Ok(learned) => learned,
                        Err(message) => {
                            self.flush(position, &mut buffer).await?;
                            return Err(etcd_error(message));
                        }
                    };
                    let now = Utc::now();
                    let delivered_before = received;
                    for event in events {
                        if event.revision > received + 1 {
                            self.flush(position, &mut buffer).await?;
                            return Err(etcd_error(format!(
                                "the watch skipped from revision {received} to {}",
                                event.revision
                            )));
                        }
                        received = event.revision;
                        if let Some(lease) = learned.get(&event.lease) {
                            buffer.buffer.push_lease(lease);
                        }
                        buffer.push(&event, now).map_err(|error| BackupError::Corrupt {
                            location: endpoints.join(","),
                            reason: error.into(),
                        })?;
                    }
                    if received > delivered_before {
                        self.delivered(received, now);
                    }
                    if !storing && buffer.buffer.is_full(self.options.max_segment_bytes) {
                        buffer.start(&self.store, &position.base);
                    }
                }
            }
        }
    }

    /// Waits for the segment being stored, then stores the buffered events
    /// as the next segment, if any: everything delivered is durable (or
    /// the error says why not).
    async fn flush(
        &mut self,
        position: &mut Position,
        segments: &mut Segments,
    ) -> Result<(), BackupError> {
        if segments.storing.is_some() {
            let result = stored(&mut segments.storing).await;
            self.stored(position, segments, result)?;
        }
        if segments.buffer.is_empty() {
            return Ok(());
        }
        segments.start(&self.store, &position.base);
        let result = stored(&mut segments.storing).await;
        self.stored(position, segments, result)
    }

    /// The segment being stored is durable (or failed: the error is the
    /// watch's, which resumes from the chain's end).
    fn stored(
        &mut self,
        position: &mut Position,
        segments: &mut Segments,
        result: StoreResult,
    ) -> Result<(), BackupError> {
        let Some(storing) = segments.storing.take() else {
            return Ok(());
        };
        let segment = result?;
        segments.remember_upload(storing.started.elapsed());
        position.last_revision = segment.last_revision;
        position.segments += 1;
        position.leases.extend(storing.leases);
        self.failures = 0;
        tracing::debug!(
            cluster = %self.options.cluster,
            object = %segment.object,
            events = segment.events,
            "incremental segment written"
        );
        let count = position.segments;
        let covers_received = segment.last_revision >= self.received_high;
        // The oldest write still waiting is the first of the open segment.
        let waiting_since = segments.buffer.opened_at();
        self.progress.send_modify(|p| {
            p.segments = count;
            p.chain_durable_to(segment.last_revision);
            p.durable_at = Some(segment.closed_at);
            if covers_received {
                p.pending_since = None;
            } else if let Some(since) = waiting_since {
                p.pending_since = Some(since);
            }
            p.last_segment = Some(segment);
            p.last_error = None;
        });
        Ok(())
    }

    /// The watch delivered writes up to `revision` at `now`: they wait to
    /// be durable since then, unless older ones already do.
    fn delivered(&mut self, revision: i64, now: DateTime<Utc>) {
        self.received_high = self.received_high.max(revision);
        self.progress.send_if_modified(|p| {
            let waiting = p.pending_since.is_none();
            p.pending_since.get_or_insert(now);
            waiting
        });
    }

    /// etcd confirmed that nothing happened after `revision` and every write
    /// the watch delivered is durable: everything is durable up to it, now.
    fn mark_idle(&mut self, revision: i64) {
        self.failures = 0;
        self.received_high = self.received_high.max(revision);
        self.progress.send_modify(|p| {
            let before = p.durable_revision;
            p.chain_durable_to(revision);
            p.durable_revision = p.durable_revision.max(before);
            p.durable_at = Some(Utc::now());
            p.pending_since = None;
            p.last_error = None;
        });
    }
}

/// What storing a segment gives.
type StoreResult = Result<SegmentMetadata, BackupError>;

/// A segment on its way to the store.
struct Storing {
    task: tokio::task::JoinHandle<StoreResult>,
    /// The leases recorded in it.
    leases: Vec<i64>,
    started: Instant,
}

/// The segment being filled, and the one being stored (at most one:
/// segments become durable in order).
#[derive(Default)]
struct Segments {
    buffer: SegmentBuffer,
    /// When the open segment's first event arrived.
    opened: Option<Instant>,
    storing: Option<Storing>,
    /// The last uploads' durations, newest last.
    uploads: VecDeque<Duration>,
}

impl Segments {
    /// Appends an event received at `now` to the open segment.
    fn push(
        &mut self,
        event: &SegmentEvent,
        now: DateTime<Utc>,
    ) -> Result<(), crate::backup::segment_format::EncodeError> {
        self.buffer.push(event, now)?;
        self.opened.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Whether the lease is recorded in the open segment or the one being
    /// stored.
    fn has_lease(&self, lease: i64) -> bool {
        self.buffer.has_lease(lease)
            || self
                .storing
                .as_ref()
                .is_some_and(|s| s.leases.contains(&lease))
    }

    /// Nothing delivered waits to be stored.
    fn is_idle(&self) -> bool {
        self.buffer.is_empty() && self.storing.is_none()
    }

    /// When the open segment must close for its upload to end within
    /// `interval` of its first event.
    fn close_at(&self, interval: Duration) -> Option<Instant> {
        self.opened
            .map(|opened| opened + interval.saturating_sub(self.upload_allowance(interval)))
    }

    /// Whether the open segment must close now.
    fn is_due(&self, interval: Duration, max_bytes: usize) -> bool {
        !self.buffer.is_empty()
            && (self.buffer.is_full(max_bytes)
                || self
                    .close_at(interval)
                    .is_some_and(|at| at <= Instant::now()))
    }

    /// The time left for the upload: a quarter more than the slowest of
    /// the last uploads and [`DELIVERY_MARGIN`] (a tenth of the interval
    /// before the first), at most half the interval.
    fn upload_allowance(&self, interval: Duration) -> Duration {
        upload_allowance(&self.uploads, interval)
    }

    fn remember_upload(&mut self, took: Duration) {
        if self.uploads.len() == UPLOADS_REMEMBERED {
            self.uploads.pop_front();
        }
        self.uploads.push_back(took);
    }

    /// Closes the open segment and starts storing it after `base`.
    fn start(&mut self, store: &BackupStore, base: &BackupMetadata) {
        let Some(pending) = self.buffer.take(Utc::now()) else {
            return;
        };
        self.opened = None;
        let leases = pending.leases.clone();
        let (store, base) = (store.clone(), base.clone());
        let task = tokio::spawn(async move { store_pending(store, base, pending).await });
        self.storing = Some(Storing {
            task,
            leases,
            started: Instant::now(),
        });
    }
}

async fn store_pending(
    store: BackupStore,
    base: BackupMetadata,
    pending: PendingSegment,
) -> StoreResult {
    store_segment(&store, &base, &pending).await
}

/// See [`Segments::upload_allowance`].
fn upload_allowance(uploads: &VecDeque<Duration>, interval: Duration) -> Duration {
    let slowest = uploads.iter().max().copied();
    let allowance = slowest.map_or(interval / 10, |slowest| {
        slowest.mul_f64(1.25) + DELIVERY_MARGIN
    });
    allowance.min(interval / 2)
}

/// The end of the segment being stored; never, when none is.
async fn stored(storing: &mut Option<Storing>) -> StoreResult {
    match storing {
        Some(storing) => (&mut storing.task).await.unwrap_or_else(|e| {
            Err(BackupError::io(
                "store an incremental segment",
                std::io::Error::other(e),
            ))
        }),
        None => std::future::pending().await,
    }
}

/// At `at`; never, without a time.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The chain a watcher that starts a chain after `base` (durable up to
/// `from_revision`) still needs besides it: of the chain it extended until
/// now (`previous`) and the one it still needed then (`earlier`), the one
/// restoring furthest, when that is beyond `from_revision`. The new chain
/// holds nothing past its base yet, so until it reaches that end the older
/// chain alone holds those writes. A chain of another etcd cluster never
/// counts.
fn still_needed(
    earlier: Option<SupersededChain>,
    previous: Option<&Position>,
    base: &BackupMetadata,
    from_revision: i64,
) -> Option<SupersededChain> {
    let Some(previous) = previous else {
        return earlier;
    };
    if previous.base.cluster_id != base.cluster_id {
        return None;
    }
    let previous = SupersededChain {
        base: base_name(&previous.base),
        last_revision: previous.last_revision,
    };
    [earlier, Some(previous)]
        .into_iter()
        .flatten()
        .filter(|chain| chain.base != base_name(base) && chain.last_revision > from_revision)
        .max_by_key(|chain| chain.last_revision)
}

/// Whether `candidate` is a newer full backup than `current`.
fn is_newer(candidate: &BackupMetadata, current: &BackupMetadata) -> bool {
    candidate.started_at > current.started_at && candidate.revision >= current.revision
}

fn segment_event(event: &etcd_client::Event) -> Option<SegmentEvent> {
    let kv = event.kv()?;
    let kind = match event.event_type() {
        EventType::Put => EventKind::Put,
        EventType::Delete => EventKind::Delete,
    };
    Some(SegmentEvent {
        revision: kv.mod_revision(),
        kind,
        key: kv.key().to_vec(),
        value: match kind {
            EventKind::Put => kv.value().to_vec(),
            EventKind::Delete => Vec::new(),
        },
        lease: kv.lease(),
    })
}

/// A client of the cluster and its watch of the whole keyspace from
/// `from_revision` on.
async fn open_watch(
    endpoints: &[String],
    from_revision: i64,
    options: &IncrementalOptions,
    tls: Option<&ClientTls>,
) -> Result<(Client, WatchStream), etcd_client::Error> {
    let connect = ConnectOptions::new()
        .with_connect_timeout(options.snapshot.settings.connect_timeout)
        .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
        .with_require_leader(true);
    let connect = with_tls(connect, tls);
    let client = Client::connect(endpoints, Some(connect)).await?;
    let watch = WatchOptions::new()
        .with_all_keys()
        .with_start_revision(from_revision)
        .with_progress_notify();
    let stream = client
        .watch_client()
        .max_decoding_message_size(WATCH_MAX_MESSAGE)
        .watch(vec![0u8], Some(watch))
        .await?;
    Ok((client, stream))
}

/// The first revision a watch asks for when every write up to
/// `last_revision` is durable: `last_revision` itself, so that etcd answers
/// progress requests before the next write (it answers only at or past the
/// watch's start revision); the one after when etcd has compacted
/// `last_revision` away (a watch before the compacted revision fails).
fn first_watched(last_revision: i64, compacted: i64) -> i64 {
    if compacted > last_revision {
        last_revision + 1
    } else {
        last_revision.max(1)
    }
}

/// `min` doubling per failure, capped at `max`.
fn back_off(failures: u32, min: Duration, max: Duration) -> Duration {
    let exponent = failures.saturating_sub(1).min(16);
    min.saturating_mul(2u32.saturating_pow(exponent)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_up_to_the_cap() {
        let (min, max) = (Duration::from_secs(1), Duration::from_secs(60));
        assert_eq!(back_off(1, min, max), Duration::from_secs(1));
        assert_eq!(back_off(3, min, max), Duration::from_secs(4));
        assert_eq!(back_off(40, min, max), Duration::from_secs(60));
    }

    #[test]
    fn a_segment_closes_early_enough_for_its_upload() {
        let interval = Duration::from_secs(4);
        let mut uploads = VecDeque::new();
        assert_eq!(
            upload_allowance(&uploads, interval),
            Duration::from_millis(400),
            "a tenth of the interval before any upload"
        );
        uploads.extend([Duration::from_millis(80), Duration::from_millis(200)]);
        assert_eq!(
            upload_allowance(&uploads, interval),
            Duration::from_millis(250) + DELIVERY_MARGIN,
            "the slowest recent upload, a quarter more and the watch's delivery"
        );
        uploads.push_back(Duration::from_secs(30));
        assert_eq!(
            upload_allowance(&uploads, interval),
            Duration::from_secs(2),
            "never more than half the interval"
        );
    }

    /// A full backup of etcd cluster `cluster_id` at `revision`.
    fn full(cluster_id: &str, revision: i64) -> BackupMetadata {
        let started_at =
            DateTime::<Utc>::from_timestamp(1_772_000_000 + revision, 0).expect("a time");
        BackupMetadata {
            format: 1,
            namespace: "prod".into(),
            cluster: "main".into(),
            cluster_id: cluster_id.into(),
            member_id: "2".into(),
            revision,
            etcd_version: "3.6.0".into(),
            snapshot_bytes: 1,
            sha256: String::new(),
            object: format!("full-{revision}-r{revision}.db.zst"),
            compression: "zstd".into(),
            encryption: None,
            stored_bytes: 1,
            stored_sha256: String::new(),
            started_at,
            completed_at: started_at,
            written_by: None,
        }
    }

    /// The chain after `base`, durable up to `last_revision`.
    fn at(base: &BackupMetadata, last_revision: i64) -> Position {
        Position {
            base: base.clone(),
            last_revision,
            segments: 1,
            leases: KnownLeases::default(),
        }
    }

    #[test]
    fn the_chain_left_for_a_newer_base_stays_needed_while_it_restores_further() {
        let (first, second) = (full("c1", 100), full("c1", 110));
        let first_end = at(&first, 120);
        let needed = still_needed(None, Some(&first_end), &second, second.revision);
        assert_eq!(
            needed,
            Some(SupersededChain {
                base: base_name(&first),
                last_revision: 120
            })
        );
        // Moving on again before the second chain caught up: the first
        // chain still restores furthest.
        let third = full("c1", 115);
        let again = still_needed(needed.clone(), Some(&at(&second, 112)), &third, 115);
        assert_eq!(again, needed);

        // A base taken after the chain's end (a gap, or a quiet cluster)
        // needs nothing of it; nor does a base of another etcd cluster.
        assert_eq!(
            still_needed(None, Some(&at(&first, 105)), &second, 110),
            None
        );
        assert_eq!(
            still_needed(needed.clone(), Some(&first_end), &full("c2", 50), 50),
            None
        );
        // A watcher starting (nothing extended before) keeps what it had.
        assert_eq!(still_needed(None, None, &second, 110), None);
    }

    #[test]
    fn the_watch_starts_at_the_durable_revision_unless_compacted() {
        assert_eq!(first_watched(41, 0), 41);
        assert_eq!(first_watched(41, 41), 41, "revision 41 itself is kept");
        assert_eq!(first_watched(41, 42), 42);
        assert_eq!(first_watched(0, 0), 1, "0 would mean from now on");
    }
}
