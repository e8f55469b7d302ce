//! `kubectl etcd`: a kubectl plugin for durable etcd clusters. It reads and
//! writes the operator's resources through the Kubernetes API, as a person
//! would with kubectl, and never talks to etcd itself.
//!
//! - [`args`]: the command line;
//! - [`connect`]: the client, as kubectl chooses it;
//! - [`render`]: status → text or JSON (pure);
//! - [`approval`]: which approval of a restore to write (pure);
//! - [`destination`]: a backup destination from flags (pure);
//! - [`commands`]: one module per subcommand;
//! - [`progress`], [`error`]: waiting, and failures with the next step.
#![forbid(unsafe_code)]

pub mod approval;
pub mod args;
pub mod commands;
pub mod connect;
pub mod destination;
pub mod error;
pub mod progress;
pub mod render;
