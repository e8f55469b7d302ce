//! IPv4 CIDR ranges.

use std::net::Ipv4Addr;
use std::str::FromStr;

use super::ProxyError;

/// An IPv4 network such as `10.96.0.0/16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    network: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Cidr {
    fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }

    /// Whether `addr` lies inside this network.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & self.mask() == u32::from(self.network) & self.mask()
    }
}

impl FromStr for Ipv4Cidr {
    type Err = ProxyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || ProxyError::InvalidCidr(s.to_owned());
        let (addr, prefix) = s.split_once('/').ok_or_else(invalid)?;
        let network: Ipv4Addr = addr.parse().map_err(|_| invalid())?;
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        if prefix > 32 {
            return Err(invalid());
        }
        let cidr = Self { network, prefix };
        // `10.1.2.3/8` is the network 10.0.0.0/8, as Kubernetes reads it.
        Ok(Self {
            network: Ipv4Addr::from(u32::from(network) & cidr.mask()),
            prefix,
        })
    }
}

impl std::fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_addresses_of_the_range_only() {
        let cidr: Ipv4Cidr = "10.96.0.0/16".parse().unwrap();
        assert!(cidr.contains(Ipv4Addr::new(10, 96, 0, 1)));
        assert!(cidr.contains(Ipv4Addr::new(10, 96, 255, 254)));
        assert!(!cidr.contains(Ipv4Addr::new(10, 97, 0, 1)));
        assert!("10.96.0.0/33".parse::<Ipv4Cidr>().is_err());
        assert!("10.96.0.0".parse::<Ipv4Cidr>().is_err());
        assert_eq!(
            "10.1.2.3/8".parse::<Ipv4Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
    }
}
