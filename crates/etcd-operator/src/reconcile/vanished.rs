//! The objects a watch's events touched, and also those that vanished
//! while the watch was away.
//!
//! When a watch breaks (an API server restart, a partition) and cannot
//! resume, it lists everything again. An object deleted meanwhile is then
//! simply absent from the new list: kube's `touched_objects` yields no
//! event for it, so the deletion of a member Pod during an API server
//! outage started no pass, and the Pod was recreated only at the next idle
//! pass, up to 30 s later (seen in the chaos campaign). Here, when a new
//! list ends, every object known before and absent from it is yielded as
//! touched (its last known state, whose owner references name its
//! cluster), after the reflector has dropped it from its copy.

use std::collections::{BTreeMap, BTreeSet};

use futures::{Stream, StreamExt, stream};
use kube::Resource;
use kube::runtime::watcher;

/// A watched object's key: namespace and name.
type Key = (Option<String>, String);

fn key<K: Resource>(object: &K) -> Key {
    let meta = object.meta();
    (
        meta.namespace.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// What the events seen so far say exists, and what the list in progress
/// has shown.
#[derive(Debug)]
struct Known<K> {
    objects: BTreeMap<Key, K>,
    listing: BTreeSet<Key>,
}

impl<K: Resource + Clone> Known<K> {
    /// The objects `event` touched.
    fn touched(&mut self, event: watcher::Event<K>) -> Vec<K> {
        match event {
            watcher::Event::Apply(object) => {
                self.objects.insert(key(&object), object.clone());
                vec![object]
            }
            watcher::Event::Delete(object) => {
                self.objects.remove(&key(&object));
                vec![object]
            }
            watcher::Event::Init => {
                self.listing.clear();
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                self.listing.insert(key(&object));
                self.objects.insert(key(&object), object.clone());
                vec![object]
            }
            watcher::Event::InitDone => {
                let listing = std::mem::take(&mut self.listing);
                let (kept, vanished): (BTreeMap<_, _>, BTreeMap<_, _>) =
                    std::mem::take(&mut self.objects)
                        .into_iter()
                        .partition(|(key, _)| listing.contains(key));
                self.objects = kept;
                vanished.into_values().collect()
            }
        }
    }
}

/// The objects `events` touched, those that vanished during a new list
/// included; errors pass through.
pub fn touched_or_vanished<K, S>(events: S) -> impl Stream<Item = Result<K, watcher::Error>>
where
    K: Resource + Clone,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut known = Known {
        objects: BTreeMap::new(),
        listing: BTreeSet::new(),
    };
    events.flat_map(move |event| {
        let items: Vec<Result<K, watcher::Error>> = match event {
            Ok(event) => known.touched(event).into_iter().map(Ok).collect(),
            Err(error) => vec![Err(error)],
        };
        stream::iter(items)
    })
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;

    use super::*;

    fn pod(name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.to_owned());
        pod.metadata.namespace = Some("ns".to_owned());
        pod
    }

    fn names(events: Vec<watcher::Event<Pod>>) -> Vec<String> {
        block_on(
            touched_or_vanished(stream::iter(events.into_iter().map(Ok)))
                .map(|r| r.map(|p| p.name_any()).unwrap_or_default())
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn a_pod_deleted_while_the_watch_was_away_is_reported_after_the_new_list() {
        use watcher::Event::*;
        let seen = names(vec![
            Init,
            InitApply(pod("m-0")),
            InitApply(pod("m-1")),
            InitDone,
            // The watch breaks; m-0 is deleted meanwhile; a new list.
            Init,
            InitApply(pod("m-1")),
            InitDone,
        ]);
        assert_eq!(seen, ["m-0", "m-1", "m-1", "m-0"]);
    }

    #[test]
    fn applied_and_deleted_objects_pass_and_nothing_vanishes_twice() {
        use watcher::Event::*;
        let seen = names(vec![
            Init,
            InitDone,
            Apply(pod("m-0")),
            Apply(pod("m-2")),
            Delete(pod("m-2")),
            Init,
            InitDone,
            Init,
            InitDone,
        ]);
        // m-2's deletion was seen as such; m-0 vanished in the first new
        // list only.
        assert_eq!(seen, ["m-0", "m-2", "m-2", "m-0"]);
    }
}
