//! Whether an operation of an open group touches memory that an earlier operation of the group
//! touches, where either writes it: the group's operations run together (a receive would land
//! in a buffer another one still sends from, or two receives in the same bytes), so their memory
//! must be disjoint, as MPI's for requests outstanding at once (MPI leaves it erroneous, NCCL
//! undefined; gpuwire refuses it at the call, as gpuwire_sendrecv's overlapping buffers).
//! Sends reading the same buffer are fine.
//!
//! Each operation's buffers are byte ranges ([`Touch`]; a shaped view's is its bounding range,
//! compared element by element only where two ranges meet). A small group is scanned entry by
//! entry (a halo exchange's few operations: the cheapest). From [`INDEXED`] operations on, the
//! ranges of contiguous buffers are also kept in two ordered maps, so that each call costs
//! O(log n) instead of a pass over the group (NCCL groups of thousands of sends and receives):
//! written ranges, which are disjoint (overlapping writes are refused), and read ranges, merged
//! where they meet; views are compared one by one.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Entry;
use crate::buffer::Buffer;
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::op::Op;

/// From this many operations in a group on, the ordered maps.
const INDEXED: usize = 32;

/// One buffer an operation touches on this rank: its bytes `lo..hi` (a shaped view's bounding
/// range), whether the operation writes it, and whether it is a shaped view.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    lo: usize,
    hi: usize,
    writes: bool,
    shaped: bool,
}

/// The buffers an operation touches on this rank (`Op::touched`); none for an empty one.
pub(super) type Touch = [Option<Span>; 2];

#[inline]
pub(super) fn touch(op: &Op, rank: i32) -> Touch {
    let [a, b] = op.touched(rank);
    let one = |t: Option<(&Arc<Buffer>, bool)>| {
        let (x, writes) = t?;
        let (lo, hi) = x.range();
        (hi > lo).then_some(Span { lo, hi, writes, shaped: x.shape().is_some() })
    };
    [one(a), one(b)]
}

/// The ordered maps of a large group (module comment): range start -> (end, an entry of it).
#[derive(Default)]
struct Index {
    written: BTreeMap<usize, (usize, usize)>,
    read: BTreeMap<usize, (usize, usize)>,
    /// The entries with a view (their spans are compared one by one).
    shaped: Vec<usize>,
}

/// What an open group's operations touch, beside their entries' [`Touch`].
#[derive(Default)]
pub(super) struct Memory {
    index: Option<Index>,
}

impl Memory {
    /// Refuses `op` (whose spans are `mine`) where it meets an earlier operation of `entries`;
    /// one gpuwire `made` (`group::submit_disjoint`) only where it meets one it did not make.
    #[inline]
    pub(super) fn check(&self, entries: &[Entry], c: &Communicator, op: &Op, mine: &Touch, made: bool) -> Result<()> {
        if made {
            return scan(entries.iter().enumerate().filter(|(_, e)| !e.made), c, op, mine);
        }
        let Some(ix) = &self.index else { return scan(entries.iter().enumerate(), c, op, mine) };
        for (k, s) in mine.iter().enumerate() {
            let Some(s) = *s else { continue };
            // The maps' ranges are disjoint and ordered: only the last one starting below the
            // span's end can meet it. A view, or a range that meets one (a merged range stands
            // for several entries): compared with every entry (rare in a correct program).
            let meets = |m: &BTreeMap<usize, (usize, usize)>| m.range(..s.hi).next_back().is_some_and(|(_, (hi, _))| *hi > s.lo);
            if s.shaped || meets(&ix.written) || (s.writes && meets(&ix.read)) {
                scan_one(entries.iter().enumerate(), c, op, k, s)?;
                continue;
            }
            for &i in &ix.shaped {
                for o in entries[i].touch.iter().flatten() {
                    if (s.writes | o.writes) & (s.lo < o.hi) & (o.lo < s.hi) {
                        overlapping(i, &entries[i], c, op, k)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `entries`' last entry was just added: kept in the maps (made at [`INDEXED`] entries).
    #[inline]
    pub(super) fn added(&mut self, entries: &[Entry]) {
        match &mut self.index {
            Some(ix) => ix.add(entries.len() - 1, &entries[entries.len() - 1].touch),
            None if entries.len() >= INDEXED => {
                let mut ix = Index::default();
                for (i, e) in entries.iter().enumerate() {
                    ix.add(i, &e.touch);
                }
                self.index = Some(ix);
            }
            None => {}
        }
    }
}

impl Index {
    fn add(&mut self, i: usize, touch: &Touch) {
        if touch.iter().flatten().any(|s| s.shaped) {
            self.shaped.push(i);
        }
        for s in touch.iter().flatten().filter(|s| !s.shaped) {
            if s.writes {
                // Disjoint from the written ranges (refused otherwise), but for operations gpuwire
                // made without the comparison (`submit_disjoint`): those are merged in too.
                merge(&mut self.written, s.lo, s.hi, i);
            } else {
                merge(&mut self.read, s.lo, s.hi, i);
            }
        }
    }
}

/// Adds `lo..hi` of entry `i` to `m`, merged with the ranges it meets (the merged range keeps
/// one entry: a meeting range then makes `check` compare with every entry).
fn merge(m: &mut BTreeMap<usize, (usize, usize)>, mut lo: usize, mut hi: usize, mut i: usize) {
    while let Some((&l, &(h, j))) = m.range(..hi).next_back().filter(|(_, (h, _))| *h > lo) {
        m.remove(&l);
        (lo, hi, i) = (lo.min(l), hi.max(h), i.min(j));
    }
    m.insert(lo, (hi, i));
}

/// `check` entry by entry (each with its index in the group).
fn scan<'a>(entries: impl Iterator<Item = (usize, &'a Entry)> + Clone, c: &Communicator, op: &Op, mine: &Touch) -> Result<()> {
    for (k, s) in mine.iter().enumerate() {
        if let Some(s) = *s {
            scan_one(entries.clone(), c, op, k, s)?;
        }
    }
    Ok(())
}

fn scan_one<'a>(entries: impl Iterator<Item = (usize, &'a Entry)>, c: &Communicator, op: &Op, k: usize, s: Span) -> Result<()> {
    for (i, e) in entries {
        for o in e.touch.iter().flatten() {
            if (s.writes | o.writes) & (s.lo < o.hi) & (o.lo < s.hi) {
                overlapping(i, e, c, op, k)?;
            }
        }
    }
    Ok(())
}

/// The range of `op`'s buffer `k` meets one of entry `i`'s: whether elements of a buffer one
/// of them writes do (views may interleave), and then the error.
#[cold]
#[inline(never)]
fn overlapping(i: usize, e: &Entry, c: &Communicator, op: &Op, k: usize) -> Result<()> {
    let Some((a, writes)) = op.touched(c.rank())[k] else { return Ok(()) };
    for (b, other_writes) in e.op.touched(e.c.rank()).into_iter().flatten() {
        if (writes || other_writes) && a.overlaps(b) {
            let how = |w: bool| if w { "writes" } else { "reads" };
            return Err(Error::InvalidArgument(format!(
                "{}: a buffer it {} overlaps one the group's operation {} ({}) {}: operations of one group run together, so their buffers must not overlap where one writes (use disjoint buffers, or another group)",
                op.name(),
                how(writes),
                i + 1,
                e.op.name(),
                how(other_writes)
            )));
        }
    }
    Ok(())
}
