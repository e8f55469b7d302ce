//! etcd-lab-services
#![forbid(unsafe_code)]
