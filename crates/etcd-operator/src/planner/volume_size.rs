//! The size of the members' volumes as they are, not as the spec asks.
//!
//! `storage.size` is a wish: the StorageClass may refuse to grow a volume,
//! the storage provider may still be growing it, and a volume never
//! shrinks. etcd's derived quota must fit the disk that exists, so it is
//! sized for the smallest volume a member has; a new claim is never smaller
//! than the volumes the members already have, so that a replaced member
//! can hold what its peers hold.

use super::observed::{Observed, PvcPhase, PvcState};
use crate::api::quantity::{bytes, human};
use crate::api::tuning;

/// Used when `storage.size` cannot be read (the schema refuses such a
/// spec; this only keeps the arithmetic total).
const UNREADABLE_SIZE: u64 = 1 << 30;

impl Observed {
    /// The size `storage.size` asks for, in bytes.
    pub fn spec_volume_bytes(&self) -> u64 {
        bytes(&self.spec.storage.size).unwrap_or(UNREADABLE_SIZE)
    }

    /// The bound claims of the cluster's members, by ordinal.
    fn member_claims(&self) -> impl Iterator<Item = (u32, &PvcState)> {
        let replicas = self.spec.replica_count();
        self.ordinals
            .iter()
            .filter(move |(ordinal, _)| **ordinal < replicas)
            .filter_map(|(ordinal, objects)| Some((*ordinal, objects.pvc.as_ref()?)))
            .filter(|(_, pvc)| !pvc.deleting && pvc.phase == PvcPhase::Bound)
    }

    /// The size etcd's derived quota is sized for: the smallest volume a
    /// member has. A volume counts with its capacity, but never above what
    /// it or the spec asks for (a provider that rounds a claim up changes
    /// nothing); a volume expanded whose filesystem grows at the next mount
    /// counts with its new size, since a member Pod made now mounts it
    /// grown. With no bound claim yet, the spec's size.
    pub fn quota_volume_bytes(&self) -> u64 {
        let spec = self.spec_volume_bytes();
        self.member_claims()
            .filter_map(|(_, pvc)| {
                let asked = pvc.requested.map_or(spec, |r| r.max(spec));
                let have = match (pvc.filesystem_resize_pending, pvc.requested) {
                    (true, Some(requested)) => Some(requested),
                    _ => pvc.capacity,
                };
                Some(have?.min(asked))
            })
            .min()
            .unwrap_or(spec)
    }

    /// The quota the members run with: `etcd.quotaBackendBytes` when set,
    /// else derived from [`Self::quota_volume_bytes`].
    pub fn quota_backend_bytes(&self) -> i64 {
        match self.spec.etcd.quota_backend_bytes {
            0 => tuning::quota_for_volume(self.quota_volume_bytes()),
            explicit => explicit,
        }
    }

    /// The size of a new claim: `storage.size`, or the largest member
    /// volume when the spec went below it (volumes never shrink, and a
    /// member made on a smaller one could not hold its peers' data).
    pub fn new_claim_size(&self) -> String {
        let spec = self.spec_volume_bytes();
        let largest = self
            .member_claims()
            .filter_map(|(_, pvc)| pvc.requested)
            .max()
            .unwrap_or(0);
        if largest > spec {
            human(largest)
        } else {
            self.spec.storage.size.0.clone()
        }
    }

    /// Members whose volumes are larger than `storage.size` asks: the
    /// spec went below them, and volumes never shrink.
    pub fn volumes_above_spec(&self) -> Vec<(u32, u64)> {
        let spec = self.spec_volume_bytes();
        self.member_claims()
            .filter_map(|(ordinal, pvc)| Some((ordinal, pvc.requested?)))
            .filter(|(_, requested)| *requested > spec)
            .collect()
    }
}
