//! The memo of configurations already explored by the search.
//!
//! A configuration is the set of operations linearized so far plus the
//! register state. The set is split into the operations with a known outcome
//! (`known`, a bitset) and the indeterminate ones, which are recorded only as
//! counts per class of interchangeable operations (`open`; see
//! [`crate::search`]).
//!
//! A configuration is skipped if an explored one has the same `known` set and
//! state and, in every class, at most as many linearized indeterminate
//! operations: those never have to be linearized and never constrain the
//! order of others, so every way to finish from the skipped configuration
//! also finishes from the explored one. (With no indeterminate operations
//! this is plain memoisation.)
//!
//! Storage is flat: groups `[hash, state, first entry, known words...]` in
//! one arena, indexed by an open-addressing table on (`known`, state); each
//! group heads a linked list of entries `[next, counts...]` in another.

/// Mixes a 64-bit integer into a well-distributed hash (SplitMix64 finaliser).
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The memo would grow past its byte limit.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MemoFull;

/// The set of explored configurations.
pub(crate) struct Memo {
    known_words: usize,
    classes: usize,
    /// Groups of `GROUP_HEADER + known_words` words.
    groups: Vec<u64>,
    group_count: usize,
    /// Empty (0) or `(hash & HIGH) | (group number + 1)`.
    slots: Vec<u64>,
    /// Entries of `1 + classes` numbers: next entry (or `NONE`), counts.
    entries: Vec<u32>,
    max_bytes: usize,
}

const EMPTY: u64 = 0;
const NONE: u32 = u32::MAX;
const HIGH: u64 = 0xFFFF_FFFF_0000_0000;
const GROUP_HEADER: usize = 3;
const INITIAL_SLOTS: usize = 64;

impl Memo {
    /// An empty memo for `known` sets of `known_words` words and `classes`
    /// counts, using at most about `max_bytes` bytes.
    pub(crate) fn new(known_words: usize, classes: usize, max_bytes: usize) -> Self {
        Memo {
            known_words,
            classes,
            groups: Vec::new(),
            group_count: 0,
            slots: vec![EMPTY; INITIAL_SLOTS],
            entries: Vec::new(),
            max_bytes,
        }
    }

    /// Approximate bytes in use.
    pub(crate) fn bytes(&self) -> usize {
        (self.groups.capacity() + self.slots.len()) * 8 + self.entries.capacity() * 4
    }

    fn group_words(&self) -> usize {
        GROUP_HEADER + self.known_words
    }

    fn entry_len(&self) -> usize {
        1 + self.classes
    }

    /// Records the configuration (`known`, `state`, `open`), where `hash`
    /// depends only on `known` and `state`. Returns `false` if an explored
    /// configuration covers it (see the module documentation).
    pub(crate) fn visit(
        &mut self,
        known: &[u64],
        state: u32,
        hash: u64,
        open: &[u32],
    ) -> Result<bool, MemoFull> {
        debug_assert_eq!(known.len(), self.known_words);
        debug_assert_eq!(open.len(), self.classes);
        let mask = self.slots.len() - 1;
        let tag = hash & HIGH;
        let mut slot = (hash as usize) & mask;
        loop {
            let found = self.slots[slot];
            if found == EMPTY {
                break;
            }
            if found & HIGH == tag {
                let start = ((found & !HIGH) as usize - 1) * self.group_words();
                let group = &self.groups[start..start + self.group_words()];
                if group[0] == hash
                    && group[1] == u64::from(state)
                    && &group[GROUP_HEADER..] == known
                {
                    let head = group[2] as u32;
                    if self.covered(head, open) {
                        return Ok(false);
                    }
                    let entry = self.push_entry(head, open)?;
                    self.groups[start + 2] = u64::from(entry);
                    return Ok(true);
                }
            }
            slot = (slot + 1) & mask;
        }
        self.new_group(slot, known, state, hash, open)?;
        Ok(true)
    }

    /// Whether some entry in the list starting at `entry` has, in every
    /// class, at most the counts of `open`.
    fn covered(&self, mut entry: u32, open: &[u32]) -> bool {
        let width = self.entry_len();
        while entry != NONE {
            let start = entry as usize * width;
            let numbers = &self.entries[start..start + width];
            if numbers[1..].iter().zip(open).all(|(seen, now)| seen <= now) {
                return true;
            }
            entry = numbers[0];
        }
        false
    }

    /// Bytes still allowed.
    fn spare_bytes(&self) -> usize {
        self.max_bytes.saturating_sub(self.bytes())
    }

    /// Makes room for `needed` items of `size` bytes in `vec` within
    /// `spare` more bytes, growing geometrically while the budget allows.
    fn reserve<T>(
        vec: &mut Vec<T>,
        needed: usize,
        size: usize,
        spare: usize,
    ) -> Result<(), MemoFull> {
        if needed <= vec.capacity() {
            return Ok(());
        }
        let room = vec.capacity() + spare / size;
        if needed > room {
            return Err(MemoFull);
        }
        let target = (vec.capacity() * 2).max(needed).max(256).min(room);
        vec.reserve_exact(target - vec.len());
        Ok(())
    }

    fn push_entry(&mut self, next: u32, open: &[u32]) -> Result<u32, MemoFull> {
        let width = self.entry_len();
        let number = u32::try_from(self.entries.len() / width)
            .ok()
            .filter(|&n| n != NONE)
            .ok_or(MemoFull)?;
        let needed = self.entries.len() + width;
        let spare = self.spare_bytes();
        Self::reserve(&mut self.entries, needed, 4, spare)?;
        self.entries.push(next);
        self.entries.extend_from_slice(open);
        Ok(number)
    }

    fn new_group(
        &mut self,
        slot: usize,
        known: &[u64],
        state: u32,
        hash: u64,
        open: &[u32],
    ) -> Result<(), MemoFull> {
        let number = u32::try_from(self.group_count + 1).map_err(|_| MemoFull)?;
        let slots_after = if (self.group_count + 1) * 2 > self.slots.len() {
            self.slots.len() * 2
        } else {
            self.slots.len()
        };
        let grown_slots = (slots_after - self.slots.len()) * 8;
        if grown_slots > self.spare_bytes() {
            return Err(MemoFull);
        }
        let entry = self.push_entry(NONE, open)?;
        let needed = self.groups.len() + self.group_words();
        let spare = self.spare_bytes().saturating_sub(grown_slots);
        Self::reserve(&mut self.groups, needed, 8, spare)?;
        self.groups
            .extend_from_slice(&[hash, u64::from(state), u64::from(entry)]);
        self.groups.extend_from_slice(known);
        self.group_count += 1;
        self.slots[slot] = (hash & HIGH) | u64::from(number);
        if grown_slots > 0 {
            self.grow(slots_after);
        }
        Ok(())
    }

    fn grow(&mut self, new_len: usize) {
        let mut slots = vec![EMPTY; new_len];
        let mask = new_len - 1;
        for group in 0..self.group_count {
            let hash = self.groups[group * self.group_words()];
            let mut slot = (hash as usize) & mask;
            while slots[slot] != EMPTY {
                slot = (slot + 1) & mask;
            }
            slots[slot] = (hash & HIGH) | (group as u64 + 1);
        }
        self.slots = slots;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn without_open_counts_it_is_a_set() {
        let mut memo = Memo::new(2, 0, usize::MAX);
        let mut reference = HashSet::new();
        for i in 0..20_000u64 {
            let known = [mix(i % 3000), i % 7];
            let state = (i % 5) as u32;
            // A deliberately weak hash, to exercise collisions.
            let hash = ((known[0] % 64) << 32) | ((mix(known[0]) & 0xFFFF_FFFF) ^ u64::from(state));
            let new = memo.visit(&known, state, hash, &[]).unwrap();
            assert_eq!(new, reference.insert((known, state)), "at {i}");
        }
    }

    #[test]
    fn larger_counts_are_covered_by_smaller_ones() {
        let mut memo = Memo::new(1, 2, usize::MAX);
        let hash = mix(1);
        assert!(memo.visit(&[1], 0, hash, &[1, 2]).unwrap());
        assert!(!memo.visit(&[1], 0, hash, &[1, 2]).unwrap());
        assert!(!memo.visit(&[1], 0, hash, &[3, 2]).unwrap());
        // Incomparable and smaller counts are not covered.
        assert!(memo.visit(&[1], 0, hash, &[0, 3]).unwrap());
        assert!(memo.visit(&[1], 0, hash, &[1, 1]).unwrap());
        assert!(!memo.visit(&[1], 0, hash, &[0, 4]).unwrap());
        // Another state or known set is another group.
        assert!(memo.visit(&[1], 1, hash, &[5, 5]).unwrap());
        assert!(memo.visit(&[2], 0, mix(2), &[5, 5]).unwrap());
    }

    #[test]
    fn refuses_to_grow_past_its_limit() {
        let mut memo = Memo::new(1, 1, 64 * 1024);
        let mut result = Ok(true);
        for i in 0..100_000u64 {
            result = memo.visit(&[i], 0, mix(i), &[i as u32]);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(MemoFull));
        assert!(memo.bytes() <= 64 * 1024, "{}", memo.bytes());
    }
}
