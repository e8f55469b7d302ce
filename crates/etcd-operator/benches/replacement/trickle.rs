//! A trickle of small writes while a member is replaced, as any cluster in
//! use has. Without any write, a member that joined from a snapshot can stay
//! unready for good: etcd (3.6.16, 3.7.3) does not move its applied index
//! (the one `processInternalRaftRequestOnce` compares with the commit index)
//! when it applies a snapshot, so once the snapshot is more than 5,000
//! entries ahead of it, the new member's own proposals, its first "publish"
//! included, fail with "too many requests" until it applies a new entry, and
//! it serves no client before it has published.

use std::time::Duration;

use etcd_client::{Client, PutOptions};

/// Interval between two writes.
pub const INTERVAL: Duration = Duration::from_millis(200);

/// Writes one small key every [`INTERVAL`] until dropped; failed writes
/// (during a membership change) are not retried.
pub struct Trickle(tokio::task::JoinHandle<()>);

impl Trickle {
    pub fn start(mut client: Client) -> Self {
        Self(tokio::spawn(async move {
            for i in 0_u64.. {
                let _ = client
                    .put(
                        "/bench/trickle",
                        i.to_le_bytes().to_vec(),
                        None::<PutOptions>,
                    )
                    .await;
                tokio::time::sleep(INTERVAL).await;
            }
        }))
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.0.abort();
    }
}
