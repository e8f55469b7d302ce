//! The store's HTTP server: every request checked for the token, then
//! dispatched by method, bucket, key and query to [`ObjectFiles`].

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

use super::files::{ObjectError, ObjectFiles};
use super::protocol;
use crate::pod_contract::backup_store::{HEALTH_PATH, STORE_BUCKET, TOKEN_HEADER};

/// Largest XML request body read (a bulk delete of 1,000 keys is ~100 KiB).
const MAX_XML_BODY: usize = 4 << 20;

struct Store {
    files: ObjectFiles,
    token: String,
}

/// The store's routes over `files`, for requests carrying `token`.
pub fn router(files: ObjectFiles, token: String) -> Router {
    Router::new()
        .fallback(handle)
        .with_state(Arc::new(Store { files, token }))
}

async fn handle(State(store): State<Arc<Store>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    if path == HEALTH_PATH {
        return (StatusCode::OK, "ok\n").into_response();
    }
    if !authorised(request.headers(), &store.token) {
        return failure(
            StatusCode::FORBIDDEN,
            "AccessDenied",
            &format!("the request does not carry the store's token in {TOKEN_HEADER}"),
        );
    }
    let Some(decoded) = protocol::percent_decode(&path, false) else {
        return failure(StatusCode::BAD_REQUEST, "InvalidURI", "undecodable path");
    };
    let trimmed = decoded.trim_start_matches('/');
    let (bucket, key) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if bucket != STORE_BUCKET {
        return failure(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            &format!("this store has one bucket, {STORE_BUCKET:?}"),
        );
    }
    let query = protocol::query_parameters(request.uri().query());
    let key = key.to_owned();
    let outcome = if key.is_empty() {
        bucket_request(&store.files, request, &query).await
    } else {
        object_request(&store.files, request, &key, &query).await
    };
    outcome.unwrap_or_else(|error| object_failure(&error))
}

fn authorised(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers.get(TOKEN_HEADER) else {
        return false;
    };
    let (given, token) = (given.as_bytes(), token.as_bytes());
    // The same time whatever the first differing byte.
    given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn bucket_request(
    files: &ObjectFiles,
    request: Request,
    query: &BTreeMap<String, String>,
) -> Result<Response, ObjectError> {
    match *request.method() {
        Method::GET if query.contains_key("list-type") || query.contains_key("prefix") => {
            let prefix = query.get("prefix").map(String::as_str).unwrap_or("");
            let delimiter = query.get("delimiter").map(String::as_str);
            let objects = files.list(prefix).await?;
            Ok(xml(
                StatusCode::OK,
                protocol::list_result(STORE_BUCKET, prefix, delimiter, &objects),
            ))
        }
        Method::POST if query.contains_key("delete") => {
            let body = read_body(request).await?;
            let keys = match protocol::keys_to_delete(&body) {
                Ok(keys) => keys,
                Err(error) => {
                    return Ok(failure(
                        StatusCode::BAD_REQUEST,
                        "MalformedXML",
                        &error.to_string(),
                    ));
                }
            };
            let mut outcomes = Vec::with_capacity(keys.len());
            for key in keys {
                let outcome = files.delete(&key).await.map_err(|e| e.to_string());
                outcomes.push((key, outcome));
            }
            Ok(xml(StatusCode::OK, protocol::delete_result(&outcomes)))
        }
        Method::GET | Method::HEAD => Ok(StatusCode::OK.into_response()),
        _ => Ok(not_implemented(request.method())),
    }
}

async fn object_request(
    files: &ObjectFiles,
    request: Request,
    key: &str,
    query: &BTreeMap<String, String>,
) -> Result<Response, ObjectError> {
    let upload = query.get("uploadId").cloned();
    match (request.method().clone(), upload) {
        (Method::PUT, Some(upload)) => {
            let Some(number) = query.get("partNumber").and_then(|n| n.parse::<u32>().ok()) else {
                return Ok(failure(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "partNumber is missing or not a number",
                ));
            };
            let etag = files
                .put_part(&upload, number, body_stream(request))
                .await?;
            Ok(with_etag(StatusCode::OK.into_response(), &etag))
        }
        (Method::PUT, None) => {
            if request.headers().contains_key("x-amz-copy-source") {
                return Ok(not_implemented(&Method::PUT));
            }
            let create_only = request
                .headers()
                .get(header::IF_NONE_MATCH)
                .is_some_and(|v| v.as_bytes() == b"*");
            let info = files.put(key, body_stream(request), create_only).await?;
            Ok(with_etag(StatusCode::OK.into_response(), &info.etag()))
        }
        (Method::POST, None) if query.contains_key("uploads") => {
            let id = files.begin_upload(key).await?;
            Ok(xml(
                StatusCode::OK,
                protocol::upload_begun(STORE_BUCKET, key, &id),
            ))
        }
        (Method::POST, Some(upload)) => {
            let body = read_body(request).await?;
            let numbers = match protocol::parts_to_complete(&body) {
                Ok(numbers) => numbers,
                Err(error) => {
                    return Ok(failure(
                        StatusCode::BAD_REQUEST,
                        "MalformedXML",
                        &error.to_string(),
                    ));
                }
            };
            let info = files.complete_upload(&upload, key, &numbers).await?;
            Ok(xml(
                StatusCode::OK,
                protocol::upload_completed(STORE_BUCKET, key, &info.etag()),
            ))
        }
        (Method::DELETE, Some(upload)) => {
            files.abort_upload(&upload).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (Method::DELETE, None) => {
            files.delete(key).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (method @ (Method::GET | Method::HEAD), None) => {
            let range = request
                .headers()
                .get(header::RANGE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            read_object(files, key, range.as_deref(), method == Method::HEAD).await
        }
        (method, _) => Ok(not_implemented(&method)),
    }
}

async fn read_object(
    files: &ObjectFiles,
    key: &str,
    range: Option<&str>,
    head_only: bool,
) -> Result<Response, ObjectError> {
    let (mut file, info) = files.open(key).await?;
    let (status, start, length) = match range {
        None => (StatusCode::OK, 0, info.size),
        Some(range) => match protocol::byte_range(range, info.size) {
            Ok((first, last)) => (StatusCode::PARTIAL_CONTENT, first, last - first + 1),
            Err(error) => {
                return Ok(failure(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "InvalidRange",
                    &error.to_string(),
                ));
            }
        },
    };
    let body = if head_only {
        Body::empty()
    } else {
        if start > 0 {
            file.seek(std::io::SeekFrom::Start(start))
                .await
                .map_err(|source| ObjectError::Io {
                    what: "seeking in",
                    path: std::path::PathBuf::from(key),
                    source,
                })?;
        }
        Body::from_stream(ReaderStream::new(file.take(length)))
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(modified) = HeaderValue::from_str(&protocol::http_date(info.modified)) {
        headers.insert(header::LAST_MODIFIED, modified);
    }
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if status == StatusCode::PARTIAL_CONTENT
        && let Ok(value) = HeaderValue::from_str(&format!(
            "bytes {start}-{}/{}",
            start + length - 1,
            info.size
        ))
    {
        headers.insert(header::CONTENT_RANGE, value);
    }
    Ok(with_etag(response, &info.etag()))
}

fn body_stream(
    request: Request,
) -> impl futures::Stream<Item = Result<bytes::Bytes, axum::Error>> + Unpin {
    request.into_body().into_data_stream().into_stream()
}

async fn read_body(request: Request) -> Result<bytes::Bytes, ObjectError> {
    axum::body::to_bytes(request.into_body(), MAX_XML_BODY)
        .await
        .map_err(|e| ObjectError::Body(e.to_string()))
}

fn with_etag(mut response: Response, etag: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

fn xml(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

fn failure(status: StatusCode, code: &str, message: &str) -> Response {
    xml(status, protocol::error(code, message))
}

fn not_implemented(method: &Method) -> Response {
    failure(
        StatusCode::NOT_IMPLEMENTED,
        "NotImplemented",
        &format!("the backup store does not implement this {method} request"),
    )
}

fn object_failure(error: &ObjectError) -> Response {
    let (status, code) = match error {
        ObjectError::InvalidKey(_) => (StatusCode::BAD_REQUEST, "InvalidArgument"),
        ObjectError::NotFound(_) => (StatusCode::NOT_FOUND, "NoSuchKey"),
        ObjectError::Exists(_) => (StatusCode::PRECONDITION_FAILED, "PreconditionFailed"),
        ObjectError::NoSuchUpload(_) => (StatusCode::NOT_FOUND, "NoSuchUpload"),
        ObjectError::MissingPart { .. } => (StatusCode::BAD_REQUEST, "InvalidPart"),
        ObjectError::Body(_) => (StatusCode::BAD_REQUEST, "IncompleteBody"),
        ObjectError::Io { .. } => {
            tracing::warn!("{error}");
            (StatusCode::INTERNAL_SERVER_ERROR, "InternalError")
        }
    };
    failure(status, code, &error.to_string())
}
