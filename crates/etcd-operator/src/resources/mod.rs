//! Pure builders of the Kubernetes objects of a cluster: Services, PVCs,
//! member Pods and the PodDisruptionBudget. No I/O: spec in, objects out.

pub mod names;

pub use names::MemberAddressing;
