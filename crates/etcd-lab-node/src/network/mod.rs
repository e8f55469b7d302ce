//! The lab network: router, node and pod namespaces, client namespace and
//! partition fault injection. Built with `ip` (iproute2) and `nft`.

pub mod addressing;
mod command;
mod partition;
mod topology;

use etcd_lab_common::IoError;

pub use addressing::{CLIENT_NETNS, ROUTER_NETNS, UPLINK_HOST};
pub use partition::{PartitionKind, heal_node, partition_node};
pub use topology::{
    setup_client, setup_node, setup_pod, setup_router, teardown_all, teardown_node, teardown_pod,
};

/// Errors of the network module.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// Running a program or writing a file failed.
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("node index {0} is outside 1..=249")]
    InvalidIndex(u8),
    #[error("unknown partition kind {0:?} (expected peers, apiserver or all)")]
    InvalidPartition(String),
    #[error("namespaces left after teardown: {0}")]
    Leftover(String),
}
