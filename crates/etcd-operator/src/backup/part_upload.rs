//! A multipart upload fed whole parts, a bounded number in flight, whose
//! end is in two steps a caller can time apart: every part stored, then
//! the store's completion (an S3 `CompleteMultipartUpload`, the local
//! store's rename).

use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::{MultipartUpload, PutPayload};
use tokio::task::JoinSet;

use super::BackupError;

/// An upload in progress; parts are stored in the order they are put.
pub struct PartUpload {
    upload: Box<dyn MultipartUpload>,
    in_flight: JoinSet<object_store::Result<()>>,
}

impl PartUpload {
    pub fn new(upload: Box<dyn MultipartUpload>) -> Self {
        Self {
            upload,
            in_flight: JoinSet::new(),
        }
    }

    /// Starts storing `part` (its number is taken now) once fewer than
    /// `max_in_flight` parts are in flight.
    pub async fn put(&mut self, part: Bytes, max_in_flight: usize) -> Result<(), BackupError> {
        while self.in_flight.len() >= max_in_flight.max(1) {
            self.join_one().await?;
        }
        self.in_flight
            .spawn(self.upload.put_part(PutPayload::from(part)));
        Ok(())
    }

    /// Waits until every part put is stored, then asks the store to complete
    /// the upload; returns how long the completion alone took. An upload
    /// that cannot complete is aborted, so nothing partial is left behind.
    pub async fn finish(mut self) -> Result<Duration, BackupError> {
        let completed = async {
            while !self.in_flight.is_empty() {
                self.join_one().await?;
            }
            let completing = Instant::now();
            self.upload.complete().await?;
            Ok::<_, BackupError>(completing.elapsed())
        }
        .await;
        if completed.is_err() {
            let _ = self.abort().await;
        }
        completed
    }

    /// Stops the parts in flight and discards what the store holds of the
    /// upload.
    pub async fn abort(mut self) -> Result<(), BackupError> {
        self.in_flight.shutdown().await;
        self.upload.abort().await?;
        Ok(())
    }

    async fn join_one(&mut self) -> Result<(), BackupError> {
        match self.in_flight.join_next().await {
            None => Ok(()),
            Some(Ok(stored)) => Ok(stored?),
            Some(Err(e)) => Err(BackupError::io(
                "store a part of the upload",
                std::io::Error::other(e),
            )),
        }
    }
}
