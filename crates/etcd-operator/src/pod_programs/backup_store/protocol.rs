//! The S3 wire format the store speaks: the XML documents of listing,
//! multipart uploads, bulk deletes and errors, byte ranges, and the
//! percent-encoded paths and queries of requests.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

use super::files::ObjectInfo;

/// The XML declaration every document starts with.
const XML_HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>"#;
/// The S3 namespace of every document.
const XMLNS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

/// Text escaped for an XML element.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// `ListObjectsV2` of `objects` (all with `prefix`): with a delimiter, the
/// keys with one after the prefix are folded into common prefixes. Never
/// truncated.
pub fn list_result(
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    objects: &[ObjectInfo],
) -> String {
    let mut contents = String::new();
    let mut prefixes = std::collections::BTreeSet::new();
    let mut count = 0usize;
    for object in objects {
        let rest = &object.key[prefix.len().min(object.key.len())..];
        if let Some(delimiter) = delimiter.filter(|d| !d.is_empty())
            && let Some(at) = rest.find(delimiter)
        {
            prefixes.insert(format!("{prefix}{}", &rest[..at + delimiter.len()]));
            continue;
        }
        count += 1;
        let _ = write!(
            contents,
            "<Contents><Key>{}</Key><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            escape(&object.key),
            object.modified.to_rfc3339_opts(SecondsFormat::Millis, true),
            escape(&object.etag()),
            object.size
        );
    }
    let mut common = String::new();
    for p in &prefixes {
        let _ = write!(
            common,
            "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
            escape(p)
        );
    }
    format!(
        "{XML_HEAD}<ListBucketResult xmlns=\"{XMLNS}\"><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>{}</MaxKeys><IsTruncated>false</IsTruncated>{contents}{common}</ListBucketResult>",
        escape(bucket),
        escape(prefix),
        count + prefixes.len(),
        count + prefixes.len(),
    )
}

/// The answer to beginning a multipart upload.
pub fn upload_begun(bucket: &str, key: &str, upload_id: &str) -> String {
    format!(
        "{XML_HEAD}<InitiateMultipartUploadResult xmlns=\"{XMLNS}\"><Bucket>{}</Bucket><Key>{}</Key><UploadId>{}</UploadId></InitiateMultipartUploadResult>",
        escape(bucket),
        escape(key),
        escape(upload_id)
    )
}

/// The answer to completing a multipart upload.
pub fn upload_completed(bucket: &str, key: &str, etag: &str) -> String {
    format!(
        "{XML_HEAD}<CompleteMultipartUploadResult xmlns=\"{XMLNS}\"><Bucket>{}</Bucket><Key>{}</Key><ETag>{}</ETag></CompleteMultipartUploadResult>",
        escape(bucket),
        escape(key),
        escape(etag)
    )
}

/// The answer to a bulk delete: every key deleted, or its error.
pub fn delete_result(outcomes: &[(String, Result<(), String>)]) -> String {
    let mut body = String::new();
    for (key, outcome) in outcomes {
        match outcome {
            Ok(()) => {
                let _ = write!(body, "<Deleted><Key>{}</Key></Deleted>", escape(key));
            }
            Err(message) => {
                let _ = write!(
                    body,
                    "<Error><Key>{}</Key><Code>InternalError</Code><Message>{}</Message></Error>",
                    escape(key),
                    escape(message)
                );
            }
        }
    }
    format!("{XML_HEAD}<DeleteResult xmlns=\"{XMLNS}\">{body}</DeleteResult>")
}

/// An S3 error document.
pub fn error(code: &str, message: &str) -> String {
    format!(
        "{XML_HEAD}<Error><Code>{}</Code><Message>{}</Message></Error>",
        escape(code),
        escape(message)
    )
}

/// A request body that is not the XML it should be.
#[derive(Debug, thiserror::Error)]
#[error("malformed XML: {0}")]
pub struct MalformedXml(String);

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CompleteRequest {
    #[serde(default)]
    part: Vec<CompletePart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct CompletePart {
    part_number: u32,
}

/// The part numbers of a `CompleteMultipartUpload` body, in its order.
pub fn parts_to_complete(body: &[u8]) -> Result<Vec<u32>, MalformedXml> {
    let text = std::str::from_utf8(body).map_err(|e| MalformedXml(e.to_string()))?;
    let request: CompleteRequest =
        quick_xml::de::from_str(text).map_err(|e| MalformedXml(e.to_string()))?;
    Ok(request.part.into_iter().map(|p| p.part_number).collect())
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteRequest {
    #[serde(default)]
    object: Vec<DeleteObject>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeleteObject {
    key: String,
}

/// The keys of a bulk `Delete` body.
pub fn keys_to_delete(body: &[u8]) -> Result<Vec<String>, MalformedXml> {
    let text = std::str::from_utf8(body).map_err(|e| MalformedXml(e.to_string()))?;
    let request: DeleteRequest =
        quick_xml::de::from_str(text).map_err(|e| MalformedXml(e.to_string()))?;
    Ok(request.object.into_iter().map(|o| o.key).collect())
}

/// A `Range` header the store cannot satisfy.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("range {0:?} cannot be satisfied")]
pub struct UnsatisfiableRange(pub String);

/// The inclusive byte range `bytes=a-b`, `bytes=a-` or `bytes=-n` asks
/// for in an object of `size` bytes.
pub fn byte_range(header: &str, size: u64) -> Result<(u64, u64), UnsatisfiableRange> {
    let bad = || UnsatisfiableRange(header.to_owned());
    let spec = header.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    let (first, last) = spec.split_once('-').ok_or_else(bad)?;
    let (first, last) = (first.trim(), last.trim());
    let range = if first.is_empty() {
        let suffix: u64 = last.parse().map_err(|_| bad())?;
        if suffix == 0 || size == 0 {
            return Err(bad());
        }
        (size.saturating_sub(suffix), size - 1)
    } else {
        let start: u64 = first.parse().map_err(|_| bad())?;
        let end = if last.is_empty() {
            size.saturating_sub(1)
        } else {
            last.parse::<u64>()
                .map_err(|_| bad())?
                .min(size.saturating_sub(1))
        };
        (start, end)
    };
    if range.0 >= size || range.0 > range.1 {
        return Err(bad());
    }
    Ok(range)
}

/// `text` with its `%XX` escapes decoded (and `+` as a space when
/// `plus_is_space`, as in a query).
pub fn percent_decode(text: &str, plus_is_space: bool) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The parameters of a query string, decoded.
pub fn query_parameters(query: Option<&str>) -> BTreeMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(name, true)?, percent_decode(value, true)?))
        })
        .collect()
}

/// An HTTP date (`Last-Modified`).
pub fn http_date(time: DateTime<Utc>) -> String {
    time.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}
