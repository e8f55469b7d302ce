//! etcd-lab-node
#![forbid(unsafe_code)]
