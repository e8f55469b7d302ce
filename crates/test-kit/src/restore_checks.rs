//! What the restore tests write and check on a restored etcd: numbered
//! keys, every one of them back, and no old revision served again (reads
//! and watches at revisions the old cluster served refused as compacted).

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, GetOptions, GetResponse, WatchOptions};

/// Writes `key-<i>` = `value-<i>` for `range`; returns the revision of
/// each write.
pub async fn write(client: &mut Client, range: std::ops::Range<usize>) -> Vec<i64> {
    let mut revisions = Vec::new();
    for i in range {
        let response = client.put(key(i), value(i), None).await.expect("put");
        revisions.push(response.header().expect("header").revision());
    }
    revisions
}

pub fn key(i: usize) -> String {
    format!("key-{i:05}")
}

pub fn value(i: usize) -> String {
    format!("value-{i}")
}

/// The store revision the member answers at now.
pub async fn revision_now(client: &mut Client) -> i64 {
    client
        .get("key-", Some(GetOptions::new().with_count_only()))
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

/// A read at `revision` is refused as compacted.
pub async fn assert_compacted_read(client: &mut Client, revision: i64) {
    let error = client
        .get(key(0), Some(GetOptions::new().with_revision(revision)))
        .await
        .err()
        .unwrap_or_else(|| panic!("a read at old revision {revision} was served"));
    assert!(
        error.to_string().contains("compacted"),
        "a read at old revision {revision}: {error}"
    );
}

/// A watch from `revision` is cancelled as compacted (the client relists).
pub async fn assert_compacted_watch(client: &mut Client, revision: i64) {
    let mut stream = client
        .watch(
            "key-",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision),
            ),
        )
        .await
        .expect("watch");
    let response = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let response = stream.message().await.expect("watch stream").expect("open");
            if !response.created() || response.canceled() || !response.events().is_empty() {
                return response;
            }
            if response.compact_revision() > 0 {
                return response;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a watch from old revision {revision}: no answer"));
    assert!(
        response.compact_revision() > 0 && response.events().is_empty(),
        "a watch from old revision {revision} was served: compact revision {}, {} events",
        response.compact_revision(),
        response.events().len()
    );
}

/// The keys and values of a get response, as text.
pub fn key_values(response: &GetResponse) -> BTreeMap<String, String> {
    response
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect()
}

/// Every key of `range` is there with its value.
pub async fn assert_keys(client: &mut Client, range: std::ops::Range<usize>) {
    let response = client
        .get("key-", Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    let held = key_values(&response);
    let missing: Vec<String> = range
        .clone()
        .filter(|&i| held.get(&key(i)) != Some(&value(i)))
        .map(key)
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} keys missing or wrong after the restore, first {:?}",
        missing.len(),
        range.len(),
        missing.first()
    );
}
