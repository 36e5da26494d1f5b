//! Whether an operation of an open group touches memory that an earlier operation of the group
//! touches, where either writes it: the group's operations run together (a receive would land
//! in a buffer another one still sends from, or two receives in the same bytes), so their memory
//! must be disjoint, as MPI's for requests outstanding at once (MPI leaves it erroneous, NCCL
//! undefined; gpuwire refuses it at the call, as gpuwire_sendrecv's overlapping buffers).
//! Sends reading the same buffer are fine.
//!
//! Each operation's buffers are byte ranges ([`Touch`]; a shaped view's is its bounding range,
//! compared series of runs by series only where two ranges meet: `Buffer::overlaps`). A small
//! group is scanned entry by entry (a halo exchange's few operations: the cheapest). From
//! [`INDEXED`] operations on, their buffers' bytes are also kept in ordered sets (written bytes,
//! read bytes), so that each call costs O(log n) instead of a pass over the group (NCCL groups
//! of thousands of sends and receives, a transpose into columns): contiguous ranges in a map,
//! merged where they meet; a view's series of runs of one stride ([`Piece`]) as a rectangle of
//! the grid whose rows are that stride long ([`Grid`]: a column view is one rectangle, not one
//! range per row). The operations gpuwire made disjoint by construction (a distributed array's
//! faces) are not in the sets: the program's operations are compared with them one by one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::Entry;
use crate::buffer::{Buffer, Piece};
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::op::Op;

/// From this many operations in a group on, the ordered sets.
const INDEXED: usize = 32;

/// At most this many strides have a [`Grid`] of each kind; the runs of other strides are kept
/// as ranges (a lookup compares a series with every grid of another stride run by run).
const GRIDS: usize = 8;

/// Series of runs longer than this many bytes are kept as ranges, run by run, not in a [`Grid`]:
/// a lookup there walks the columns as far back as its widest rectangle is wide (a 2-D block's
/// rows would make every later lookup walk the whole row: quadratic; a review, 2026-12-06).
const GRID_RUN_MAX: usize = 64;

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

/// The ordered sets of a large group (module comment).
#[derive(Default)]
struct Index {
    written: Bytes,
    read: Bytes,
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
        match &self.index {
            None => scan(entries.iter().enumerate(), c, op, mine),
            Some(ix) => ix.check(entries, c, op, mine),
        }
    }

    /// `entries`' last entry was just added: kept in the sets (made at [`INDEXED`] entries).
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
    /// `Memory::check` in a large group (a function of its own: a small group's check stays small).
    #[inline(never)]
    fn check(&self, entries: &[Entry], c: &Communicator, op: &Op, mine: &Touch) -> Result<()> {
        let touched = op.touched(c.rank());
        for (k, s) in mine.iter().enumerate() {
            let (Some(s), Some((b, _))) = (*s, touched[k]) else { continue };
            // A buffer that meets the sets' bytes (which stand for several entries): compared
            // with every entry (rare in a correct program).
            let meets = |p: &Piece| self.written.meets(p) || (s.writes && self.read.meets(p));
            let mut near = false;
            match b.shape() {
                None => near = meets(&Piece::range(s.lo, s.hi)),
                Some(_) => b.each_piece(|p| near = near || meets(&p)),
            }
            if near {
                scan_one(entries.iter().enumerate(), c, op, k, s)?;
                continue;
            }
            for &i in &self.made {
                for o in entries[i].touch.iter().flatten() {
                    if (s.writes | o.writes) & (s.lo < o.hi) & (o.lo < s.hi) {
                        overlapping(i, &entries[i], c, op, k)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn add(&mut self, i: usize, e: &Entry) {
        if e.made {
            self.made.push(i);
            return;
        }
        for (b, writes) in e.op.touched(e.c.rank()).into_iter().flatten() {
            // Written bytes are disjoint (refused otherwise); merged anyway, as read ones.
            let m = if writes { &mut self.written } else { &mut self.read };
            match b.shape() {
                None if b.bytes() > 0 => m.add(&Piece::range(b.ptr(), b.ptr() + b.bytes())),
                None => {}
                Some(_) => b.each_piece(|p| m.add(&p)),
            }
        }
    }
}

/// The bytes of some of a large group's buffers (written or read): exactly the union of the
/// pieces added.
#[derive(Default)]
struct Bytes {
    /// Contiguous pieces, merged where they meet: start -> end.
    ranges: BTreeMap<usize, usize>,
    /// Series of runs, by stride (at most [`GRIDS`]).
    grids: Vec<Grid>,
}

impl Bytes {
    #[inline]
    fn add(&mut self, p: &Piece) {
        if p.count == 1 {
            return merge(&mut self.ranges, p.lo, p.lo + p.len);
        }
        self.add_series(p)
    }

    #[inline(never)]
    fn add_series(&mut self, p: &Piece) {
        if p.len <= GRID_RUN_MAX {
            if let Some(g) = self.grids.iter_mut().find(|g| g.stride == p.stride) {
                return g.add(p);
            }
            if self.grids.len() < GRIDS {
                let mut g = Grid { stride: p.stride, levels: Vec::new(), span: BTreeMap::new() };
                g.add(p);
                return self.grids.push(g);
            }
        }
        p.each_run(|lo, hi| merge(&mut self.ranges, lo, hi));
    }

    /// Whether `p` shares a byte with them.
    #[inline]
    fn meets(&self, p: &Piece) -> bool {
        if p.count == 1 {
            let (lo, hi) = (p.lo, p.lo + p.len);
            return meets(&self.ranges, lo, hi) || (!self.grids.is_empty() && self.grids.iter().any(|g| g.meets_range(lo, hi)));
        }
        self.meets_series(p)
    }

    #[inline(never)]
    fn meets_series(&self, p: &Piece) -> bool {
        let (lo, hi) = (p.lo, p.hi());
        // The ranges within the series' span, each in O(1); run by run past as many as it has
        // runs (ranges in its gaps: not in a correct program's usual groups).
        let mut seen = 0;
        let before = self.ranges.range(..lo).next_back().filter(|x| *x.1 > lo);
        for (&a, &b) in before.into_iter().chain(self.ranges.range(lo..hi)) {
            if p.meets_range(a, b) {
                return true;
            }
            seen += 1;
            if seen > p.count {
                let mut m = false;
                p.each_run(|a, b| m = m || meets(&self.ranges, a, b));
                if m {
                    return true;
                }
                break;
            }
        }
        self.grids.iter().any(|g| {
            if g.stride == p.stride {
                return g.rects(p).into_iter().flatten().any(|r| g.holds(r));
            }
            let mut m = false;
            if meets(&g.span, lo, hi) {
                p.each_run(|a, b| m = m || g.meets_range(a, b));
            }
            m
        })
    }
}

/// A rectangle of a [`Grid`]: (first column, first row, end column, end row).
type Rect = (usize, usize, usize, usize);

/// Series of runs of one stride S (runs of at most [`GRID_RUN_MAX`] bytes), as rectangles of the
/// grid whose row r holds bytes r S..(r + 1) S: run i of a series from byte `lo` lies in row
/// lo / S + i, columns lo % S up to lo % S + len (those past S continue in the next row from
/// column 0: a second rectangle). Two series of stride S share a byte iff their rectangles meet.
/// The rectangles are kept by height, in [`Level`]s of heights up to a power of two, so that a
/// tall one does not make the lookups of short ones walk far up their columns.
struct Grid {
    stride: usize,
    levels: Vec<Level>,
    /// The series' spans (first byte to one past the last), merged: start -> end.
    span: BTreeMap<usize, usize>,
}

/// The rectangles of a [`Grid`] whose heights are in (2^(class - 1), 2^class].
struct Level {
    class: u32,
    /// Ordered by first column, then first row; a series read twice is kept once.
    rects: BTreeSet<Rect>,
    /// The widest rectangle's columns and the tallest's rows (how far back a lookup starts).
    wide: usize,
    tall: usize,
}

impl Grid {
    fn add(&mut self, p: &Piece) {
        for r in self.rects(p).into_iter().flatten() {
            let h = r.3 - r.1;
            let class = usize::BITS - h.saturating_sub(1).leading_zeros();
            let i = match self.levels.iter().position(|l| l.class == class) {
                Some(i) => i,
                None => {
                    self.levels.push(Level { class, rects: BTreeSet::new(), wide: 1, tall: 1 });
                    self.levels.len() - 1
                }
            };
            let l = &mut self.levels[i];
            l.wide = l.wide.max(r.2 - r.0);
            l.tall = l.tall.max(h);
            l.rects.insert(r);
        }
        merge(&mut self.span, p.lo, p.hi());
    }

    /// The rectangles of a series of this grid's stride (len < stride).
    fn rects(&self, p: &Piece) -> [Option<Rect>; 2] {
        let s = self.stride;
        let (row, col) = (p.lo / s, p.lo % s);
        if col + p.len <= s {
            return [Some((col, row, col + p.len, row + p.count)), None];
        }
        [Some((col, row, s, row + p.count)), Some((0, row + 1, col + p.len - s, row + p.count + 1))]
    }

    /// Whether bytes `lo..hi` meet a series: the range's rectangles (its first row's part, the
    /// whole rows, its last row's part).
    fn meets_range(&self, lo: usize, hi: usize) -> bool {
        if !meets(&self.span, lo, hi) {
            return false;
        }
        let s = self.stride;
        let (r0, c0, r1, c1) = (lo / s, lo % s, hi / s, hi % s);
        if r0 == r1 {
            return self.holds((c0, r0, c1, r0 + 1));
        }
        self.holds((c0, r0, s, r0 + 1)) || (r1 > r0 + 1 && self.holds((0, r0 + 1, s, r1))) || (c1 > 0 && self.holds((0, r1, c1, r1 + 1)))
    }

    /// Whether a rectangle meets `q`.
    fn holds(&self, q: Rect) -> bool {
        self.levels.iter().any(|l| l.holds(q))
    }
}

impl Level {
    /// Whether a rectangle of this level meets `q`: those starting in the columns from `wide`
    /// before q's first up to its end, and in each such column, in the rows from `tall` before
    /// q's first.
    fn holds(&self, q: Rect) -> bool {
        let (qc0, qr0, qc1, qr1) = q;
        let from_row = qr0.saturating_sub(self.tall - 1);
        let mut c = qc0.saturating_sub(self.wide - 1);
        while c < qc1 {
            let Some(&(col, ..)) = self.rects.range((c, from_row, 0, 0)..).next() else { return false };
            if col >= qc1 {
                return false;
            }
            if col > c {
                c = col;
                continue;
            }
            if self.rects.range((c, from_row, 0, 0)..(c, qr1, 0, 0)).any(|r| r.2 > qc0 && r.3 > qr0) {
                return true;
            }
            c += 1;
        }
        false
    }
}

/// Whether a range of `m` (disjoint, ordered: only the last one starting below `hi` can) meets
/// `lo..hi`.
#[inline]
fn meets(m: &BTreeMap<usize, usize>, lo: usize, hi: usize) -> bool {
    m.range(..hi).next_back().is_some_and(|(_, h)| *h > lo)
}

/// Adds `lo..hi` to `m`, merged with the ranges it meets.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::tests::{byte_set, Rng};

    /// `Bytes::meets` against the byte set of the pieces added: ranges, series of a few strides
    /// (one grid each, rectangles crossing rows among them) and of more strides than there are
    /// grids (kept run by run).
    #[test]
    fn bytes_meet_as_their_byte_set() {
        let mut rng = Rng(0x5eed);
        let (mut met, mut apart) = (0, 0);
        for t in 0..600 {
            let strides: &[usize] = match t % 3 {
                0 => &[64, 64, 64, 0],
                1 => &[40, 64, 24, 1],
                _ => &[0],
            };
            let mut bytes = Bytes::default();
            let mut set = BTreeSet::new();
            for _ in 0..1 + rng.below(48) {
                let p = rng.piece(3000, strides);
                bytes.add(&p);
                set.extend(byte_set(&p));
                for _ in 0..8 {
                    let q = rng.piece(3000, strides);
                    let want = !set.is_disjoint(&byte_set(&q));
                    assert_eq!(bytes.meets(&q), want, "{q:?} after {set:?}");
                    if want { met += 1 } else { apart += 1 }
                }
            }
        }
        assert!(met > 10_000 && apart > 10_000, "both answers are tested: {met} {apart}");
    }

    /// As above, with runs longer than [`GRID_RUN_MAX`] (kept as ranges) beside short ones (in
    /// grids), and series from 2 to 48 runs tall (several levels of one grid).
    #[test]
    fn long_runs_and_tall_series_meet_as_their_byte_set() {
        let mut rng = Rng(0x7a11);
        let (mut met, mut apart) = (0, 0);
        let mut piece = |rng: &mut Rng| {
            let stride = [128, 160, 256][rng.below(3)];
            let len = 1 + rng.below(120);
            let count = 1 + rng.below(48);
            Piece::new(rng.below(60_000 - (count - 1) * stride - len), len, stride, count)
        };
        for _ in 0..150 {
            let mut bytes = Bytes::default();
            let mut set = BTreeSet::new();
            for _ in 0..1 + rng.below(30) {
                let p = piece(&mut rng);
                bytes.add(&p);
                set.extend(byte_set(&p));
                for _ in 0..8 {
                    let q = piece(&mut rng);
                    let want = !set.is_disjoint(&byte_set(&q));
                    assert_eq!(bytes.meets(&q), want, "{q:?}");
                    if want { met += 1 } else { apart += 1 }
                }
            }
        }
        assert!(met > 3_000 && apart > 3_000, "both answers are tested: {met} {apart}");
    }
}
