//! An I/O error with what was being done, the one way the lab's crates
//! report failed file, process and socket operations.

/// An I/O error and the action (with its path or address) that failed.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct IoError {
    /// What was being done, e.g. `write /var/lib/etcd-lab/current`.
    pub context: String,
    #[source]
    pub source: std::io::Error,
}

impl IoError {
    pub fn new(context: impl Into<String>, source: std::io::Error) -> Self {
        Self {
            context: context.into(),
            source,
        }
    }

    /// The kind of the underlying I/O error.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.source.kind()
    }
}

/// Attaches what was being done to an I/O result.
pub trait IoContext<T> {
    /// `context` is called only on failure.
    fn context(self, context: impl FnOnce() -> String) -> Result<T, IoError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, IoError> {
        self.map_err(|source| IoError::new(context(), source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_what_failed_and_keeps_the_cause() {
        let result: std::io::Result<()> = Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let error = result.context(|| "read /nowhere".into()).unwrap_err();
        assert!(error.to_string().starts_with("read /nowhere: "));
        assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
        assert!(std::error::Error::source(&error).is_some());
    }
}
