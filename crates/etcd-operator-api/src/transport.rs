//! How a cluster's members talk: plaintext, mutual TLS, and the two
//! stages between that turn TLS on for a running plaintext cluster without
//! losing quorum or a client.
//!
//! etcd serves plain HTTP and TLS on one client port at once (it tells the
//! two apart by the first bytes of a connection), but not on one peer
//! port, and a member's peer URL changes only through etcd's member
//! update, which every member must be able to follow at once. So turning
//! TLS on is four rolls of the member Pods and two rounds of peer-URL
//! updates, each waiting for the one before:
//!
//! | stage | clients (2379) | peers listen on | peer URLs in the member list |
//! | --- | --- | --- | --- |
//! | [`Transport::Plaintext`] | http | http 2380 | http 2380 |
//! | [`Transport::BridgingPeers`] | http and https | http 2380, https 2382 | http 2380 → https 2382, one member at a time |
//! | [`Transport::ReturningPeers`] | http and https | https 2382, https 2380 | https 2382 → https 2380, one member at a time |
//! | [`Transport::Tls`] | https | https 2380 | https 2380 |
//!
//! The member list decides the stage ([`desired`]): while any member's
//! peer URL is plain HTTP the members must listen on both, and so on. A
//! member's Pod runs the stage its command line says ([`of_listen_urls`]);
//! clients may use TLS from `ReturningPeers` on, and plain HTTP until
//! `Tls`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// etcd's client port.
pub const CLIENT_PORT: u16 = 2379;
/// etcd's peer port.
pub const PEER_PORT: u16 = 2380;
/// The peer port that serves TLS while a plaintext cluster's peer URLs
/// move to TLS (2380 still serves plain HTTP then).
pub const BRIDGE_PEER_PORT: u16 = 2382;

/// What a member's Pod listens on, for clients and peers.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum Transport {
    /// Plain HTTP for clients and peers.
    Plaintext,
    /// Turning TLS on, first stage: clients on HTTP and TLS, peers on plain
    /// HTTP (2380) and TLS (2382) while the peer URLs move to TLS.
    BridgingPeers,
    /// Turning TLS on, second stage: clients on HTTP and TLS, peers on TLS
    /// at 2382 and 2380 while the peer URLs move back to port 2380.
    ReturningPeers,
    /// Mutual TLS for clients and peers.
    Tls,
}

impl Transport {
    /// Whether the members serve TLS (and need their certificates).
    pub fn serves_tls(self) -> bool {
        self != Self::Plaintext
    }

    /// Whether TLS is being turned on.
    pub fn is_turning_tls_on(self) -> bool {
        matches!(self, Self::BridgingPeers | Self::ReturningPeers)
    }

    /// The scheme a client (the operator, a backup) uses when every member
    /// Pod runs this stage or the one before it: `https` once the members
    /// before (`BridgingPeers`) serve TLS too.
    pub fn client_scheme(self) -> &'static str {
        match self {
            Self::Plaintext | Self::BridgingPeers => "http",
            Self::ReturningPeers | Self::Tls => "https",
        }
    }

    /// Whether clients connect with TLS (see [`Transport::client_scheme`]).
    pub fn clients_use_tls(self) -> bool {
        self.client_scheme() == "https"
    }

    /// `--listen-client-urls`.
    pub fn listen_client_urls(self) -> String {
        let http = format!("http://0.0.0.0:{CLIENT_PORT}");
        let https = format!("https://0.0.0.0:{CLIENT_PORT}");
        match self {
            Self::Plaintext => http,
            Self::BridgingPeers | Self::ReturningPeers => format!("{http},{https}"),
            Self::Tls => https,
        }
    }

    /// `--listen-peer-urls`.
    pub fn listen_peer_urls(self) -> String {
        match self {
            Self::Plaintext => format!("http://0.0.0.0:{PEER_PORT}"),
            Self::BridgingPeers => {
                format!("http://0.0.0.0:{PEER_PORT},https://0.0.0.0:{BRIDGE_PEER_PORT}")
            }
            Self::ReturningPeers => {
                format!("https://0.0.0.0:{BRIDGE_PEER_PORT},https://0.0.0.0:{PEER_PORT}")
            }
            Self::Tls => format!("https://0.0.0.0:{PEER_PORT}"),
        }
    }

    /// The client URLs a member advertises, for its host.
    pub fn client_urls(self, host: &str) -> Vec<String> {
        match self {
            Self::Plaintext => vec![format!("http://{host}:{CLIENT_PORT}")],
            Self::BridgingPeers | Self::ReturningPeers => vec![
                format!("http://{host}:{CLIENT_PORT}"),
                format!("https://{host}:{CLIENT_PORT}"),
            ],
            Self::Tls => vec![format!("https://{host}:{CLIENT_PORT}")],
        }
    }

    /// The peer URL a member added during this stage is given (one the
    /// members of this stage all listen on and the next stage updates).
    pub fn new_member_peer_url(self, host: &str) -> String {
        match self {
            Self::Plaintext | Self::BridgingPeers => format!("http://{host}:{PEER_PORT}"),
            Self::ReturningPeers => format!("https://{host}:{BRIDGE_PEER_PORT}"),
            Self::Tls => format!("https://{host}:{PEER_PORT}"),
        }
    }

    /// The peer URL a member's `url` changes to while the members run this
    /// stage, if it changes: plain HTTP to TLS on 2382 while bridging, TLS
    /// on 2382 back to 2380 while returning.
    pub fn peer_url_update(self, url: &str) -> Option<String> {
        let form = PeerUrl::parse(url)?;
        match (self, form.kind) {
            (Self::BridgingPeers, PeerUrlKind::Http) => {
                Some(format!("https://{}:{BRIDGE_PEER_PORT}", form.host))
            }
            (Self::ReturningPeers, PeerUrlKind::HttpsBridge) => {
                Some(format!("https://{}:{PEER_PORT}", form.host))
            }
            _ => None,
        }
    }

    /// In words, for status and Events.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Plaintext => "plain HTTP for clients and peers",
            Self::BridgingPeers => {
                "turning TLS on: members serve clients on HTTP and TLS and peers on HTTP (2380) and TLS (2382) while the peer URLs move to TLS"
            }
            Self::ReturningPeers => {
                "turning TLS on: members serve clients on HTTP and TLS and peers on TLS at 2382 and 2380 while the peer URLs move back to 2380"
            }
            Self::Tls => "mutual TLS for clients and peers",
        }
    }
}

/// What the spec and the running cluster ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    /// Whether the members are to serve TLS.
    pub tls: bool,
    /// Why the spec is not followed, if it is not.
    pub refused: Option<String>,
}

/// The stage the members must run: from the member list's peer URLs when
/// it was read (`None` otherwise: the stage stays where it was).
pub fn desired<'a>(
    intent: &Intent,
    running: Transport,
    peer_urls: Option<impl IntoIterator<Item = &'a str>>,
) -> Transport {
    let Some(urls) = peer_urls else {
        return running;
    };
    let kinds: Vec<PeerUrlKind> = urls
        .into_iter()
        .filter_map(PeerUrl::parse)
        .map(|u| u.kind)
        .collect();
    if kinds.is_empty() {
        return running;
    }
    let any = |kind| kinds.contains(&kind);
    if !intent.tls {
        // Only a plaintext member list is kept plaintext; one that serves
        // TLS anywhere stays as it runs (the intent reports the refusal).
        return if any(PeerUrlKind::Http) && kinds.len() == count(&kinds, PeerUrlKind::Http) {
            Transport::Plaintext
        } else {
            running
        };
    }
    if any(PeerUrlKind::Http) {
        Transport::BridgingPeers
    } else if any(PeerUrlKind::HttpsBridge) {
        Transport::ReturningPeers
    } else {
        Transport::Tls
    }
}

fn count(kinds: &[PeerUrlKind], kind: PeerUrlKind) -> usize {
    kinds.iter().filter(|k| **k == kind).count()
}

/// The stage a member Pod runs, from its etcd `--listen-peer-urls` and
/// `--listen-client-urls` values; `None` for a command line of no stage.
pub fn of_listen_urls(peer: &str, client: &str) -> Option<Transport> {
    [
        Transport::Plaintext,
        Transport::BridgingPeers,
        Transport::ReturningPeers,
        Transport::Tls,
    ]
    .into_iter()
    .find(|stage| stage.listen_peer_urls() == peer && stage.listen_client_urls() == client)
}

/// The stage of a member Pod's etcd command line (see [`of_listen_urls`]).
pub fn of_etcd_args<'a>(args: impl IntoIterator<Item = &'a str>) -> Option<Transport> {
    let (mut peer, mut client) = (None, None);
    for arg in args {
        if let Some(value) = arg.strip_prefix("--listen-peer-urls=") {
            peer = Some(value);
        } else if let Some(value) = arg.strip_prefix("--listen-client-urls=") {
            client = Some(value);
        }
    }
    of_listen_urls(peer?, client?)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerUrlKind {
    Http,
    HttpsBridge,
    Https,
}

struct PeerUrl<'a> {
    host: &'a str,
    kind: PeerUrlKind,
}

impl<'a> PeerUrl<'a> {
    fn parse(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let (host, port) = rest.trim_end_matches('/').rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let kind = match (scheme, port) {
            ("http", PEER_PORT) => PeerUrlKind::Http,
            ("https", BRIDGE_PEER_PORT) => PeerUrlKind::HttpsBridge,
            ("https", PEER_PORT) => PeerUrlKind::Https,
            _ => return None,
        };
        Some(Self { host, kind })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "main-0.main-peer.prod.svc.cluster.local";

    fn url(scheme: &str, port: u16) -> String {
        format!("{scheme}://{HOST}:{port}")
    }

    fn tls_on() -> Intent {
        Intent {
            tls: true,
            refused: None,
        }
    }

    #[test]
    fn the_member_list_walks_the_stages_forward() {
        let http = url("http", PEER_PORT);
        let bridge = url("https", BRIDGE_PEER_PORT);
        let https = url("https", PEER_PORT);
        let stage = |urls: &[&str]| desired(&tls_on(), Transport::Plaintext, Some(urls.to_vec()));
        assert_eq!(stage(&[&http, &http, &http]), Transport::BridgingPeers);
        assert_eq!(stage(&[&bridge, &http, &http]), Transport::BridgingPeers);
        assert_eq!(
            stage(&[&bridge, &bridge, &bridge]),
            Transport::ReturningPeers
        );
        assert_eq!(
            stage(&[&https, &bridge, &bridge]),
            Transport::ReturningPeers
        );
        assert_eq!(stage(&[&https, &https, &https]), Transport::Tls);
    }

    #[test]
    fn without_a_member_list_the_stage_stays() {
        assert_eq!(
            desired(&tls_on(), Transport::ReturningPeers, None::<Vec<&str>>),
            Transport::ReturningPeers
        );
        assert_eq!(
            desired(
                &tls_on(),
                Transport::BridgingPeers,
                Some(Vec::<&str>::new())
            ),
            Transport::BridgingPeers
        );
    }

    #[test]
    fn a_plaintext_intent_never_turns_tls_off() {
        let keep = Intent {
            tls: false,
            refused: None,
        };
        let http = url("http", PEER_PORT);
        let https = url("https", PEER_PORT);
        assert_eq!(
            desired(&keep, Transport::Plaintext, Some(vec![http.as_str()])),
            Transport::Plaintext
        );
        assert_eq!(
            desired(&keep, Transport::Tls, Some(vec![https.as_str()])),
            Transport::Tls
        );
    }

    #[test]
    fn peer_urls_move_to_tls_then_back_to_their_port() {
        let http = url("http", PEER_PORT);
        let bridge = url("https", BRIDGE_PEER_PORT);
        let https = url("https", PEER_PORT);
        assert_eq!(
            Transport::BridgingPeers.peer_url_update(&http),
            Some(bridge.clone())
        );
        assert_eq!(Transport::BridgingPeers.peer_url_update(&bridge), None);
        assert_eq!(
            Transport::ReturningPeers.peer_url_update(&bridge),
            Some(https.clone())
        );
        assert_eq!(Transport::ReturningPeers.peer_url_update(&http), None);
        assert_eq!(Transport::Tls.peer_url_update(&bridge), None);
        assert_eq!(Transport::Plaintext.peer_url_update(&http), None);
    }

    #[test]
    fn each_stage_listens_where_its_neighbours_reach_it() {
        for (stage, next) in [
            (Transport::Plaintext, Transport::BridgingPeers),
            (Transport::BridgingPeers, Transport::ReturningPeers),
            (Transport::ReturningPeers, Transport::Tls),
        ] {
            // Members of two neighbouring stages run side by side during a
            // roll: a client scheme both serve, and peer URLs both listen
            // on (the URLs a stage's member list holds).
            let scheme = next.client_scheme();
            for s in [stage, next] {
                assert!(
                    s.listen_client_urls().contains(&format!("{scheme}://")),
                    "{s:?} serves {scheme}"
                );
            }
            // The member list when the roll to `next` starts holds the
            // URLs `next` gives new members; while `next` updates them,
            // also the URLs it updates them to.
            let at_start = next.new_member_peer_url("h");
            let mut urls = vec![at_start.clone()];
            urls.extend(next.peer_url_update(&at_start));
            for url in &urls {
                let (scheme, rest) = url.split_once("://").unwrap_or_default();
                let port = rest.rsplit(':').next().unwrap_or_default();
                for s in [stage, next] {
                    if s == stage && url != &at_start {
                        continue;
                    }
                    assert!(
                        s.listen_peer_urls()
                            .contains(&format!("{scheme}://0.0.0.0:{port}")),
                        "{s:?} listens on {url}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_pod_command_line_names_its_stage() {
        for stage in [
            Transport::Plaintext,
            Transport::BridgingPeers,
            Transport::ReturningPeers,
            Transport::Tls,
        ] {
            let peer = format!("--listen-peer-urls={}", stage.listen_peer_urls());
            let client = format!("--listen-client-urls={}", stage.listen_client_urls());
            assert_eq!(
                of_etcd_args(["--name=x", peer.as_str(), client.as_str()]),
                Some(stage)
            );
        }
        assert_eq!(of_etcd_args(["--name=x"]), None);
    }
}
