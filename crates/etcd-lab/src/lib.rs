//! etcd-lab library: control plane, orchestration and fault injection.
#![forbid(unsafe_code)]
