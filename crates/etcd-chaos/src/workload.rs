//! The campaign's clients: each one, in a loop until stopped, puts,
//! compares-and-swaps, deletes and reads (linearizable gets) keys of the
//! current epoch through one member at a time, and records every
//! operation with its invocation and return times. A write whose outcome
//! is unknown (an error, a timeout) is recorded as indeterminate; a failed
//! read is left out (it constrains nothing). Every write value is unique
//! (`c<client>-<n>`), so each read names the write it saw.
//!
//! Keys are spread over epochs (the campaign moves to a new epoch at each
//! fault), so that each key's history stays short and its check fast.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, ConnectOptions, Txn, TxnOp};
use linearizability::{Call, Operation, Output};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::endpoints::Endpoints;
use crate::seed::SeededRng;

/// Where every key of a campaign lives.
pub const PREFIX: &str = "/chaos/";

/// The name of key `index` of `epoch`.
pub fn key_name(epoch: u64, index: u64) -> String {
    format!("{PREFIX}e{epoch:05}/k{index}")
}

/// How the clients work.
#[derive(Clone, Copy, Debug)]
pub struct WorkloadOptions {
    /// Concurrent clients.
    pub clients: u64,
    /// Keys of one epoch.
    pub keys_per_epoch: u64,
    /// Pause between two operations of a client.
    pub pause: Duration,
    /// How long an operation may take before it counts as indeterminate.
    pub timeout: Duration,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        Self {
            clients: 4,
            keys_per_epoch: 6,
            pause: Duration::from_millis(20),
            timeout: Duration::from_secs(3),
        }
    }
}

/// The clients, running until [`Workload::stop`].
pub struct Workload {
    stop: Arc<AtomicBool>,
    epoch: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<ClientLog>>,
}

/// What one client (or all of them) did.
#[derive(Debug, Default)]
pub struct ClientLog {
    /// Every operation, acknowledged or indeterminate.
    pub operations: Vec<Operation>,
    /// The revision of every acknowledged change (put, successful
    /// compare-and-swap, delete that removed a key).
    pub committed: Vec<u64>,
    /// Writes whose outcome is unknown.
    pub indeterminate_writes: u64,
    /// Reads that failed (left out of the history).
    pub failed_reads: u64,
}

impl Workload {
    /// Starts `options.clients` clients on `endpoints`, their choices drawn
    /// from `seed`.
    pub fn start(endpoints: Endpoints, clock: Clock, seed: u64, options: WorkloadOptions) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Arc::new(AtomicU64::new(0));
        let tasks = (0..options.clients)
            .map(|id| {
                let client = Client {
                    id,
                    endpoints: endpoints.clone(),
                    clock,
                    rng: SeededRng::new(seed ^ (id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    options,
                    known: HashMap::new(),
                    written: 0,
                    log: ClientLog::default(),
                };
                tokio::spawn(client.run(stop.clone(), epoch.clone()))
            })
            .collect();
        Self { stop, epoch, tasks }
    }

    /// Moves the clients to the keys of `epoch`.
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::SeqCst);
    }

    /// Stops the clients (after the operation each has in flight) and
    /// merges their logs.
    pub async fn stop(self) -> ClientLog {
        self.stop.store(true, Ordering::SeqCst);
        let mut all = ClientLog::default();
        for task in self.tasks {
            if let Ok(log) = task.await {
                all.operations.extend(log.operations);
                all.committed.extend(log.committed);
                all.indeterminate_writes += log.indeterminate_writes;
                all.failed_reads += log.failed_reads;
            }
        }
        all.committed.sort_unstable();
        all.committed.dedup();
        all
    }
}

/// One client.
struct Client {
    id: u64,
    endpoints: Endpoints,
    clock: Clock,
    rng: SeededRng,
    options: WorkloadOptions,
    /// What this client last saw under a key (its compare-and-swaps
    /// expect it).
    known: HashMap<String, Option<String>>,
    written: u64,
    log: ClientLog,
}

/// What a request returned: its output and, for a change, its revision.
struct Done {
    output: Output,
    committed: Option<u64>,
}

impl Client {
    async fn run(mut self, stop: Arc<AtomicBool>, epoch: Arc<AtomicU64>) -> ClientLog {
        let mut connection: Option<etcd_client::Client> = None;
        let mut attempt = self.id;
        while !stop.load(Ordering::SeqCst) {
            let Some(etcd) = connection.as_mut() else {
                connection = self.connect(attempt).await;
                if connection.is_none() {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                continue;
            };
            let key = key_name(
                epoch.load(Ordering::SeqCst),
                self.rng.below(self.options.keys_per_epoch),
            );
            let call = self.next_call(key);
            let invoked_at = self.clock.now();
            let result = tokio::time::timeout(self.options.timeout, perform(etcd, &call)).await;
            match result {
                Ok(Ok(done)) => {
                    let returned_at = self.clock.now();
                    self.remember(&call, &done.output);
                    if let Some(revision) = done.committed {
                        self.log.committed.push(revision);
                    }
                    self.log.operations.push(Operation::returned(
                        self.id,
                        call,
                        invoked_at,
                        returned_at,
                        done.output,
                    ));
                }
                Ok(Err(_)) | Err(_) => {
                    self.known.remove(call.key());
                    if matches!(call, Call::Get { .. }) {
                        self.log.failed_reads += 1;
                    } else {
                        self.log.indeterminate_writes += 1;
                        self.log
                            .operations
                            .push(Operation::indeterminate(self.id, call, invoked_at));
                    }
                    // Another member next time.
                    connection = None;
                    attempt += 1;
                }
            }
            tokio::time::sleep(self.options.pause).await;
        }
        self.log
    }

    /// A client of one member: the `attempt`-th of the current endpoints.
    async fn connect(&self, attempt: u64) -> Option<etcd_client::Client> {
        let urls = self.endpoints.current().await;
        if urls.is_empty() {
            return None;
        }
        let url = urls[usize::try_from(attempt).unwrap_or(0) % urls.len()].clone();
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(self.options.timeout);
        etcd_client::Client::connect([url], Some(options))
            .await
            .ok()
    }

    /// 40 % reads, 30 % puts, 22 % compare-and-swaps, 8 % deletes.
    fn next_call(&mut self, key: String) -> Call {
        let roll = self.rng.below(100);
        if roll < 40 {
            return Call::get(key);
        }
        if roll >= 92 {
            return Call::delete(key);
        }
        self.written += 1;
        let value = format!("c{}-{}", self.id, self.written);
        if roll < 70 {
            Call::put(key, value)
        } else {
            let expected = self.known.get(&key).cloned().flatten();
            Call::compare_and_swap(key, expected.as_deref(), value)
        }
    }

    /// What the client knows of the key after an acknowledged operation.
    fn remember(&mut self, call: &Call, output: &Output) {
        let key = call.key().to_owned();
        match (call, output) {
            (Call::Put { value, .. }, _) => {
                self.known.insert(key, Some(value.clone()));
            }
            (Call::Get { .. }, Output::Read(value)) => {
                self.known.insert(key, value.clone());
            }
            (Call::CompareAndSwap { new, .. }, Output::Swapped(true)) => {
                self.known.insert(key, Some(new.clone()));
            }
            (Call::CompareAndSwap { .. }, _) => {
                self.known.remove(&key);
            }
            (Call::Delete { .. }, _) => {
                self.known.insert(key, None);
            }
            _ => {}
        }
    }
}

/// Sends `call` to etcd.
async fn perform(etcd: &mut etcd_client::Client, call: &Call) -> Result<Done, etcd_client::Error> {
    match call {
        Call::Put { key, value } => {
            let response = etcd.put(key.as_str(), value.as_str(), None).await?;
            Ok(Done {
                output: Output::Ok,
                committed: response.header().map(|h| revision(h.revision())),
            })
        }
        Call::Get { key } => {
            let response = etcd.get(key.as_str(), None).await?;
            let value = response
                .kvs()
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
            Ok(Done {
                output: Output::Read(value),
                committed: None,
            })
        }
        Call::CompareAndSwap { key, expected, new } => {
            let compare = match expected {
                Some(value) => Compare::value(key.as_str(), CompareOp::Equal, value.as_str()),
                None => Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            };
            let txn =
                Txn::new()
                    .when([compare])
                    .and_then([TxnOp::put(key.as_str(), new.as_str(), None)]);
            let response = etcd.txn(txn).await?;
            let swapped = response.succeeded();
            Ok(Done {
                output: Output::Swapped(swapped),
                committed: swapped
                    .then(|| response.header().map(|h| revision(h.revision())))
                    .flatten(),
            })
        }
        Call::Delete { key } => {
            let response = etcd.delete(key.as_str(), None).await?;
            Ok(Done {
                output: Output::Ok,
                committed: (response.deleted() > 0)
                    .then(|| response.header().map(|h| revision(h.revision())))
                    .flatten(),
            })
        }
    }
}

fn revision(revision: i64) -> u64 {
    u64::try_from(revision).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_an_epoch_share_its_prefix() {
        assert_eq!(key_name(3, 1), "/chaos/e00003/k1");
        assert!(key_name(12, 0).starts_with(PREFIX));
    }
}
