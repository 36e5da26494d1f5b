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
//! contiguous pieces of their buffers (a view's runs) are also kept in two ordered maps, so that
//! each call costs O(r log n) for its r pieces instead of a pass over the group (NCCL groups of
//! thousands of sends and receives, a transpose into columns): written pieces, which are
//! disjoint (overlapping writes are refused), and read pieces, merged where they meet. The
//! operations gpuwire made disjoint by construction (a distributed array's faces) are not in
//! the maps: the program's operations are compared with them one by one.

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
/// range), and whether the operation writes it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Span {
    lo: usize,
    hi: usize,
    writes: bool,
}

/// The buffers an operation touches on this rank (`Op::touched`); none for an empty one.
pub(super) type Touch = [Option<Span>; 2];

#[inline]
pub(super) fn touch(op: &Op, rank: i32) -> Touch {
    let [a, b] = op.touched(rank);
    let one = |t: Option<(&Arc<Buffer>, bool)>| {
        let (x, writes) = t?;
        let (lo, hi) = x.range();
        (hi > lo).then_some(Span { lo, hi, writes })
    };
    [one(a), one(b)]
}

/// The ordered maps of a large group (module comment): piece start -> end.
#[derive(Default)]
struct Index {
    written: BTreeMap<usize, usize>,
    read: BTreeMap<usize, usize>,
    /// The entries gpuwire made (compared one by one).
    made: Vec<usize>,
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
        let touched = op.touched(c.rank());
        for (k, s) in mine.iter().enumerate() {
            let (Some(s), Some((b, _))) = (*s, touched[k]) else { continue };
            // The maps' pieces are disjoint and ordered: only the last one starting below a
            // piece's end can meet it. A piece that meets one (a merged piece stands for several
            // entries): compared with every entry (rare in a correct program).
            let meets = |m: &BTreeMap<usize, usize>, lo: usize, hi: usize| m.range(..hi).next_back().is_some_and(|(_, h)| *h > lo);
            let mut near = false;
            b.each_piece(|p| p.each_run(|lo, hi| near |= meets(&ix.written, lo, hi) || (s.writes && meets(&ix.read, lo, hi))));
            if near {
                scan_one(entries.iter().enumerate(), c, op, k, s)?;
                continue;
            }
            for &i in &ix.made {
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
            Some(ix) => ix.add(entries.len() - 1, &entries[entries.len() - 1]),
            None if entries.len() >= INDEXED => {
                let mut ix = Index::default();
                for (i, e) in entries.iter().enumerate() {
                    ix.add(i, e);
                }
                self.index = Some(ix);
            }
            None => {}
        }
    }
}

impl Index {
    fn add(&mut self, i: usize, e: &Entry) {
        if e.made {
            self.made.push(i);
            return;
        }
        for (b, writes) in e.op.touched(e.c.rank()).into_iter().flatten() {
            // Written pieces are disjoint (refused otherwise); merged anyway, as read ones.
            let m = if writes { &mut self.written } else { &mut self.read };
            b.each_piece(|p| {
                p.each_run(|lo, hi| {
                    if hi > lo {
                        merge(m, lo, hi)
                    }
                })
            });
        }
    }
}

/// Adds `lo..hi` to `m`, merged with the pieces it meets (a meeting piece then makes `check`
/// compare with every entry, which names the one it meets).
fn merge(m: &mut BTreeMap<usize, usize>, mut lo: usize, mut hi: usize) {
    while let Some((&l, &h)) = m.range(..hi).next_back().filter(|(_, h)| **h > lo) {
        m.remove(&l);
        (lo, hi) = (lo.min(l), hi.max(h));
    }
    m.insert(lo, hi);
}

/// `check` entry by entry (each with its index in the group).
#[inline]
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
