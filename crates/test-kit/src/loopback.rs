//! Ports on loopback for the processes a test starts.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

/// A loopback port below the kernel's ephemeral range (32768+), so that no
/// outgoing connection of a running etcd can take it between this check and
/// the process that binds it; a counter keeps the tests of one run apart,
/// the process id keeps concurrent runs apart.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 40) as u16 * 300;
    loop {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % 300;
        let port = base + offset;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// `http://127.0.0.1:<a free port>`.
pub fn free_url() -> String {
    format!("http://127.0.0.1:{}", free_port())
}
