//! The programs the operator's binary runs inside the Pods it creates:
//! the member guard of every member Pod and the steps of the restore Pod.

pub mod member_guard;
pub mod restore;
