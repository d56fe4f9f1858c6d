//! Whether a row read the memory: each of its reads against one direct
//! read of the same address made before the rows, and the reads that
//! differ against direct reads made after the last row, so that memory a
//! live target keeps changing is told from a read that returned the wrong
//! bytes.

use super::*;

/// How long the reads that differed are read again on a live target,
/// at most. A Linux guest left idle changes some pages and changes them
/// back seconds later (a list pointer that holds another value for
/// 8-330 ms every 4 s): a row that read such a page in its short state
/// is right, and only seen to be so once the page changes again.
const SETTLE_WINDOW: Duration = Duration::from_secs(5);

/// The pause between two rounds of reads: the short states last a few
/// milliseconds at the least.
const SETTLE_GAP: Duration = Duration::from_millis(1);

/// How a row's reads compare with the [`Reference`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Verdict {
    /// Reads compared (the changing ones not included).
    pub(super) checked: usize,
    /// Of those, reads whose bytes are not what the memory held: memory
    /// every direct read found the same, or could no longer read.
    pub(super) wrong: usize,
    /// Reads left out: the direct reads found their memory changing, and
    /// the row's bytes were none of the states they saw.
    pub(super) changing: usize,
}

impl Verdict {
    /// Counts what the direct reads made of one of the row's reads that
    /// differed.
    pub(super) fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Right => {}
            Outcome::Changing => {
                self.checked -= 1;
                self.changing += 1;
            }
            Outcome::Wrong => self.wrong += 1,
        }
    }
}

/// A read of a row that differed from the reference, until the direct
/// reads decide it.
pub(super) struct Differing {
    /// The row's index in [`Bench::rows`].
    pub(super) row: usize,
    pa: u64,
    /// The reference's bytes.
    before: Vec<u8>,
    /// The row's.
    got: Vec<u8>,
}

/// What the direct reads made of a [`Differing`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The memory held the row's bytes in one of them.
    Right,
    /// The memory held bytes neither the reference's nor the row's: it
    /// changes, and the row may have read a state no direct read saw.
    Changing,
    /// Every direct read that succeeded gave the reference's bytes: the
    /// memory is stable and the row did not return it.
    Wrong,
}

/// What each read of a workload must return: its physical address and
/// its bytes, read once straight through LeechCore before any row ran
/// (`None` where the translation or the read failed).
pub(super) struct Reference {
    len: usize,
    reads: Vec<Option<(u64, Vec<u8>)>>,
}

impl Reference {
    /// Reads `len` bytes (legal scatter entries) at each of `pas`.
    pub(super) fn read(device: &LeechCore, pas: &[Option<u64>], len: usize) -> Self {
        let found: Vec<u64> = pas.iter().flatten().copied().collect();
        let mut bytes = direct_reads(device, &found, len).into_iter();
        let reads = pas
            .iter()
            .map(|pa| pa.and_then(|pa| Some((pa, bytes.next().flatten()?))))
            .collect();
        Reference { len, reads }
    }

    /// Compares `got`, the reads of row `row` in order, with the
    /// reference: how many had a reference, and those that differ, for
    /// [`settle`].
    pub(super) fn compare<'a>(
        &self,
        got: impl Iterator<Item = &'a [u8]>,
        row: usize,
    ) -> (usize, Vec<Differing>) {
        let mut checked = 0;
        let mut differing = Vec::new();
        for (got, want) in got.zip(&self.reads) {
            if let Some((pa, want)) = want {
                checked += 1;
                if got != want.as_slice() {
                    differing.push(Differing {
                        row,
                        pa: *pa,
                        before: want.clone(),
                        got: got[..self.len.min(got.len())].to_vec(),
                    });
                }
            }
        }
        (checked, differing)
    }
}

/// Decides `differing` by reading their memory again through `device`:
/// on a live (volatile) target in rounds [`SETTLE_GAP`] apart until each
/// is decided, [`SETTLE_WINDOW`] at most or until a termination signal;
/// on an image once. The outcomes come in the order of `differing`.
pub(super) fn settle_on(device: &LeechCore, differing: &[Differing]) -> Vec<Outcome> {
    let deadline = Instant::now()
        + if device.info().volatile {
            SETTLE_WINDOW
        } else {
            Duration::ZERO
        };
    settle(
        differing,
        |round| {
            if round == 0 {
                return true;
            }
            std::thread::sleep(SETTLE_GAP);
            Instant::now() < deadline && signals::arrived().is_none()
        },
        |reads| direct_reads_sized(device, reads),
    )
}

/// Decides each of `differing` (see [`Outcome`]) by direct reads:
/// `reread` reads the (address, length) pairs of the reads not decided
/// yet, one call a round, while `another_round` (given the round's number
/// from 0) says so. A read is right as soon as the memory holds its
/// bytes; changing as soon as the memory holds bytes other than the
/// reference's (a live target rewrites some memory all the time, and may
/// change it back between any two reads); wrong if no round showed either.
fn settle(
    differing: &[Differing],
    mut another_round: impl FnMut(usize) -> bool,
    mut reread: impl FnMut(&[(u64, usize)]) -> Vec<Option<Vec<u8>>>,
) -> Vec<Outcome> {
    let mut outcomes = vec![Outcome::Wrong; differing.len()];
    let mut undecided: Vec<usize> = (0..differing.len()).collect();
    let mut round = 0;
    while !undecided.is_empty() && another_round(round) {
        round += 1;
        let reads: Vec<(u64, usize)> = undecided
            .iter()
            .map(|&i| (differing[i].pa, differing[i].before.len()))
            .collect();
        let mut now = reread(&reads).into_iter();
        undecided.retain(|&i| {
            let d = &differing[i];
            match now.next().flatten() {
                Some(now) if now == d.got => outcomes[i] = Outcome::Right,
                Some(now) if now != d.before => outcomes[i] = Outcome::Changing,
                // As before, or not read this time.
                _ => return true,
            }
            false
        });
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The verdict of `checked` reads of which `outcomes` differed.
    fn counted(checked: usize, outcomes: Vec<Outcome>) -> Verdict {
        let mut verdict = Verdict {
            checked,
            ..Verdict::default()
        };
        outcomes.into_iter().for_each(|o| verdict.count(o));
        verdict
    }

    /// Reads of 8 bytes at 0x1000 * n for each n of `pages`, the reference
    /// holding `[n; 8]`, compared with `got`.
    fn differing(pages: &[u64], got: &[u8]) -> (usize, Vec<Differing>) {
        let reference = Reference {
            len: 8,
            reads: pages
                .iter()
                .map(|&n| Some((n * 0x1000, vec![n as u8; 8])))
                .collect(),
        };
        let got: Vec<[u8; 8]> = got.iter().map(|&b| [b; 8]).collect();
        reference.compare(got.iter().map(|b| &b[..]), 7)
    }

    /// Settles `differing` in at most `rounds` rounds, with the direct
    /// reads each address gives in turn (`None`: the read failed; past
    /// the end: the last again). Returns the outcomes and the addresses
    /// each round read.
    fn settle_scripted(
        differing: &[Differing],
        rounds: usize,
        script: &[(u64, Vec<Option<u8>>)],
    ) -> (Vec<Outcome>, Vec<Vec<u64>>) {
        let script: HashMap<u64, &Vec<Option<u8>>> =
            script.iter().map(|(pa, reads)| (*pa, reads)).collect();
        let mut asked: Vec<Vec<u64>> = Vec::new();
        let outcomes = settle(
            differing,
            |round| round < rounds,
            |reads| {
                let round = asked.len();
                asked.push(reads.iter().map(|r| r.0).collect());
                reads
                    .iter()
                    .map(|&(pa, len)| {
                        let reads = script[&pa];
                        reads[round.min(reads.len() - 1)].map(|b| vec![b; len])
                    })
                    .collect()
            },
        );
        (outcomes, asked)
    }

    use Outcome::*;

    #[test]
    fn a_page_changed_back_is_judged_by_the_later_direct_reads_too() {
        // 1 before the rows, 2 in the row, then 1 again for three rounds
        // (the old rule read once more and called this wrong), then 2:
        // the row read a state the memory takes.
        let (_, reads) = differing(&[1], &[2]);
        let script = [(0x1000, vec![Some(1), Some(1), Some(1), Some(2)])];
        assert_eq!(settle_scripted(&reads, 1, &script).0, [Wrong]);
        let (outcomes, asked) = settle_scripted(&reads, 100, &script);
        assert_eq!(outcomes, [Right]);
        assert_eq!(asked.len(), 4, "decided in the fourth round: {asked:?}");
        // Flipping between 1 and 3 while the row read 2, a state no
        // direct read saw: changing, so not judged.
        let script = [(0x1000, vec![Some(1), Some(3), Some(1), Some(3)])];
        let (outcomes, asked) = settle_scripted(&reads, 100, &script);
        assert_eq!(outcomes, [Changing]);
        assert_eq!(asked.len(), 2);
    }

    #[test]
    fn a_counter_is_changing_after_one_round() {
        // The row read 2, the memory now holds 3, 4, ...: it counts.
        let (checked, reads) = differing(&[1, 5], &[2, 5]);
        assert_eq!(checked, 2);
        let script = [(0x1000, vec![Some(3), Some(4), Some(5)])];
        let (outcomes, asked) = settle_scripted(&reads, 100, &script);
        assert_eq!(outcomes, [Changing]);
        assert_eq!(asked, [vec![0x1000]], "only the differing read, once");
        assert_eq!(
            counted(checked, outcomes),
            Verdict {
                checked: 1,
                wrong: 0,
                changing: 1
            }
        );
    }

    #[test]
    fn wrong_bytes_on_stable_memory_are_wrong_after_every_round() {
        // 1 stable, read wrong (poison, as a row that wrote nothing leaves
        // it); 3 stable and right; 4 changing; 6 stable, read wrong.
        let (checked, reads) = differing(&[1, 3, 4, 6], &[0xa5, 3, 0x40, 0]);
        assert_eq!(checked, 4);
        assert_eq!(
            reads.iter().map(|d| (d.row, d.pa)).collect::<Vec<_>>(),
            [(7, 0x1000), (7, 0x4000), (7, 0x6000)]
        );
        let script = [
            (0x1000, vec![Some(1)]),
            (0x4000, vec![Some(4), Some(0x44)]),
            (0x6000, vec![Some(6)]),
        ];
        let (outcomes, asked) = settle_scripted(&reads, 5, &script);
        assert_eq!(outcomes, [Wrong, Changing, Wrong]);
        assert_eq!(
            asked,
            [
                vec![0x1000, 0x4000, 0x6000],
                vec![0x1000, 0x4000, 0x6000],
                vec![0x1000, 0x6000],
                vec![0x1000, 0x6000],
                vec![0x1000, 0x6000],
            ],
            "every round for the stable reads, none past the last"
        );
        assert_eq!(
            counted(checked, outcomes),
            Verdict {
                checked: 3,
                wrong: 2,
                changing: 1
            }
        );
    }

    #[test]
    fn a_failed_direct_read_shows_no_change() {
        let (_, reads) = differing(&[1, 2, 3], &[0xa5, 0xa5, 0xa5]);
        let script = [
            // Never read again: nothing shows that the row was right.
            (0x1000, vec![None]),
            // Failed, then stable: wrong.
            (0x2000, vec![None, Some(2)]),
            // Failed, then changed: changing.
            (0x3000, vec![None, None, Some(0x33)]),
        ];
        let (outcomes, _) = settle_scripted(&reads, 4, &script);
        assert_eq!(outcomes, [Wrong, Wrong, Changing]);
    }

    #[test]
    fn reads_with_no_reference_are_not_counted_and_equal_ones_not_read_again() {
        let reference = Reference {
            len: 8,
            reads: vec![Some((0x1000, vec![1; 8])), None],
        };
        let got = [[1u8; 8], [9; 8]];
        let (checked, reads) = reference.compare(got.iter().map(|b| &b[..]), 0);
        assert_eq!(checked, 1);
        assert!(reads.is_empty());
        let (outcomes, asked) = settle_scripted(&reads, 100, &[]);
        assert!(outcomes.is_empty() && asked.is_empty(), "{asked:?}");
    }
}
