//! Fault injection: table `inet etcdlab` in the router namespace.
//!
//! The `partition` chain (hooked on forward) drops traffic of nodes whose
//! subnet or address is in one of three sets:
//! - `peers_cut` (subnets): traffic between the node's subnet and any other
//!   lab subnet except the host's `10.244.0.0/24`;
//! - `apiserver_cut` (node addresses): traffic between the node's address and
//!   `10.244.0.1` (the API server);
//! - `all_cut` (subnets): everything to or from the node's subnet.

use super::NetworkError;
use super::addressing::{HOST_IP, ROUTER_NETNS, node_ip, node_subnet};
use super::command::nft_script;

/// Which traffic of a node a partition drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionKind {
    /// Node and its pods <-> other nodes, their pods and the client.
    Peers,
    /// Node address <-> API server.
    Apiserver,
    /// Everything.
    All,
}

impl std::str::FromStr for PartitionKind {
    type Err = NetworkError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "peers" => Ok(Self::Peers),
            "apiserver" => Ok(Self::Apiserver),
            "all" => Ok(Self::All),
            other => Err(NetworkError::InvalidPartition(other.to_owned())),
        }
    }
}

/// The table definition (recreated from scratch).
pub fn table_script() -> String {
    format!(
        "table inet etcdlab {{}}
delete table inet etcdlab
table inet etcdlab {{
  set peers_cut {{ type ipv4_addr; flags interval; }}
  set apiserver_cut {{ type ipv4_addr; }}
  set all_cut {{ type ipv4_addr; flags interval; }}
  chain forward {{
    type filter hook forward priority -10; policy accept;
    jump partition
  }}
  chain partition {{
    ip saddr @all_cut drop
    ip daddr @all_cut drop
    ip saddr @apiserver_cut ip daddr {HOST_IP} drop
    ip daddr @apiserver_cut ip saddr {HOST_IP} drop
    ip saddr @peers_cut ip daddr != 10.244.0.0/24 drop
    ip daddr @peers_cut ip saddr != 10.244.0.0/24 drop
  }}
}}
"
    )
}

/// Script that adds node `index` to the set of `kind`.
pub fn partition_script(index: u8, kind: PartitionKind) -> String {
    let (set, element) = set_element(index, kind);
    format!("add element inet etcdlab {set} {{ {element} }}\n")
}

fn set_element(index: u8, kind: PartitionKind) -> (&'static str, String) {
    match kind {
        PartitionKind::Peers => ("peers_cut", node_subnet(index)),
        PartitionKind::Apiserver => ("apiserver_cut", node_ip(index).to_string()),
        PartitionKind::All => ("all_cut", node_subnet(index)),
    }
}

pub(crate) fn install_table() -> Result<(), NetworkError> {
    nft_script(ROUTER_NETNS, &table_script())
}

/// Partitions node `index` (adds to what is already cut).
pub fn partition_node(index: u8, kind: PartitionKind) -> Result<(), NetworkError> {
    nft_script(ROUTER_NETNS, &partition_script(index, kind))
}

/// Heals every partition of node `index`.
pub fn heal_node(index: u8) -> Result<(), NetworkError> {
    for kind in [
        PartitionKind::Peers,
        PartitionKind::Apiserver,
        PartitionKind::All,
    ] {
        let (set, element) = set_element(index, kind);
        // nft 1.0.6 has no `destroy element`: adding first makes the delete
        // succeed whether or not the node was partitioned this way.
        nft_script(
            ROUTER_NETNS,
            &format!(
                "add element inet etcdlab {set} {{ {element} }}\ndelete element inet etcdlab {set} {{ {element} }}\n"
            ),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_elements_name_the_node() {
        assert_eq!(
            partition_script(3, PartitionKind::Peers),
            "add element inet etcdlab peers_cut { 10.244.3.0/24 }\n"
        );
        assert_eq!(
            partition_script(3, PartitionKind::Apiserver),
            "add element inet etcdlab apiserver_cut { 10.244.3.2 }\n"
        );
        assert!(table_script().contains("chain partition"));
        assert_eq!(
            "all".parse::<PartitionKind>().ok(),
            Some(PartitionKind::All)
        );
    }
}
