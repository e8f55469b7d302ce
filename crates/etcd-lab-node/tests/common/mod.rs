//! What the network tests share: threads in a network namespace, a TCP
//! listener there and a connection check.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use etcd_lab_node::network::{self, addressing};

use nix::sched::CloneFlags;

pub const PORT: u16 = 8080;

pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Runs `f` on a thread that entered network namespace `netns`.
pub fn in_netns<T: Send + 'static>(
    netns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let path = Path::new("/run/netns").join(netns);
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("open the namespace");
        nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

/// A TCP server in `netns` on `ip:PORT` that accepts until stopped.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub fn start(netns: &str, ip: Ipv4Addr) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = in_netns(netns, move || {
            let listener = TcpListener::bind((ip, PORT)).expect("bind");
            listener.set_nonblocking(true).expect("nonblocking");
            ready_tx.send(()).expect("ready");
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => drop(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        ready_rx.recv().expect("listener ready");
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether a TCP connection from `netns` to `ip:PORT` is made within `within`.
pub fn connects(netns: &str, ip: Ipv4Addr, within: Duration) -> bool {
    in_netns(netns, move || {
        TcpStream::connect_timeout(&SocketAddr::from((ip, PORT)), within).is_ok()
    })
    .join()
    .expect("connect thread")
}

/// A lab node's namespace and bridge made for one test, with the router
/// made too when none is up.
pub struct TestNode {
    pub name: &'static str,
    pub index: u8,
    pub netns: String,
    router_made: bool,
}

impl TestNode {
    /// Sets up node `name` with index `index`; `None` (the test is skipped
    /// and passes) when not root.
    pub fn set_up(name: &'static str, index: u8) -> Option<Self> {
        if !is_root() {
            eprintln!("skipped: needs root");
            return None;
        }
        let router_made = !Path::new("/run/netns").join(network::ROUTER_NETNS).exists();
        if router_made {
            network::setup_router().expect("router");
        }
        network::setup_node(name, index).expect("node");
        Some(Self {
            name,
            index,
            netns: addressing::node_netns_name(name),
            router_made,
        })
    }

    /// Removes the node, and the router if this test made it.
    pub fn tear_down(self) {
        network::teardown_node(self.name, self.index);
        if self.router_made {
            network::teardown_all().expect("teardown");
        }
    }
}
