//! Data written to an etcd by the backup tests: numbered keys with values
//! of a chosen size, or values that zstd cannot shrink much.

use etcd_client::{Client, GetOptions};

/// Writes `count` keys `key-<i>` (six digits) with values of `value_len`
/// bytes; returns the revision of the last write.
pub async fn write_keys(client: &mut Client, count: usize, value_len: usize) -> i64 {
    let mut revision = 0;
    for i in 0..count {
        let value = format!("{i:0width$}", width = value_len);
        let response = client
            .put(format!("key-{i:06}"), value, None)
            .await
            .expect("put");
        revision = response.header().expect("header").revision();
    }
    revision
}

/// `len` bytes for key `i` that zstd cannot shrink much, so that a stored
/// backup spans parts.
pub fn incompressible(i: usize, len: usize) -> Vec<u8> {
    let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state & 0xff) as u8
        })
        .collect()
}

/// How many keys there are under `prefix` (a linearizable count).
pub async fn count_under(client: &mut Client, prefix: &str) -> i64 {
    client
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .expect("count")
        .count()
}
