//! What every controller of this operator shares: the `EtcdCluster`
//! reconciler ([`crate::reconcile`]) and the backup controllers
//! ([`crate::backup::controller`]) are built from these pieces.
//!
//! - [`scope`]: the namespace a controller watches, and untyped watches;
//! - [`unreadable`]: decoding an untyped object, and reporting one this
//!   operator cannot read on that object alone;
//! - [`blocked`]: a pass that stops before planning says why in one
//!   condition on the object;
//! - [`conditions`]: conditions whose transition time moves only with
//!   their status (pure);
//! - [`status_writer`]: the server-side apply of a whole status, skipped
//!   when nothing changed;
//! - [`events`]: Events as values, published without failing a pass;
//! - [`category`]: the category of a failed pass and when to retry it;
//! - [`member_endpoints`]: the member Pods' client URLs, dialled by pod IP.
//!
//! Nothing here knows a resource kind of this operator: the kit sits below
//! the API types, the planner and the controllers.

pub mod blocked;
pub mod category;
pub mod conditions;
pub mod events;
pub mod member_endpoints;
pub mod ownership;
pub mod scope;
pub mod status_writer;
pub mod unreadable;

pub use category::Category;
pub use conditions::WithConditions;
pub use status_writer::{Replaces, StatusError, StatusWriter};
