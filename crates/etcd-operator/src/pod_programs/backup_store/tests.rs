use std::collections::BTreeMap;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

use super::files::ObjectFiles;
use super::protocol::{byte_range, percent_decode, query_parameters};
use super::server::router;
use crate::api::{BackupDestination, VolumeClaimDestination};
use crate::backup::{BackupStore, keys};

const TOKEN: &str = "secret-token";

async fn store_at(root: &std::path::Path, token: &str) -> BackupStore {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let app = router(ObjectFiles::new(root), TOKEN.to_string());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let destination = BackupDestination {
        persistent_volume_claim: Some(VolumeClaimDestination {
            claim_name: "c".to_string(),
            path: None,
        }),
        ..BackupDestination::default()
    };
    let credentials = BTreeMap::from([
        (
            keys::STORE_ENDPOINT.to_string(),
            format!("http://{address}"),
        ),
        (keys::STORE_TOKEN.to_string(), token.to_string()),
    ]);
    BackupStore::open(&destination, "ns", "cl", &credentials).expect("open")
}

#[tokio::test]
async fn objects_round_trip_through_the_s3_client() {
    let root = tempfile::tempdir().expect("tempdir");
    let backups = store_at(root.path(), TOKEN).await;
    let store = backups.store();
    let a = backups.path("a.json");
    let nested = backups.path("chain").join("seg-1");
    store
        .put(&a, PutPayload::from_static(b"hello"))
        .await
        .expect("put");
    store
        .put(&nested, PutPayload::from_static(b"0123456789"))
        .await
        .expect("put nested");
    let got = store
        .get(&a)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(got, Bytes::from_static(b"hello"));
    let ranged = store.get_range(&nested, 2..5).await.expect("range");
    assert_eq!(ranged, Bytes::from_static(b"234"));
    assert_eq!(store.head(&nested).await.expect("head").size, 10);

    let listed = store
        .list_with_delimiter(Some(backups.folder()))
        .await
        .expect("list");
    let names: Vec<_> = listed
        .objects
        .iter()
        .map(|o| o.location.to_string())
        .collect();
    assert_eq!(names, vec!["ns/cl/a.json".to_string()]);
    let prefixes: Vec<_> = listed
        .common_prefixes
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(prefixes, vec!["ns/cl/chain".to_string()]);
    let all: Vec<_> = store
        .list(Some(backups.folder()))
        .map_ok(|o| o.location.to_string())
        .try_collect()
        .await
        .expect("recursive list");
    assert_eq!(all, vec!["ns/cl/a.json", "ns/cl/chain/seg-1"]);

    store.delete(&a).await.expect("delete");
    assert!(matches!(
        store.get(&a).await,
        Err(object_store::Error::NotFound { .. })
    ));
    let gone: Vec<Path> = store
        .delete_stream(futures::stream::iter(vec![Ok(nested.clone())]).boxed())
        .try_collect()
        .await
        .expect("bulk delete");
    assert_eq!(gone, vec![nested.clone()]);
    assert!(store.head(&nested).await.is_err());
    assert_eq!(
        std::fs::read_to_string(root.path().join("ns/cl/chain/seg-1")).ok(),
        None
    );
}

use futures::StreamExt as _;

#[tokio::test]
async fn a_multipart_upload_is_whole_on_the_volume_or_absent() {
    let root = tempfile::tempdir().expect("tempdir");
    let backups = store_at(root.path(), TOKEN).await;
    let target = backups.path("full.db.zst");
    let upload = backups.store().put_multipart(&target).await.expect("begin");
    let mut writer = WriteMultipart::new_with_chunk_size(upload, 1 << 20);
    let mut expected = Vec::new();
    for i in 0..3u8 {
        let chunk = vec![i; (1 << 20) + 7];
        expected.extend_from_slice(&chunk);
        writer.write(&chunk);
    }
    assert!(
        !root.path().join("ns/cl/full.db.zst").exists(),
        "nothing at the key before the upload completes"
    );
    writer.finish().await.expect("complete");
    let on_disk = std::fs::read(root.path().join("ns/cl/full.db.zst")).expect("file");
    assert_eq!(on_disk.len(), expected.len());
    assert!(on_disk == expected, "the parts joined in order");
    let scratch: Vec<_> = std::fs::read_dir(root.path().join(".uploads"))
        .map(|d| d.filter_map(Result::ok).collect())
        .unwrap_or_default();
    assert!(scratch.is_empty(), "{scratch:?}");

    let aborted = backups.path("aborted");
    let mut upload = backups
        .store()
        .put_multipart(&aborted)
        .await
        .expect("begin");
    upload
        .put_part(PutPayload::from_static(b"part"))
        .await
        .expect("part");
    upload.abort().await.expect("abort");
    assert!(!root.path().join("ns/cl/aborted").exists());
}

#[tokio::test]
async fn requests_without_the_token_are_refused_and_write_nothing() {
    let root = tempfile::tempdir().expect("tempdir");
    let backups = store_at(root.path(), "wrong").await;
    let error = backups
        .store()
        .put(&backups.path("x"), PutPayload::from_static(b"x"))
        .await
        .expect_err("refused");
    assert!(
        matches!(error, object_store::Error::PermissionDenied { .. }),
        "{error}"
    );
    assert!(!root.path().join("ns/cl/x").exists());
}

#[test]
fn keys_that_leave_the_root_or_reach_scratch_space_are_refused() {
    let files = ObjectFiles::new("/backups");
    for key in [
        "../x",
        "a/../../x",
        "a//b",
        "/abs",
        ".uploads/x",
        "a/./b",
        "",
    ] {
        assert!(files.path_of(key).is_err(), "{key:?} accepted");
    }
    assert_eq!(
        files.path_of("a/.uploads/b.json").expect("nested name"),
        std::path::PathBuf::from("/backups/a/.uploads/b.json")
    );
}

#[test]
fn byte_ranges_as_s3_reads_them() {
    assert_eq!(byte_range("bytes=0-9", 100), Ok((0, 9)));
    assert_eq!(byte_range("bytes=90-", 100), Ok((90, 99)));
    assert_eq!(byte_range("bytes=-10", 100), Ok((90, 99)));
    assert_eq!(byte_range("bytes=95-200", 100), Ok((95, 99)));
    assert!(byte_range("bytes=100-", 100).is_err());
    assert!(byte_range("lines=1-2", 100).is_err());
    assert!(byte_range("bytes=5-2", 100).is_err());
}

#[test]
fn paths_and_queries_are_percent_decoded() {
    assert_eq!(percent_decode("a%3Ab%2Fc", false).as_deref(), Some("a:b/c"));
    assert_eq!(percent_decode("%zz", false), None);
    let query = query_parameters(Some("list-type=2&prefix=ns%2Fcl%2F&delimiter=%2F&uploads"));
    assert_eq!(query.get("prefix").map(String::as_str), Some("ns/cl/"));
    assert_eq!(query.get("delimiter").map(String::as_str), Some("/"));
    assert!(query.contains_key("uploads"));
}
