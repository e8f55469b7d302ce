//! etcd-lab-node: the lab's node agent (plays the kubelet), the container
//! runner (`etcd-lab run-container`) and the lab network.
#![forbid(unsafe_code)]

pub mod agent;
pub mod config;
pub mod container;
pub mod image;
pub(crate) mod kubelet_api;
pub mod network;
pub(crate) mod node_context;
pub mod pod;
pub mod probe;
pub mod volume;
