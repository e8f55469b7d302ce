//! Before a new member's first start, the guard waits until a peer accepts
//! a connection from this Pod.
//!
//! A joining etcd (`--initial-cluster-state=existing`, empty data dir)
//! first asks its peers for the member list over their peer URLs. A Pod
//! that has just got its address may not reach them yet: the network
//! policy that admits the cluster's members lets the new address in only
//! once the network plugin has programmed it, a fraction of a second after
//! the Pod starts (0.26 s on the lab). A connection attempt made before
//! that is dropped, and the kernel sends its second attempt a whole second
//! later (TCP's initial retransmission timeout): on the lab's bench a
//! replacement lost 1.0 s there. The guard instead tries each peer every
//! [`RETRY_INTERVAL`] with a short connect timeout and starts etcd at the
//! first answer, or after [`WAIT_LIMIT`] whatever happens (etcd then
//! retries on its own, as it would have). Nothing is read or written: the
//! wait only chooses when etcd starts.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

/// How long one connection attempt may take before the next.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);

/// The pause between two rounds of attempts.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(50);

/// How long the guard waits at most before it starts etcd anyway.
pub const WAIT_LIMIT: Duration = Duration::from_secs(5);

/// The peer addresses (`host:port`) of etcd's `--initial-cluster`, except
/// those of the member itself (`--name`); empty when either flag is
/// missing.
pub fn peer_addresses(etcd_args: &[String]) -> Vec<String> {
    let Some(own_name) = super::first_join::flag_value(etcd_args, "--name") else {
        return Vec::new();
    };
    let Some(cluster) = super::first_join::flag_value(etcd_args, "--initial-cluster") else {
        return Vec::new();
    };
    let mut peers = Vec::new();
    for entry in cluster.split(',') {
        let Some((name, url)) = entry.trim().split_once('=') else {
            continue;
        };
        if name == own_name {
            continue;
        }
        if let Some(address) = host_and_port(url)
            && !peers.contains(&address)
        {
            peers.push(address);
        }
    }
    peers
}

/// `host:port` of a peer URL (`http://host:port`, `https://host:port/`);
/// `None` without a scheme or a port.
fn host_and_port(url: &str) -> Option<String> {
    let (_, rest) = url.trim().split_once("://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    (!host.is_empty() && port.parse::<u16>().is_ok()).then(|| authority.to_owned())
}

/// How the wait for a peer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerWait {
    /// `peer` accepted a connection `after` the wait began.
    Reached { peer: String, after: Duration },
    /// No peer accepted one within the limit (or there is none to try).
    NotReached { after: Duration },
}

/// Tries every peer in turn, round after round, until one accepts a TCP
/// connection or `limit` has passed.
pub async fn wait_for_a_peer(peers: &[String], limit: Duration) -> PeerWait {
    let started = Instant::now();
    if peers.is_empty() {
        return PeerWait::NotReached {
            after: started.elapsed(),
        };
    }
    loop {
        for peer in peers {
            if accepts(peer).await {
                return PeerWait::Reached {
                    peer: peer.clone(),
                    after: started.elapsed(),
                };
            }
            if started.elapsed() >= limit {
                return PeerWait::NotReached {
                    after: started.elapsed(),
                };
            }
        }
        tokio::time::sleep(RETRY_INTERVAL).await;
    }
}

/// One connection attempt: the name resolved and a TCP handshake done
/// within [`CONNECT_TIMEOUT`]. The connection is closed at once.
async fn accepts(peer: &str) -> bool {
    matches!(
        tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(peer)).await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn the_peers_are_the_initial_cluster_without_the_member_itself() {
        let etcd = args(&[
            "--name=a-1",
            "--initial-cluster=a-0=https://a-0.a-peer.ns.svc:2380,a-1=https://a-1.a-peer.ns.svc:2380,a-2=http://a-2.a-peer.ns.svc:2380/",
            "--initial-cluster-state=existing",
        ]);
        assert_eq!(
            peer_addresses(&etcd),
            vec!["a-0.a-peer.ns.svc:2380", "a-2.a-peer.ns.svc:2380"]
        );
    }

    #[test]
    fn flags_given_as_two_arguments_count_and_the_last_one_wins() {
        let etcd = args(&[
            "--name",
            "x",
            "--initial-cluster",
            "x=http://10.0.0.1:2380,y=http://10.0.0.2:2380",
            "--name=y",
        ]);
        assert_eq!(peer_addresses(&etcd), vec!["10.0.0.1:2380"]);
    }

    #[test]
    fn without_a_name_a_cluster_or_a_port_there_is_nothing_to_try() {
        assert!(peer_addresses(&args(&["--initial-cluster=a=http://h:2380"])).is_empty());
        assert!(peer_addresses(&args(&["--name=a"])).is_empty());
        assert!(
            peer_addresses(&args(&[
                "--name=a",
                "--initial-cluster=b=http://h,c=h:2380"
            ]))
            .is_empty()
        );
    }

    #[tokio::test]
    async fn a_listening_peer_is_reached_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listener");
        let address = listener.local_addr().expect("address").to_string();
        let wait = wait_for_a_peer(std::slice::from_ref(&address), WAIT_LIMIT).await;
        let PeerWait::Reached { peer, after } = wait else {
            panic!("not reached: {wait:?}");
        };
        assert_eq!(peer, address);
        assert!(after < WAIT_LIMIT, "{after:?}");
    }

    #[tokio::test]
    async fn a_peer_that_starts_listening_later_is_reached_then() {
        // A port that is free now and taken 300 ms later.
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        let address = probe.local_addr().expect("address");
        drop(probe);
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .expect("listener");
            tokio::time::sleep(Duration::from_secs(10)).await;
            drop(listener);
        });
        let wait = wait_for_a_peer(&[address.to_string()], WAIT_LIMIT).await;
        late.abort();
        let PeerWait::Reached { after, .. } = wait else {
            panic!("not reached: {wait:?}");
        };
        assert!(after >= Duration::from_millis(300), "{after:?}");
    }

    #[tokio::test]
    async fn with_no_peer_answering_etcd_starts_after_the_limit() {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
        let address = probe.local_addr().expect("address").to_string();
        drop(probe);
        let limit = Duration::from_millis(400);
        let wait = wait_for_a_peer(&[address], limit).await;
        let PeerWait::NotReached { after } = wait else {
            panic!("reached: {wait:?}");
        };
        assert!(after >= limit, "{after:?}");
    }

    #[tokio::test]
    async fn with_no_peer_to_try_nothing_is_waited_for() {
        let wait = wait_for_a_peer(&[], WAIT_LIMIT).await;
        assert!(matches!(wait, PeerWait::NotReached { after } if after < WAIT_LIMIT));
    }
}
