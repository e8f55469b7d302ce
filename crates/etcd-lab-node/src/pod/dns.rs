//! Contents of a pod's `/etc/hosts` and `/etc/resolv.conf`.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;

/// The pod's hostname: `spec.hostname` or the pod name (at most 63 bytes).
pub fn pod_hostname(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_owned()
}

/// `/etc/hosts` as a kubelet writes it.
pub fn hosts_file(pod: &Pod, ip: Ipv4Addr, cluster_domain: &str) -> String {
    let hostname = pod_hostname(pod);
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut out = String::from(
        "# Kubernetes-managed hosts file (etcd-lab).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    );
    match pod.spec.as_ref().and_then(|s| s.subdomain.as_deref()) {
        Some(sub) if !sub.is_empty() => out.push_str(&format!(
            "{ip}\t{hostname}.{sub}.{namespace}.svc.{cluster_domain}\t{hostname}\n"
        )),
        _ => out.push_str(&format!("{ip}\t{hostname}\n")),
    }
    for alias in pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.as_ref())
        .into_iter()
        .flatten()
    {
        let names = alias.hostnames.clone().unwrap_or_default().join("\t");
        out.push_str(&format!(
            "\n# Entries added by HostAliases.\n{}\t{names}\n",
            alias.ip
        ));
    }
    out
}

/// `/etc/resolv.conf` for cluster DNS.
pub fn resolv_conf(namespace: &str, dns_ip: Ipv4Addr, cluster_domain: &str) -> String {
    format!(
        "search {namespace}.svc.{cluster_domain} svc.{cluster_domain} {cluster_domain}\nnameserver {dns_ip}\noptions ndots:5\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(hostname: Option<&str>, subdomain: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-0".into());
        pod.metadata.namespace = Some("prod".into());
        pod.spec = Some(PodSpec {
            hostname: hostname.map(Into::into),
            subdomain: subdomain.map(Into::into),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn hosts_has_fqdn_with_subdomain() {
        let ip = Ipv4Addr::new(10, 244, 1, 10);
        let text = hosts_file(&pod(Some("m1"), Some("etcd")), ip, "cluster.local");
        assert!(text.contains("127.0.0.1\tlocalhost\n"));
        assert!(text.contains("10.244.1.10\tm1.etcd.prod.svc.cluster.local\tm1\n"));
        let text = hosts_file(&pod(None, None), ip, "cluster.local");
        assert!(text.contains("10.244.1.10\tweb-0\n"));
    }

    #[test]
    fn resolv_conf_searches_namespace_first() {
        assert_eq!(
            resolv_conf("prod", Ipv4Addr::new(10, 244, 0, 1), "cluster.local"),
            "search prod.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.244.0.1\noptions ndots:5\n"
        );
    }
}
