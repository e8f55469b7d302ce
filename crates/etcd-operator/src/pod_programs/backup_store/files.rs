//! The files behind the store: one file per object, at its key's path
//! under the root. A file appears whole or not at all: every upload is
//! written under [`UPLOADS_DIR`] first, synced, and renamed into place.

use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

/// Directory under the root for uploads in progress; never listed, and no
/// key may start with it.
pub const UPLOADS_DIR: &str = ".uploads";

/// What went wrong with an object.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// A key that is not a relative path of plain names.
    #[error("invalid object key {0:?}")]
    InvalidKey(String),
    /// No such object.
    #[error("no object {0:?}")]
    NotFound(String),
    /// The object exists and the request asked to create it only.
    #[error("object {0:?} already exists")]
    Exists(String),
    /// No such multipart upload (finished, aborted or never begun).
    #[error("no upload {0:?}")]
    NoSuchUpload(String),
    /// A part named when completing an upload was never uploaded.
    #[error("upload {upload} has no part {part}")]
    MissingPart {
        /// The upload.
        upload: String,
        /// The part number.
        part: u32,
    },
    /// The request body broke off.
    #[error("request body: {0}")]
    Body(String),
    /// The filesystem refused.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ObjectError + 'a {
    move |source| ObjectError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// One object as listed or read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// When its file was last written.
    pub modified: DateTime<Utc>,
}

impl ObjectInfo {
    /// An entity tag that changes whenever the file is rewritten.
    pub fn etag(&self) -> String {
        format!(
            "\"{:x}-{:x}\"",
            self.size,
            self.modified.timestamp_nanos_opt().unwrap_or_default()
        )
    }
}

/// The objects under one root directory.
#[derive(Debug, Clone)]
pub struct ObjectFiles {
    root: PathBuf,
}

impl ObjectFiles {
    /// The objects under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The file of `key`: every `/`-separated part a plain name, the first
    /// not [`UPLOADS_DIR`].
    pub fn path_of(&self, key: &str) -> Result<PathBuf, ObjectError> {
        let invalid = || ObjectError::InvalidKey(key.to_owned());
        let mut path = self.root.clone();
        for (index, part) in key.split('/').enumerate() {
            if part.is_empty()
                || part == "."
                || part == ".."
                || part.contains('\0')
                || (index == 0 && part == UPLOADS_DIR)
            {
                return Err(invalid());
            }
            path.push(part);
        }
        Ok(path)
    }

    /// Writes `body` as object `key`, replacing it unless `create_only`.
    pub async fn put<S, E>(
        &self,
        key: &str,
        body: S,
        create_only: bool,
    ) -> Result<ObjectInfo, ObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let target = self.path_of(key)?;
        let partial = self.scratch_path("put")?;
        write_stream(&partial, body).await?;
        self.move_into_place(&partial, &target, key, create_only)
            .await?;
        self.info(key).await
    }

    /// The object `key`, if it exists.
    pub async fn info(&self, key: &str) -> Result<ObjectInfo, ObjectError> {
        let path = self.path_of(key)?;
        match tokio::fs::metadata(&path).await {
            Ok(meta) if meta.is_file() => Ok(info_of(key, &meta)),
            Ok(_) => Err(ObjectError::NotFound(key.to_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(ObjectError::NotFound(key.to_owned()))
            }
            Err(e) => Err(io_error("reading", &path)(e)),
        }
    }

    /// Opens object `key` for reading.
    pub async fn open(&self, key: &str) -> Result<(tokio::fs::File, ObjectInfo), ObjectError> {
        let info = self.info(key).await?;
        let path = self.path_of(key)?;
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => ObjectError::NotFound(key.to_owned()),
                _ => io_error("opening", &path)(e),
            })?;
        Ok((file, info))
    }

    /// Deletes object `key`; one that does not exist is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        let path = self.path_of(key)?;
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("deleting", &path)(e)),
        }
    }

    /// Every object whose key starts with `prefix`, in key order.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        let root = self.root.clone();
        let prefix = prefix.to_owned();
        tokio::task::spawn_blocking(move || list_blocking(&root, &prefix))
            .await
            .map_err(|e| ObjectError::Body(format!("listing did not finish: {e}")))?
    }

    /// Begins a multipart upload of `key`; returns its ID.
    pub async fn begin_upload(&self, key: &str) -> Result<String, ObjectError> {
        self.path_of(key)?;
        let id = random_id()?;
        let dir = self.upload_dir(&id)?;
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(io_error("creating", &dir))?;
        let key_file = dir.join("key");
        tokio::fs::write(&key_file, key)
            .await
            .map_err(io_error("writing", &key_file))?;
        Ok(id)
    }

    /// Writes part `number` of upload `id`; returns its entity tag.
    pub async fn put_part<S, E>(
        &self,
        id: &str,
        number: u32,
        body: S,
    ) -> Result<String, ObjectError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let dir = self.existing_upload(id).await?;
        let part = dir.join(format!("part-{number:05}"));
        let size = write_stream(&part, body).await?;
        Ok(format!("\"part-{number}-{size:x}\""))
    }

    /// Joins the parts `numbers` of upload `id`, in that order, into its
    /// object and ends the upload.
    pub async fn complete_upload(
        &self,
        id: &str,
        key: &str,
        numbers: &[u32],
    ) -> Result<ObjectInfo, ObjectError> {
        let dir = self.existing_upload(id).await?;
        let key_file = dir.join("key");
        let begun_for = tokio::fs::read_to_string(&key_file)
            .await
            .map_err(io_error("reading", &key_file))?;
        if begun_for != key {
            return Err(ObjectError::NoSuchUpload(id.to_owned()));
        }
        let joined = dir.join("object");
        let mut out = tokio::fs::File::create(&joined)
            .await
            .map_err(io_error("creating", &joined))?;
        for &number in numbers {
            let part = dir.join(format!("part-{number:05}"));
            let mut input = match tokio::fs::File::open(&part).await {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(ObjectError::MissingPart {
                        upload: id.to_owned(),
                        part: number,
                    });
                }
                Err(e) => return Err(io_error("opening", &part)(e)),
            };
            tokio::io::copy(&mut input, &mut out)
                .await
                .map_err(io_error("copying", &part))?;
        }
        out.sync_all().await.map_err(io_error("syncing", &joined))?;
        drop(out);
        let target = self.path_of(key)?;
        self.move_into_place(&joined, &target, key, false).await?;
        tokio::fs::remove_dir_all(&dir)
            .await
            .map_err(io_error("removing", &dir))?;
        self.info(key).await
    }

    /// Abandons upload `id` and its parts.
    pub async fn abort_upload(&self, id: &str) -> Result<(), ObjectError> {
        let dir = self.upload_dir(id)?;
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error("removing", &dir)(e)),
        }
    }

    fn upload_dir(&self, id: &str) -> Result<PathBuf, ObjectError> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(ObjectError::NoSuchUpload(id.to_owned()));
        }
        Ok(self.root.join(UPLOADS_DIR).join(id))
    }

    async fn existing_upload(&self, id: &str) -> Result<PathBuf, ObjectError> {
        let dir = self.upload_dir(id)?;
        if tokio::fs::metadata(&dir).await.is_ok_and(|m| m.is_dir()) {
            Ok(dir)
        } else {
            Err(ObjectError::NoSuchUpload(id.to_owned()))
        }
    }

    fn scratch_path(&self, what: &str) -> Result<PathBuf, ObjectError> {
        Ok(self
            .root
            .join(UPLOADS_DIR)
            .join(format!("{what}-{}", random_id()?)))
    }

    async fn move_into_place(
        &self,
        from: &Path,
        target: &Path,
        key: &str,
        create_only: bool,
    ) -> Result<(), ObjectError> {
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(io_error("creating", parent))?;
        }
        if create_only && tokio::fs::metadata(target).await.is_ok() {
            let _ = tokio::fs::remove_file(from).await;
            return Err(ObjectError::Exists(key.to_owned()));
        }
        tokio::fs::rename(from, target)
            .await
            .map_err(io_error("moving into place", target))
    }
}

/// Writes `body` to a new file at `path` (its directory created), synced;
/// returns the bytes written.
async fn write_stream<S, E>(path: &Path, mut body: S) -> Result<u64, ObjectError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(io_error("creating", parent))?;
    }
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(io_error("creating", path))?;
    let mut written = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                drop(file);
                let _ = tokio::fs::remove_file(path).await;
                return Err(ObjectError::Body(e.to_string()));
            }
        };
        file.write_all(&chunk)
            .await
            .map_err(io_error("writing", path))?;
        written += chunk.len() as u64;
    }
    file.sync_all().await.map_err(io_error("syncing", path))?;
    Ok(written)
}

fn info_of(key: &str, meta: &std::fs::Metadata) -> ObjectInfo {
    ObjectInfo {
        key: key.to_owned(),
        size: meta.len(),
        modified: meta
            .modified()
            .map(DateTime::<Utc>::from)
            .unwrap_or_default(),
    }
}

fn list_blocking(root: &Path, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
    // Start at the deepest directory the prefix names whole.
    let start_key = prefix.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut start = root.to_path_buf();
    if !start_key.is_empty() {
        for part in start_key.split('/') {
            if part.is_empty() || part == "." || part == ".." {
                return Ok(Vec::new());
            }
            start.push(part);
        }
    }
    let mut found = Vec::new();
    let mut pending = vec![(start, start_key.to_owned())];
    while let Some((dir, key_of_dir)) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => continue,
            Err(e) => return Err(io_error("listing", &dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_error("listing", &dir))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if key_of_dir.is_empty() && name == UPLOADS_DIR {
                continue;
            }
            let key = if key_of_dir.is_empty() {
                name
            } else {
                format!("{key_of_dir}/{name}")
            };
            let meta = entry
                .metadata()
                .map_err(io_error("reading", &entry.path()))?;
            if meta.is_dir() {
                if key.starts_with(prefix) || prefix.starts_with(&format!("{key}/")) {
                    pending.push((entry.path(), key));
                }
            } else if meta.is_file() && key.starts_with(prefix) {
                found.push(info_of(&key, &meta));
            }
        }
    }
    found.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(found)
}

fn random_id() -> Result<String, ObjectError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| ObjectError::Io {
        what: "drawing a random upload ID",
        path: PathBuf::new(),
        source: io::Error::other(e.to_string()),
    })?;
    Ok(hex::encode(bytes))
}
