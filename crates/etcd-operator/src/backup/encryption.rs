//! Client-side encryption of stored backup objects, so that the object
//! store only ever holds ciphertext.
//!
//! An object is compressed first, then sealed here with XChaCha20-Poly1305
//! in the STREAM construction (Hoang, Reyhanitabar, Rogaway, Vizár:
//! "Online Authenticated-Encryption and its Nonce-Reuse
//! Misuse-Resistance"; RustCrypto's `aead-stream`, flavour BE32):
//!
//! ```text
//! header (36 bytes): "ETCD-ENC" | version 1 | key fingerprint (8) | nonce prefix (19)
//! chunk 0:  XChaCha20-Poly1305(nonce = prefix | 0u32 BE | 0, aad = header, 64 KiB) + tag (16)
//! chunk 1:  ...                            (prefix | 1u32 BE | 0)
//! last:     0 ..= 64 KiB + tag             (prefix | n BE    | 1)
//! ```
//!
//! Every chunk's nonce holds its position and a "last chunk" flag, and
//! every chunk authenticates the whole header: a flipped byte, reordered
//! or dropped chunks, a missing final chunk, bytes appended after it, or a
//! header from another object are all refused. The 19-byte random nonce
//! prefix per object keeps nonces apart across the many objects one key
//! seals (no birthday bound worth counting). Memory stays at one chunk
//! per direction, whatever the object's size.
//!
//! [`Sealer`] and [`Opener`] are the synchronous core; [`SealingWriter`]
//! and [`OpeningReader`] adapt them to tokio I/O, and pass bytes through
//! unchanged when no key is given, so one code path serves both;
//! [`seal`] and [`open`] handle small objects held in memory.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use aead_stream::{NewStream, StreamBE32, StreamPrimitive};
use base64::Engine as _;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite, ReadBuf};

/// Bytes of plaintext per chunk (the last chunk holds 0 to this many).
pub const CHUNK_SIZE: usize = 64 * 1024;
/// Bytes of the authentication tag after each chunk.
pub const TAG_LEN: usize = 16;
/// Bytes of a stored chunk: plaintext plus tag.
const SEALED_CHUNK: usize = CHUNK_SIZE + TAG_LEN;
/// First bytes of every encrypted object.
const MAGIC: &[u8; 8] = b"ETCD-ENC";
/// The only format version written and read.
const VERSION: u8 = 1;
const FINGERPRINT_LEN: usize = 8;
/// XChaCha20's 24-byte nonce less STREAM's counter (4) and flag (1).
const NONCE_PREFIX_LEN: usize = 19;
/// Bytes of the header: magic, version, key fingerprint, nonce prefix.
pub const HEADER_LEN: usize = MAGIC.len() + 1 + FINGERPRINT_LEN + NONCE_PREFIX_LEN;
/// The scheme recorded in backup metadata.
pub const SCHEME: &str = "xchacha20poly1305-stream-64k-v1";
/// Bytes of a key.
pub const KEY_LEN: usize = 32;
/// Domain separation of key fingerprints.
const FINGERPRINT_LABEL: &[u8] = b"etcd-operator backup encryption key fingerprint v1\0";

type Stream = StreamBE32<XChaCha20Poly1305>;

/// Why an object cannot be sealed or opened, or a key is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncryptionError {
    /// The key's bytes are neither 32 raw bytes nor base64 of 32 bytes.
    #[error(
        "an encryption key must be 32 raw bytes or the base64 of 32 bytes (e.g. `head -c 32 /dev/urandom | base64`), got {0}"
    )]
    InvalidKey(String),

    /// The object does not start with the header of an encrypted object.
    #[error("not an encrypted backup object (no ETCD-ENC header)")]
    NotEncrypted,

    /// The header names a format version this operator cannot read.
    #[error("encrypted with format version {0}, this operator reads version 1")]
    UnsupportedVersion(u8),

    /// The object's header names another key than the one given.
    #[error("encrypted with key {object}, the given key is {given}")]
    WrongKey {
        /// Fingerprint in the object's header.
        object: String,
        /// Fingerprint of the key given.
        given: String,
    },

    /// The object ends early.
    #[error("truncated: {0}")]
    Truncated(String),

    /// A chunk fails authentication.
    #[error("chunk {chunk} does not authenticate: tampered, reordered or from another object")]
    Tampered {
        /// Position of the chunk, from 0.
        chunk: u32,
    },

    /// More than 2^32 - 1 chunks (256 TiB) in one object.
    #[error("object too large for one encrypted stream")]
    TooLarge,

    /// The system's random source failed.
    #[error("no random nonce: {0}")]
    Random(String),
}

/// A 256-bit key. Its `Debug` shows the fingerprint, never the key.
#[derive(Clone, PartialEq, Eq)]
pub struct EncryptionKey {
    bytes: [u8; KEY_LEN],
}

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncryptionKey({})", self.fingerprint())
    }
}

impl EncryptionKey {
    /// A key from exactly 32 bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self { bytes }
    }

    /// A key from a Secret's value: exactly 32 bytes are the key; anything
    /// else must be base64 (standard alphabet, padding optional, spaces and
    /// newlines around it ignored) of 32 bytes.
    pub fn from_secret_value(value: &[u8]) -> Result<Self, EncryptionError> {
        if let Ok(bytes) = <[u8; KEY_LEN]>::try_from(value) {
            return Ok(Self { bytes });
        }
        let text = value.trim_ascii();
        let engine = base64::engine::GeneralPurpose::new(
            &base64::alphabet::STANDARD,
            base64::engine::GeneralPurposeConfig::new()
                .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
        );
        let decoded = engine.decode(text).map_err(|_| {
            EncryptionError::InvalidKey(format!(
                "{} bytes that are not base64 of 32 bytes",
                value.len()
            ))
        })?;
        let bytes = <[u8; KEY_LEN]>::try_from(decoded.as_slice()).map_err(|_| {
            EncryptionError::InvalidKey(format!("base64 of {} bytes", decoded.len()))
        })?;
        Ok(Self { bytes })
    }

    /// A fresh random key (tests, key generation).
    pub fn generate() -> Result<Self, EncryptionError> {
        let mut bytes = [0u8; KEY_LEN];
        getrandom::fill(&mut bytes).map_err(|e| EncryptionError::Random(e.to_string()))?;
        Ok(Self { bytes })
    }

    /// Hex of the first 8 bytes of SHA-256 over a fixed label and the key:
    /// names the key in metadata and errors without revealing it.
    pub fn fingerprint(&self) -> String {
        hex::encode(self.fingerprint_bytes())
    }

    fn fingerprint_bytes(&self) -> [u8; FINGERPRINT_LEN] {
        let digest = Sha256::new()
            .chain_update(FINGERPRINT_LABEL)
            .chain_update(self.bytes)
            .finalize();
        let mut out = [0u8; FINGERPRINT_LEN];
        out.copy_from_slice(&digest[..FINGERPRINT_LEN]);
        out
    }

    /// What backup metadata records about objects sealed with this key.
    pub fn info(&self) -> EncryptionInfo {
        EncryptionInfo {
            scheme: SCHEME.to_string(),
            key_fingerprint: self.fingerprint(),
        }
    }

    fn stream(&self, nonce_prefix: &[u8; NONCE_PREFIX_LEN]) -> Stream {
        let cipher = XChaCha20Poly1305::new(&self.bytes.into());
        Stream::from_aead(cipher, &(*nonce_prefix).into())
    }
}

/// How a stored object is encrypted, as recorded in its metadata.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionInfo {
    /// The construction ([`SCHEME`]).
    pub scheme: String,
    /// [`EncryptionKey::fingerprint`] of the key that sealed the object.
    pub key_fingerprint: String,
}

/// Encrypts one object, chunk by chunk. Feed the plaintext with
/// [`Sealer::push`], then call [`Sealer::finish`]; the output (header
/// first) is appended to `out`.
pub struct Sealer {
    stream: Stream,
    header: [u8; HEADER_LEN],
    header_written: bool,
    position: u32,
    chunk: Vec<u8>,
}

impl Sealer {
    /// A sealer with a fresh random nonce prefix.
    pub fn new(key: &EncryptionKey) -> Result<Self, EncryptionError> {
        let mut nonce_prefix = [0u8; NONCE_PREFIX_LEN];
        getrandom::fill(&mut nonce_prefix).map_err(|e| EncryptionError::Random(e.to_string()))?;
        let mut header = [0u8; HEADER_LEN];
        header[..MAGIC.len()].copy_from_slice(MAGIC);
        header[MAGIC.len()] = VERSION;
        let fingerprint_at = MAGIC.len() + 1;
        header[fingerprint_at..fingerprint_at + FINGERPRINT_LEN]
            .copy_from_slice(&key.fingerprint_bytes());
        header[fingerprint_at + FINGERPRINT_LEN..].copy_from_slice(&nonce_prefix);
        Ok(Self {
            stream: key.stream(&nonce_prefix),
            header,
            header_written: false,
            position: 0,
            chunk: Vec::with_capacity(SEALED_CHUNK),
        })
    }

    /// Encrypts what completes a chunk; keeps the rest for later.
    pub fn push(&mut self, mut plain: &[u8], out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        self.write_header(out);
        while !plain.is_empty() {
            // A full chunk is sealed only once more data shows it is not
            // the last one.
            if self.chunk.len() == CHUNK_SIZE {
                self.seal_chunk(false, out)?;
            }
            let take = (CHUNK_SIZE - self.chunk.len()).min(plain.len());
            self.chunk.extend_from_slice(&plain[..take]);
            plain = &plain[take..];
        }
        Ok(())
    }

    /// Seals what is left as the last chunk (possibly empty).
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        self.write_header(out);
        self.seal_chunk(true, out)
    }

    fn write_header(&mut self, out: &mut Vec<u8>) {
        if !self.header_written {
            out.extend_from_slice(&self.header);
            self.header_written = true;
        }
    }

    fn seal_chunk(&mut self, last: bool, out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        if !last && self.position == u32::MAX {
            return Err(EncryptionError::TooLarge);
        }
        self.stream
            .encrypt_in_place(self.position, last, &self.header, &mut self.chunk)
            .map_err(|_| EncryptionError::TooLarge)?;
        out.extend_from_slice(&self.chunk);
        self.chunk.clear();
        self.position += 1;
        Ok(())
    }
}

/// Decrypts one object sealed by a [`Sealer`], checking every chunk, their
/// order and the final chunk. Feed the stored bytes with
/// [`Opener::push`], then call [`Opener::finish`]; plaintext is appended to
/// `out` only once its chunk authenticated.
pub struct Opener {
    key: EncryptionKey,
    header: Vec<u8>,
    stream: Option<Stream>,
    position: u32,
    chunk: Vec<u8>,
}

impl Opener {
    /// An opener for objects sealed with `key`.
    pub fn new(key: &EncryptionKey) -> Self {
        Self {
            key: key.clone(),
            header: Vec::with_capacity(HEADER_LEN),
            stream: None,
            position: 0,
            chunk: Vec::with_capacity(SEALED_CHUNK),
        }
    }

    /// Opens every chunk that is complete and known not to be the last.
    pub fn push(&mut self, mut sealed: &[u8], out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        if self.stream.is_none() {
            let take = (HEADER_LEN - self.header.len()).min(sealed.len());
            self.header.extend_from_slice(&sealed[..take]);
            sealed = &sealed[take..];
            if self.header.len() < HEADER_LEN {
                return Ok(());
            }
            self.stream = Some(self.read_header()?);
        }
        while !sealed.is_empty() {
            if self.chunk.len() == SEALED_CHUNK {
                self.open_chunk(false, out)?;
            }
            let take = (SEALED_CHUNK - self.chunk.len()).min(sealed.len());
            self.chunk.extend_from_slice(&sealed[..take]);
            sealed = &sealed[take..];
        }
        Ok(())
    }

    /// Opens the last chunk: the end of the object.
    pub fn finish(self, out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        if self.stream.is_none() {
            return Err(
                if self.header.len() < MAGIC.len() && !MAGIC.starts_with(&self.header) {
                    EncryptionError::NotEncrypted
                } else {
                    EncryptionError::Truncated(format!(
                        "{} bytes, shorter than the {HEADER_LEN}-byte header",
                        self.header.len()
                    ))
                },
            );
        }
        if self.chunk.len() < TAG_LEN {
            return Err(EncryptionError::Truncated(format!(
                "ends inside chunk {}",
                self.position
            )));
        }
        match self.decrypt_chunk(true) {
            Ok(plain) => {
                out.extend_from_slice(&plain);
                Ok(())
            }
            // A whole chunk that opens as "not last" means the real last
            // chunk was cut off: say so rather than "tampered".
            Err(_) if self.chunk.len() == SEALED_CHUNK && self.decrypt_chunk(false).is_ok() => {
                Err(EncryptionError::Truncated(format!(
                    "the final chunk is missing after chunk {}",
                    self.position
                )))
            }
            Err(error) => Err(error),
        }
    }

    fn read_header(&self) -> Result<Stream, EncryptionError> {
        let (magic, rest) = self.header.split_at(MAGIC.len());
        if magic != MAGIC {
            return Err(EncryptionError::NotEncrypted);
        }
        if rest[0] != VERSION {
            return Err(EncryptionError::UnsupportedVersion(rest[0]));
        }
        let (fingerprint, nonce_prefix) = rest[1..].split_at(FINGERPRINT_LEN);
        if fingerprint != self.key.fingerprint_bytes() {
            return Err(EncryptionError::WrongKey {
                object: hex::encode(fingerprint),
                given: self.key.fingerprint(),
            });
        }
        let mut prefix = [0u8; NONCE_PREFIX_LEN];
        prefix.copy_from_slice(nonce_prefix);
        Ok(self.key.stream(&prefix))
    }

    fn open_chunk(&mut self, last: bool, out: &mut Vec<u8>) -> Result<(), EncryptionError> {
        if !last && self.position == u32::MAX {
            return Err(EncryptionError::TooLarge);
        }
        let plain = self.decrypt_chunk(last)?;
        out.extend_from_slice(&plain);
        self.chunk.clear();
        self.position += 1;
        Ok(())
    }

    /// The plaintext of the chunk held, if it authenticates at the current
    /// position as last or not last.
    fn decrypt_chunk(&self, last: bool) -> Result<Vec<u8>, EncryptionError> {
        let Some(stream) = &self.stream else {
            return Err(EncryptionError::NotEncrypted);
        };
        let mut plain = self.chunk.clone();
        stream
            .decrypt_in_place(self.position, last, &self.header, &mut plain)
            .map_err(|_| EncryptionError::Tampered {
                chunk: self.position,
            })?;
        Ok(plain)
    }
}

/// Seals a whole object held in memory.
pub fn seal(key: &EncryptionKey, plain: &[u8]) -> Result<Vec<u8>, EncryptionError> {
    let chunks = plain.len() / CHUNK_SIZE + 1;
    let mut out = Vec::with_capacity(HEADER_LEN + plain.len() + chunks * TAG_LEN);
    let mut sealer = Sealer::new(key)?;
    sealer.push(plain, &mut out)?;
    sealer.finish(&mut out)?;
    Ok(out)
}

/// Opens a whole object held in memory.
pub fn open(key: &EncryptionKey, sealed: &[u8]) -> Result<Vec<u8>, EncryptionError> {
    let mut out = Vec::with_capacity(sealed.len());
    let mut opener = Opener::new(key);
    opener.push(sealed, &mut out)?;
    opener.finish(&mut out)?;
    Ok(out)
}

fn invalid_data(error: EncryptionError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// The [`EncryptionError`] inside an I/O error from [`OpeningReader`] or
/// [`SealingWriter`] (also when a decoder passed it through).
pub fn encryption_error(error: &io::Error) -> Option<&EncryptionError> {
    error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<EncryptionError>())
}

/// An [`AsyncWrite`] that seals what is written to it into `inner`, or
/// passes it through unchanged when built without a key. The object is
/// complete once `shutdown` returned.
pub struct SealingWriter<W> {
    inner: W,
    /// `None` without a key, or once finished.
    sealer: Option<Sealer>,
    sealing: bool,
    out: Vec<u8>,
    written: usize,
}

impl<W: AsyncWrite + Unpin> SealingWriter<W> {
    /// Seals into `inner` with `key`, or passes through when `None`.
    pub fn new(inner: W, key: Option<&EncryptionKey>) -> Result<Self, EncryptionError> {
        let sealer = key.map(Sealer::new).transpose()?;
        Ok(Self {
            inner,
            sealing: sealer.is_some(),
            sealer,
            out: Vec::new(),
            written: 0,
        })
    }

    /// The writer underneath.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// The writer underneath (e.g. to take a buffer's bytes).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Writes the sealed bytes waiting in `out` into `inner`.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.out.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for SealingWriter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.sealing {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        ready!(this.poll_drain(cx))?;
        let Some(sealer) = this.sealer.as_mut() else {
            return Poll::Ready(Err(io::Error::other("write after shutdown")));
        };
        let n = buf.len().min(CHUNK_SIZE);
        sealer
            .push(&buf[..n], &mut this.out)
            .map_err(invalid_data)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        if let Some(sealer) = this.sealer.take() {
            sealer.finish(&mut this.out).map_err(invalid_data)?;
            ready!(this.poll_drain(cx))?;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// An [`AsyncBufRead`] that opens a sealed object read from `inner`, or
/// passes it through unchanged when built without a key. Only
/// authenticated plaintext is handed out; a failure is an
/// [`io::ErrorKind::InvalidData`] error holding the [`EncryptionError`]
/// (see [`encryption_error`]).
pub struct OpeningReader<R> {
    inner: R,
    /// `None` without a key, or once the end was checked.
    opener: Option<Opener>,
    opening: bool,
    out: Vec<u8>,
    consumed: usize,
}

impl<R: AsyncBufRead + Unpin> OpeningReader<R> {
    /// Opens what `inner` yields with `key`, or passes through when `None`.
    pub fn new(inner: R, key: Option<&EncryptionKey>) -> Self {
        let opener = key.map(Opener::new);
        Self {
            inner,
            opening: opener.is_some(),
            opener,
            out: Vec::with_capacity(SEALED_CHUNK),
            consumed: 0,
        }
    }
}

impl<R: AsyncBufRead + Unpin> AsyncBufRead for OpeningReader<R> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        if !this.opening {
            return Pin::new(&mut this.inner).poll_fill_buf(cx);
        }
        while this.consumed == this.out.len() {
            this.out.clear();
            this.consumed = 0;
            let Some(opener) = this.opener.as_mut() else {
                break; // end of the object, checked
            };
            let sealed = ready!(Pin::new(&mut this.inner).poll_fill_buf(cx))?;
            if sealed.is_empty() {
                if let Some(opener) = this.opener.take() {
                    opener.finish(&mut this.out).map_err(invalid_data)?;
                }
                continue;
            }
            let n = sealed.len();
            opener.push(sealed, &mut this.out).map_err(invalid_data)?;
            Pin::new(&mut this.inner).consume(n);
        }
        Poll::Ready(Ok(&this.out[this.consumed..]))
    }

    fn consume(self: Pin<&mut Self>, amount: usize) {
        let this = self.get_mut();
        if this.opening {
            this.consumed = (this.consumed + amount).min(this.out.len());
        } else {
            Pin::new(&mut this.inner).consume(amount);
        }
    }
}

impl<R: AsyncBufRead + Unpin> AsyncRead for OpeningReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let available = ready!(self.as_mut().poll_fill_buf(cx))?;
        let n = available.len().min(buf.remaining());
        buf.put_slice(&available[..n]);
        self.consume(n);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn key(seed: u8) -> EncryptionKey {
        EncryptionKey::from_bytes([seed; KEY_LEN])
    }

    fn plaintext(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 131 % 251) as u8).collect()
    }

    /// Chunks of a sealed object: (start, end) of each stored chunk.
    fn chunk_bounds(sealed_len: usize) -> Vec<(usize, usize)> {
        let mut bounds = Vec::new();
        let mut start = HEADER_LEN;
        while start < sealed_len {
            let end = (start + SEALED_CHUNK).min(sealed_len);
            bounds.push((start, end));
            start = end;
        }
        bounds
    }

    #[test]
    fn round_trips_every_size_around_the_chunk() {
        let key = key(7);
        for len in [
            0,
            1,
            CHUNK_SIZE - 1,
            CHUNK_SIZE,
            CHUNK_SIZE + 1,
            2 * CHUNK_SIZE,
            5 * 1024 * 1024 + 3,
        ] {
            let plain = plaintext(len);
            let sealed = seal(&key, &plain).expect("seal");
            let chunks = len.div_ceil(CHUNK_SIZE).max(1);
            assert_eq!(
                sealed.len(),
                HEADER_LEN + len + chunks * TAG_LEN,
                "size {len}"
            );
            assert_eq!(open(&key, &sealed).expect("open"), plain, "size {len}");
        }
    }

    #[test]
    fn pieces_of_any_size_give_the_same_plaintext() {
        let key = key(1);
        let plain = plaintext(3 * CHUNK_SIZE + 17);
        let mut sealer = Sealer::new(&key).expect("sealer");
        let mut sealed = Vec::new();
        for piece in plain.chunks(1000) {
            sealer.push(piece, &mut sealed).expect("push");
        }
        sealer.finish(&mut sealed).expect("finish");
        for size in [1, 35, 36, 37, SEALED_CHUNK, SEALED_CHUNK + 1, 1 << 20] {
            let mut opener = Opener::new(&key);
            let mut out = Vec::new();
            for piece in sealed.chunks(size) {
                opener.push(piece, &mut out).expect("push");
            }
            opener.finish(&mut out).expect("finish");
            assert_eq!(out, plain, "pieces of {size}");
        }
    }

    #[test]
    fn the_same_plaintext_seals_differently_and_never_shows() {
        let key = key(3);
        let plain = b"a very recognisable value ".repeat(100);
        let a = seal(&key, &plain).expect("seal");
        let b = seal(&key, &plain).expect("seal");
        assert_ne!(a, b, "fresh nonce per object");
        assert!(!a.windows(26).any(|w| w == &plain[..26]));
    }

    #[test]
    fn a_flipped_byte_anywhere_is_refused() {
        let key = key(9);
        let sealed = seal(&key, &plaintext(2 * CHUNK_SIZE + 100)).expect("seal");
        // In a middle chunk, the last chunk, a tag, the nonce prefix.
        for at in [
            HEADER_LEN + SEALED_CHUNK + 5,
            sealed.len() - 50,
            sealed.len() - 1,
            HEADER_LEN - 1,
        ] {
            let mut bad = sealed.clone();
            bad[at] ^= 0x01;
            let error = open(&key, &bad).expect_err("tampered");
            assert!(
                matches!(error, EncryptionError::Tampered { .. }),
                "byte {at}: {error}"
            );
        }
        let mut bad = sealed.clone();
        bad[HEADER_LEN + 5] ^= 0x80;
        assert_eq!(
            open(&key, &bad).expect_err("tampered"),
            EncryptionError::Tampered { chunk: 0 }
        );
        assert!(
            EncryptionError::Tampered { chunk: 0 }
                .to_string()
                .contains("chunk 0 does not authenticate")
        );
    }

    #[test]
    fn a_dropped_last_chunk_is_refused_as_truncated() {
        let key = key(4);
        // Three chunks, the last short; and exactly two full chunks, the
        // second one last.
        for len in [2 * CHUNK_SIZE + 10, 2 * CHUNK_SIZE] {
            let sealed = seal(&key, &plaintext(len)).expect("seal");
            let bounds = chunk_bounds(sealed.len());
            let last = u32::try_from(bounds.len() - 1).expect("few chunks");
            let (last_start, _) = bounds[bounds.len() - 1];
            let error = open(&key, &sealed[..last_start]).expect_err("truncated");
            assert_eq!(
                error,
                EncryptionError::Truncated(format!(
                    "the final chunk is missing after chunk {}",
                    last - 1
                )),
                "len {len}"
            );
            // Cut inside the chunk before the last.
            let error = open(&key, &sealed[..last_start - 100]).expect_err("cut");
            assert_eq!(
                error,
                EncryptionError::Tampered { chunk: last - 1 },
                "len {len}"
            );
            // Cut inside the last chunk.
            let error = open(&key, &sealed[..sealed.len() - 1]).expect_err("cut");
            assert_eq!(
                error,
                EncryptionError::Tampered { chunk: last },
                "len {len}"
            );
        }
        let sealed = seal(&key, b"").expect("seal");
        let error = open(&key, &sealed[..HEADER_LEN]).expect_err("no chunk");
        assert!(matches!(error, EncryptionError::Truncated(_)), "{error}");
        let error = open(&key, &sealed[..10]).expect_err("half header");
        assert!(matches!(error, EncryptionError::Truncated(_)), "{error}");
    }

    #[test]
    fn swapped_chunks_and_appended_bytes_are_refused() {
        let key = key(5);
        let sealed = seal(&key, &plaintext(3 * CHUNK_SIZE + 1)).expect("seal");
        let bounds = chunk_bounds(sealed.len());
        let (a, b, c) = (bounds[0], bounds[1], bounds[2]);
        let mut swapped = sealed[..HEADER_LEN].to_vec();
        swapped.extend_from_slice(&sealed[b.0..b.1]);
        swapped.extend_from_slice(&sealed[a.0..a.1]);
        swapped.extend_from_slice(&sealed[c.0..]);
        assert_eq!(
            open(&key, &swapped).expect_err("swapped"),
            EncryptionError::Tampered { chunk: 0 }
        );
        let mut appended = sealed.clone();
        appended.extend_from_slice(&sealed[a.0..a.1]);
        assert!(open(&key, &appended).is_err());

        // A chunk from another object sealed with the same key.
        let other = seal(&key, &plaintext(3 * CHUNK_SIZE + 1)).expect("seal");
        let mut mixed = sealed.clone();
        mixed[b.0..b.1].copy_from_slice(&other[b.0..b.1]);
        assert_eq!(
            open(&key, &mixed).expect_err("foreign chunk"),
            EncryptionError::Tampered { chunk: 1 }
        );
    }

    #[test]
    fn a_wrong_key_is_named_before_any_chunk_is_tried() {
        let sealed = seal(&key(1), &plaintext(100)).expect("seal");
        let error = open(&key(2), &sealed).expect_err("wrong key");
        assert_eq!(
            error,
            EncryptionError::WrongKey {
                object: key(1).fingerprint(),
                given: key(2).fingerprint(),
            }
        );
        // A header rewritten to name the other key still fails: the
        // chunks authenticate the header and the key.
        let mut forged = sealed.clone();
        forged[9..17].copy_from_slice(&key(2).fingerprint_bytes());
        assert!(matches!(
            open(&key(2), &forged).expect_err("forged"),
            EncryptionError::Tampered { chunk: 0 }
        ));
        assert_eq!(
            open(&key(1), &plaintext(100)).expect_err("plain"),
            EncryptionError::NotEncrypted
        );
        let mut future = sealed.clone();
        future[8] = 2;
        assert_eq!(
            open(&key(1), &future).expect_err("version"),
            EncryptionError::UnsupportedVersion(2)
        );
    }

    #[test]
    fn keys_are_32_raw_bytes_or_base64_of_32_bytes() {
        let raw = [0x5au8; KEY_LEN];
        let from_raw = EncryptionKey::from_secret_value(&raw).expect("raw");
        let text = base64::engine::general_purpose::STANDARD.encode(raw);
        let from_text =
            EncryptionKey::from_secret_value(format!("{text}\n").as_bytes()).expect("base64");
        assert_eq!(from_raw, from_text);
        let unpadded = text.trim_end_matches('=');
        assert_eq!(
            EncryptionKey::from_secret_value(unpadded.as_bytes()).expect("unpadded"),
            from_raw
        );
        for bad in [&b"short"[..], &[0u8; 31][..], &[0u8; 33][..], b"c2hvcnQ="] {
            let error = EncryptionKey::from_secret_value(bad).expect_err("bad key");
            assert!(matches!(error, EncryptionError::InvalidKey(_)), "{error}");
        }
        let error = EncryptionKey::from_secret_value(b"c2hvcnQ=").expect_err("5 bytes");
        assert!(error.to_string().contains("base64 of 5 bytes"), "{error}");
    }

    #[test]
    fn fingerprints_name_keys_without_showing_them() {
        let a = key(1);
        assert_eq!(a.fingerprint().len(), 16);
        assert_eq!(a.fingerprint(), key(1).fingerprint());
        assert_ne!(a.fingerprint(), key(2).fingerprint());
        assert_eq!(
            format!("{a:?}"),
            format!("EncryptionKey({})", a.fingerprint())
        );
        assert_eq!(a.info().scheme, SCHEME);
    }

    #[test]
    fn as_backup_errors_a_bad_key_is_configuration_and_a_bad_object_corrupt() {
        use crate::backup::{BackupError, BackupErrorCategory};
        let category = |e: EncryptionError| BackupError::from(e).category();
        assert_eq!(
            category(EncryptionError::InvalidKey("x".into())),
            BackupErrorCategory::Configuration
        );
        assert_eq!(
            category(EncryptionError::WrongKey {
                object: "a".into(),
                given: "b".into()
            }),
            BackupErrorCategory::Configuration
        );
        for error in [
            EncryptionError::Tampered { chunk: 3 },
            EncryptionError::Truncated("x".into()),
            EncryptionError::NotEncrypted,
        ] {
            assert_eq!(category(error), BackupErrorCategory::Corrupt);
        }
    }

    #[tokio::test]
    async fn the_async_adapters_round_trip_and_pass_through_without_a_key() {
        let key = key(8);
        let plain = plaintext(3 * CHUNK_SIZE + 12_345);
        for key in [Some(&key), None] {
            let mut writer = SealingWriter::new(Vec::new(), key).expect("writer");
            for piece in plain.chunks(10_000) {
                writer.write_all(piece).await.expect("write");
            }
            writer.shutdown().await.expect("shutdown");
            let stored = std::mem::take(writer.get_mut());
            assert_eq!(stored == plain, key.is_none());
            let mut reader = OpeningReader::new(&stored[..], key);
            let mut back = Vec::new();
            reader.read_to_end(&mut back).await.expect("read");
            assert_eq!(back, plain);
        }
    }

    #[tokio::test]
    async fn the_reader_reports_the_encryption_error() {
        let key = key(8);
        let sealed = seal(&key, &plaintext(2 * CHUNK_SIZE)).expect("seal");
        // The last chunk cut off.
        let mut reader = OpeningReader::new(&sealed[..sealed.len() - SEALED_CHUNK], Some(&key));
        let mut back = Vec::new();
        let error = reader.read_to_end(&mut back).await.expect_err("truncated");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            matches!(
                encryption_error(&error),
                Some(EncryptionError::Truncated(_))
            ),
            "{error}"
        );
        assert!(back.len() <= 2 * CHUNK_SIZE);
    }
}
