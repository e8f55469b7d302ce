//! The event lists the search walks: the known-outcome operations' calls
//! and returns in time order, and the indeterminate operations in classes of
//! identical steps, each with O(1) removal and LIFO re-insertion ("dancing
//! links").

use std::collections::{HashMap, HashSet};

use crate::model::{KeyOp, State, Step};

/// No node.
pub(crate) const NIL: u32 = u32::MAX;
/// Head of the list of known-outcome events, by time. Heads of the lists of
/// indeterminate operations follow, one list per class.
pub(crate) const KNOWN_HEAD: u32 = 0;

/// One event.
#[derive(Clone, Copy)]
pub(crate) struct Node {
    prev: u32,
    pub(crate) next: u32,
    /// The operation.
    pub(crate) op: u32,
    /// A call (or else a return).
    pub(crate) is_call: bool,
    /// When it happened.
    pub(crate) time: u64,
}

/// The event lists, with O(1) removal and LIFO re-insertion ("dancing
/// links").
///
/// Indeterminate operations with the same step (as simplified by
/// [`crate::search`]) are interchangeable: each such class has its own list,
/// latest call first, and only the first member invoked early enough is
/// tried. Using the latest one keeps the earlier ones, which are allowed
/// wherever it is, for later.
pub(crate) struct Events {
    /// The heads (known-outcome list, then one per class), then the events.
    pub(crate) nodes: Vec<Node>,
    /// Number of classes of indeterminate operations (heads `1..=classes`).
    pub(crate) classes: u32,
    /// Per class: the step its operations share.
    pub(crate) class_step: Vec<Step>,
    /// Per operation: its class (`NIL` for known-outcome operations).
    pub(crate) class_of: Vec<u32>,
    /// Per operation: its call node, and its return node (`NIL` if none).
    call_node: Vec<u32>,
    return_node: Vec<u32>,
}

impl Events {
    /// The lists for `ops`.
    pub(crate) fn new(ops: &[KeyOp]) -> Self {
        // Sort key: time, then calls before returns (so that touching
        // intervals count as concurrent), then operation.
        let mut known: Vec<(u64, bool, u32)> = Vec::new();
        let mut classes: HashMap<Step, Vec<(u64, bool, u32)>> = HashMap::new();
        for (i, op) in (0u32..).zip(ops) {
            match op.returned_at {
                Some(at) => {
                    known.push((op.invoked_at, false, i));
                    known.push((at, true, i));
                }
                None => classes
                    .entry(op.step)
                    .or_default()
                    .push((op.invoked_at, false, i)),
            }
        }
        known.sort_unstable();
        let mut classes: Vec<Vec<(u64, bool, u32)>> = classes.into_values().collect();
        for class in &mut classes {
            class.sort_unstable_by(|a, b| b.cmp(a));
        }
        // Classes in order of their earliest call.
        classes.sort_unstable_by_key(|class| class.last().copied());
        let head = Node {
            prev: NIL,
            next: NIL,
            op: NIL,
            is_call: false,
            time: 0,
        };
        let mut events = Events {
            nodes: vec![head; classes.len() + 1],
            classes: classes.len() as u32,
            class_step: Vec::with_capacity(classes.len()),
            class_of: vec![NIL; ops.len()],
            call_node: vec![NIL; ops.len()],
            return_node: vec![NIL; ops.len()],
        };
        events.append(KNOWN_HEAD, &known);
        for (head, class) in (1u32..).zip(&classes) {
            events.append(head, class);
            for &(_, _, op) in class {
                events.class_of[op as usize] = head - 1;
            }
            if let Some(&(_, _, op)) = class.first() {
                events.class_step.push(ops[op as usize].step);
            }
        }
        events
    }

    /// Appends `list` after `head`, as a chain.
    fn append(&mut self, head: u32, list: &[(u64, bool, u32)]) {
        let mut last = head;
        for &(time, is_return, op) in list {
            let n = self.nodes.len() as u32;
            self.nodes.push(Node {
                prev: last,
                next: NIL,
                op,
                is_call: !is_return,
                time,
            });
            self.nodes[last as usize].next = n;
            if is_return {
                self.return_node[op as usize] = n;
            } else {
                self.call_node[op as usize] = n;
            }
            last = n;
        }
    }

    /// The first node after `head` (`NIL` if the list is empty).
    pub(crate) fn first(&self, head: u32) -> u32 {
        self.nodes[head as usize].next
    }

    /// The first remaining member of class `class` invoked by `barrier`.
    pub(crate) fn class_candidate(&self, class: u32, barrier: u64) -> Option<u32> {
        let mut n = self.first(class);
        while n != NIL {
            let node = self.nodes[n as usize];
            if node.time <= barrier {
                return Some(n);
            }
            n = node.next;
        }
        None
    }

    /// Whether moving from `state` to `next` can help an operation that may
    /// come next: a known-outcome candidate (called before the first
    /// remaining return) that observes `next`, or that is a swap known to
    /// have failed (or answered without saying) which cannot fail in
    /// `state`; or an indeterminate swap expecting `next`
    /// (`open_cas_expects`).
    pub(crate) fn needed(
        &self,
        ops: &[KeyOp],
        next: State,
        state: State,
        open_cas_expects: &HashSet<State>,
    ) -> bool {
        if open_cas_expects.contains(&next) {
            return true;
        }
        let mut n = self.first(KNOWN_HEAD);
        while n != NIL {
            let node = self.nodes[n as usize];
            if !node.is_call {
                return false;
            }
            let op = &ops[node.op as usize];
            let blocked_failure = op.is_answered_non_swap()
                && matches!(op.step, Step::Cas { expected, .. } if expected == state);
            if op.step.observes(next) || blocked_failure {
                return true;
            }
            n = node.next;
        }
        false
    }

    fn unlink(&mut self, n: u32) {
        let Node { prev, next, .. } = self.nodes[n as usize];
        self.nodes[prev as usize].next = next;
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
    }

    fn relink(&mut self, n: u32) {
        let Node { prev, next, .. } = self.nodes[n as usize];
        self.nodes[prev as usize].next = n;
        if next != NIL {
            self.nodes[next as usize].prev = n;
        }
    }

    /// Removes the events of `op`.
    pub(crate) fn lift(&mut self, op: u32) {
        self.unlink(self.call_node[op as usize]);
        let ret = self.return_node[op as usize];
        if ret != NIL {
            self.unlink(ret);
        }
    }

    /// Undoes the latest [`Events::lift`], which must have been of `op`.
    pub(crate) fn unlift(&mut self, op: u32) {
        let ret = self.return_node[op as usize];
        if ret != NIL {
            self.relink(ret);
        }
        self.relink(self.call_node[op as usize]);
    }
}
