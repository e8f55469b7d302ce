//! etcd's WAL format, as far as the tail commit needs it: the framing of
//! `walpb.Record`s, the protobuf fields of entries and `HardState`s, and
//! the chained CRC-32C.

pub(super) const METADATA_TYPE: u64 = 1;
pub(super) const ENTRY_TYPE: u64 = 2;
pub(super) const STATE_TYPE: u64 = 3;
pub(super) const CRC_TYPE: u64 = 4;
pub(super) const SNAPSHOT_TYPE: u64 = 5;

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct HardState {
    pub(super) term: u64,
    pub(super) vote: u64,
    pub(super) commit: u64,
}

impl HardState {
    pub(super) fn decode(data: &[u8]) -> Option<Self> {
        let mut state = Self::default();
        for (field, value) in Fields(data) {
            match (field, value?) {
                (1, Value::Varint(v)) => state.term = v,
                (2, Value::Varint(v)) => state.vote = v,
                (3, Value::Varint(v)) => state.commit = v,
                _ => {}
            }
        }
        Some(state)
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_field_varint(&mut out, 1, self.term);
        put_field_varint(&mut out, 2, self.vote);
        put_field_varint(&mut out, 3, self.commit);
        out
    }
}

/// The running state of a read through the WAL files.
#[derive(Debug, Default)]
pub(super) struct Scan {
    pub(super) crc: u32,
    pub(super) state: HardState,
    pub(super) last_entry: u64,
    pub(super) last_entry_term: u64,
    pub(super) last_snapshot: u64,
    /// Offset after the last valid record of the file read last.
    pub(super) end: usize,
    pub(super) torn: bool,
}

impl Scan {
    /// Reads one file; `Err((offset, reason))` where a record is torn or
    /// damaged (`self.end` is then the offset after the last good one).
    pub(super) fn file(&mut self, data: &[u8]) -> Result<(), (usize, String)> {
        let mut offset = 0;
        self.end = 0;
        loop {
            let Some(frame) = data.get(offset..offset + 8) else {
                return Ok(());
            };
            let mut length = [0u8; 8];
            length.copy_from_slice(frame);
            let length = u64::from_le_bytes(length);
            if length == 0 {
                // Preallocated space: the rest must be zeros.
                return match data[offset..].iter().any(|&b| b != 0) {
                    true => Err((offset, "bytes after the last record".to_string())),
                    false => Ok(()),
                };
            }
            let bytes = usize::try_from(length & !(0xff << 56)).unwrap_or(usize::MAX);
            let pad = if length >> 63 == 1 {
                ((length >> 56) & 0x7) as usize
            } else {
                0
            };
            let start = offset + 8;
            let Some(record) = start
                .checked_add(bytes)
                .and_then(|end| data.get(start..end))
            else {
                return Err((offset, "record beyond the end of the file".to_string()));
            };
            let Some((kind, crc, payload)) = decode_record(record) else {
                return Err((offset, "record does not decode".to_string()));
            };
            if kind == CRC_TYPE {
                if self.crc != 0 && crc != self.crc {
                    return Err((offset, "CRC record differs from the chain".to_string()));
                }
                self.crc = crc;
            } else {
                let chained = crc32c_append(self.crc, payload);
                if chained != crc {
                    return Err((offset, "CRC mismatch".to_string()));
                }
                self.crc = chained;
            }
            match kind {
                ENTRY_TYPE => {
                    let (term, index) = decode_entry(payload)
                        .ok_or_else(|| (offset, "entry does not decode".to_string()))?;
                    self.last_entry = index;
                    self.last_entry_term = term;
                }
                STATE_TYPE => {
                    self.state = HardState::decode(payload)
                        .ok_or_else(|| (offset, "state does not decode".to_string()))?;
                }
                SNAPSHOT_TYPE => {
                    // `walpb.Snapshot`: index (1), term (2).
                    let field = |wanted: u64| {
                        Fields(payload)
                            .find_map(|(field, value)| match (field, value) {
                                (f, Some(Value::Varint(v))) if f == wanted => Some(v),
                                _ => None,
                            })
                            .unwrap_or(0)
                    };
                    let index = field(1);
                    self.last_snapshot = index;
                    if index > self.last_entry {
                        self.last_entry = index;
                        self.last_entry_term = field(2);
                    }
                }
                METADATA_TYPE | CRC_TYPE => {}
                _ => return Err((offset, format!("unknown record type {kind}"))),
            }
            offset = start + bytes + pad;
            self.end = offset;
        }
    }
}

/// `walpb.Record`: (type, crc, data).
pub(super) fn decode_record(data: &[u8]) -> Option<(u64, u32, &[u8])> {
    let (mut kind, mut crc, mut payload) = (0, 0, &data[..0]);
    for (field, value) in Fields(data) {
        match (field, value?) {
            (1, Value::Varint(v)) => kind = v,
            (2, Value::Varint(v)) => crc = u32::try_from(v).ok()?,
            (3, Value::Bytes(b)) => payload = b,
            _ => {}
        }
    }
    Some((kind, crc, payload))
}

/// `raftpb.Entry`: (term, index).
pub(super) fn decode_entry(data: &[u8]) -> Option<(u64, u64)> {
    let (mut term, mut index) = (0, 0);
    for (field, value) in Fields(data) {
        match (field, value?) {
            (2, Value::Varint(v)) => term = v,
            (3, Value::Varint(v)) => index = v,
            _ => {}
        }
    }
    Some((term, index))
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// The fields of a protobuf message: `(number, None)` ends the iteration
/// on a malformed field.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = (u64, Option<Value<'a>>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let Some(key) = read_varint(&mut self.0) else {
            self.0 = &[];
            return Some((0, None));
        };
        let value = match key & 7 {
            0 => read_varint(&mut self.0).map(Value::Varint),
            2 => read_varint(&mut self.0)
                .and_then(|len| usize::try_from(len).ok())
                .and_then(|len| {
                    let bytes = self.0.get(..len)?;
                    self.0 = &self.0[len..];
                    Some(Value::Bytes(bytes))
                }),
            _ => None,
        };
        if value.is_none() {
            self.0 = &[];
        }
        Some((key >> 3, value))
    }
}

pub(super) fn read_varint(data: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in data.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *data = &data[i + 1..];
            return Some(value);
        }
    }
    None
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(super) fn put_field_varint(out: &mut Vec<u8>, field: u64, value: u64) {
    put_varint(out, field << 3);
    put_varint(out, value);
}

pub(super) fn put_field_bytes(out: &mut Vec<u8>, field: u64, value: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// CRC-32C (Castagnoli) table, reflected polynomial.
pub(super) const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// Go's `crc32.Update(crc, castagnoliTable, data)`.
pub(super) fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut crc = !crc;
    for &byte in data {
        crc = CRC32C_TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// One framed record: the little-endian length (with the padding marker),
/// the record `{type, crc, data}`, and the zeros padding it to 8 bytes.
pub(super) fn frame_record(kind: u64, crc: u32, data: Option<&[u8]>) -> Vec<u8> {
    let mut record = Vec::with_capacity(data.map_or(0, <[u8]>::len) + 16);
    put_field_varint(&mut record, 1, kind);
    put_field_varint(&mut record, 2, u64::from(crc));
    if let Some(data) = data {
        put_field_bytes(&mut record, 3, data);
    }
    let pad = (8 - record.len() % 8) % 8;
    let mut length = record.len() as u64;
    if pad != 0 {
        length |= (0x80 | pad as u64) << 56;
    }
    let mut frame = length.to_le_bytes().to_vec();
    frame.extend_from_slice(&record);
    frame.resize(frame.len() + pad, 0);
    frame
}
