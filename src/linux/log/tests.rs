//! Kernel logs read from made-up memory whose layouts (made-up BTF) are
//! no kernel's: a ring written as the kernel writes it (its text blocks
//! wrapping to the ring's start, old records given up to new ones), then
//! damaged as a live target or garbage would (a record overwritten while
//! read, one being written, sizes no kernel has); and the buffer before
//! 5.10, wrapping.

use super::legacy::Symbols;
use super::*;
use crate::linux::fake_memory::{FakeMemory as Fake, DIRECT};
use crate::linux::find::btf::builder::{BtfBuilder, KIND_STRUCT};
use crate::linux::find::btf::Btf;
use crate::linux::offsets::{LegacyLayout, RingLayout};

const MEMORY: usize = 1 << 14;
/// `prb`, which points at the ring made.
const PRB: u64 = DIRECT + 0x100;
const ID_MASK: u64 = (1 << 62) - 1;
const RESERVED: u64 = 0;
const FINALIZED: u64 = 2;
const REUSABLE: u64 = 3;

// Made-up layouts: `struct printk_ringbuffer` (its two rings inside),
// `prb_desc`, `printk_info`, `printk_log`.
const DESC_RING: u64 = 8;
const DATA_RING: u64 = 64;
const RING_SIZE: u32 = 128;
const STATE_VAR: u64 = 8;
const LPOS: u64 = 16;
const DESC_SIZE: u64 = 32;
const TEXT_LEN: u64 = 0;
const FACILITY: u64 = 2;
const LEVEL_BITS: u32 = 29;
const CALLER_ID: u64 = 4;
const SEQ: u64 = 8;
const TS_NSEC: u64 = 16;
const INFO_SIZE: u64 = 96;
const LOG_HEADER: u64 = 24;

/// Integer types of the made-up BTF: u8, u16, u32.
fn ints(b: &mut BtfBuilder) -> [u32; 3] {
    [("u8", 1), ("u16", 2), ("u32", 4)].map(|(name, size)| b.int(name, size))
}

/// The header members both forms share, at made-up places; `seq` only
/// in `printk_info`, `len` only in `printk_log`.
fn record_members(b: &mut BtfBuilder, ty: &str, size: u32, info: bool) {
    let [byte, half, word] = ints(b);
    let long = b.long();
    let mut members = vec![
        ("text_len", half, 8 * TEXT_LEN as u32, 0),
        ("facility", byte, 8 * FACILITY as u32, 0),
        ("flags", byte, 24, 5),
        ("level", byte, LEVEL_BITS, 3),
        ("caller_id", word, 8 * CALLER_ID as u32, 0),
        ("ts_nsec", long, 8 * TS_NSEC as u32, 0),
    ];
    match info {
        true => members.push(("seq", long, 8 * SEQ as u32, 0)),
        false => members.push(("len", half, 8 * SEQ as u32, 0)),
    }
    b.composite_bits(ty, size, &members);
}

/// The made-up ring's layout (made once: BTF is slow to build under Miri).
fn ring_layout() -> &'static RingLayout {
    static LAYOUT: std::sync::OnceLock<RingLayout> = std::sync::OnceLock::new();
    LAYOUT.get_or_init(make_ring_layout)
}

fn make_ring_layout() -> RingLayout {
    let mut b = BtfBuilder::new();
    let [_, _, word] = ints(&mut b);
    let long = b.long();
    let atomic = b.composite(KIND_STRUCT, "atomic64_t", 8, &[("counter", long, 0)]);
    let desc_ring = b.composite(
        KIND_STRUCT,
        "prb_desc_ring",
        48,
        &[
            ("count_bits", word, 0),
            ("descs", long, 8),
            ("infos", long, 16),
            ("head_id", atomic, 24),
            ("tail_id", atomic, 32),
        ],
    );
    let data_ring = b.composite(
        KIND_STRUCT,
        "prb_data_ring",
        32,
        &[
            ("size_bits", word, 0),
            ("data", long, 8),
            ("head_lpos", atomic, 16),
            ("tail_lpos", atomic, 24),
        ],
    );
    b.composite(
        KIND_STRUCT,
        "printk_ringbuffer",
        RING_SIZE,
        &[
            ("desc_ring", desc_ring, DESC_RING),
            ("text_data_ring", data_ring, DATA_RING),
        ],
    );
    let lpos = b.composite(
        KIND_STRUCT,
        "prb_data_blk_lpos",
        16,
        &[("begin", long, 0), ("next", long, 8)],
    );
    b.composite(
        KIND_STRUCT,
        "prb_desc",
        DESC_SIZE as u32,
        &[
            ("state_var", atomic, STATE_VAR),
            ("text_blk_lpos", lpos, LPOS),
        ],
    );
    record_members(&mut b, "printk_info", INFO_SIZE as u32, true);
    let btf = Btf::parse(&b.finish()).unwrap();
    match LogLayout::from_btf(&btf).unwrap() {
        LogLayout::Ring(layout) => *layout,
        other => panic!("{other:?}"),
    }
}

/// A ring in made-up memory, written as the kernel writes one.
struct Ring {
    at: u64,
    count: u64,
    size: u64,
    descs: u64,
    infos: u64,
    data: u64,
    head: u64,
    tail: u64,
    head_lpos: u64,
    tail_lpos: u64,
    /// Records with text, oldest first: id, and where their block ends.
    live: std::collections::VecDeque<(u64, u64)>,
    /// What a reader should show: by id.
    shown: std::collections::BTreeMap<u64, LogRecord>,
}

impl Ring {
    /// An empty ring of `2^count_bits` descriptors and `2^size_bits`
    /// bytes of text, set up as the kernel's initialiser does.
    fn new(fake: &mut Fake, count_bits: u32, size_bits: u32) -> Ring {
        let (count, size) = (1u64 << count_bits, 1u64 << size_bits);
        let at = fake.alloc(u64::from(RING_SIZE));
        let descs = fake.alloc(count * DESC_SIZE);
        let infos = fake.alloc(count * INFO_SIZE);
        let data = fake.alloc(size);
        // The first id, one before the first record's: its slot is the
        // last, reusable, with no text; the first record gets seq 0.
        let first = count.wrapping_add(1).wrapping_neg() & ID_MASK;
        fake.put(
            descs + (count - 1) * DESC_SIZE + STATE_VAR,
            REUSABLE << 62 | first,
        );
        fake.put(descs + (count - 1) * DESC_SIZE + LPOS, 1);
        fake.put(descs + (count - 1) * DESC_SIZE + LPOS + 8, 1);
        fake.put(infos + SEQ, count.wrapping_neg());
        let ring = Ring {
            at,
            count,
            size,
            descs,
            infos,
            data,
            head: first,
            tail: first,
            head_lpos: 0,
            tail_lpos: 0,
            live: Default::default(),
            shown: Default::default(),
        };
        ring.put_header(fake);
        fake.put(PRB, at);
        ring
    }

    fn put_header(&self, fake: &mut Fake) {
        fake.put_u32(self.at + DESC_RING, self.count.trailing_zeros());
        fake.put(self.at + DESC_RING + 8, self.descs);
        fake.put(self.at + DESC_RING + 16, self.infos);
        fake.put(self.at + DESC_RING + 24, self.head);
        fake.put(self.at + DESC_RING + 32, self.tail);
        fake.put_u32(self.at + DATA_RING, self.size.trailing_zeros());
        fake.put(self.at + DATA_RING + 8, self.data);
    }

    fn desc(&self, id: u64) -> u64 {
        self.descs + (id & (self.count - 1)) * DESC_SIZE
    }

    fn info(&self, id: u64) -> u64 {
        self.infos + (id & (self.count - 1)) * INFO_SIZE
    }

    /// Gives up the oldest record's text (its descriptor reusable).
    fn give_up_oldest(&mut self, fake: &mut Fake) {
        let (id, next) = self.live.pop_front().unwrap();
        fake.put(self.desc(id) + STATE_VAR, REUSABLE << 62 | id);
        self.tail_lpos = next;
        self.shown.remove(&id);
    }

    /// Logs `text`.
    fn log(&mut self, fake: &mut Fake, text: &str, level: u8, facility: u8) {
        let id = self.head.wrapping_add(1) & ID_MASK;
        // Its slot is the oldest's: that one goes.
        if id.wrapping_sub(self.count) & ID_MASK == self.tail {
            if self.live.front().is_some_and(|r| r.0 == self.tail) {
                self.give_up_oldest(fake);
            }
            self.tail = self.tail.wrapping_add(1) & ID_MASK;
        }
        let len = (8 + text.len() as u64).next_multiple_of(8);
        let begin = self.head_lpos;
        let mut next = begin + len;
        let wraps = begin / self.size != next / self.size;
        if wraps {
            next = (next / self.size) * self.size + len;
        }
        while next - self.tail_lpos > self.size {
            self.give_up_oldest(fake);
        }
        let block = self.data + if wraps { 0 } else { begin % self.size };
        fake.put(self.data + begin % self.size, id);
        fake.put(block, id);
        fake.put_bytes(block + 8, text.as_bytes());
        let index = id & (self.count - 1);
        let old_seq = u64::from_le_bytes(
            fake.bytes[(self.info(id) + SEQ - DIRECT) as usize..][..8]
                .try_into()
                .unwrap(),
        );
        let seq = match (old_seq, index) {
            (0, i) if i != 0 => i,
            (s, _) => s.wrapping_add(self.count),
        };
        let info = self.info(id);
        fake.put_bytes(info, &[0; INFO_SIZE as usize]);
        fake.put(info + SEQ, seq);
        fake.put(info + TS_NSEC, 1_000_000 * seq + 17);
        fake.put_bytes(info + TEXT_LEN, &(text.len() as u16).to_le_bytes());
        fake.put_bytes(info + FACILITY, &[facility, level << 5 | 0x04]);
        fake.put_u32(info + CALLER_ID, 0x8000_0001);
        fake.put(self.desc(id) + LPOS, begin);
        fake.put(self.desc(id) + LPOS + 8, next);
        fake.put(self.desc(id) + STATE_VAR, FINALIZED << 62 | id);
        self.head = id;
        self.head_lpos = next;
        self.live.push_back((id, next));
        self.shown.insert(
            id,
            LogRecord {
                seq,
                timestamp: 1_000_000 * seq + 17,
                level,
                facility,
                caller_id: Some(0x8000_0001),
                text: text.as_bytes().to_vec(),
            },
        );
        self.put_header(fake);
    }

    fn shown(&self) -> Vec<LogRecord> {
        self.shown.values().cloned().collect()
    }
}

/// The log of `ring` (with the static rings at `statics`), and the calls.
fn read_ring(fake: &Fake, statics: &[u64]) -> (KernelLog, u64) {
    fake.read(async |kmem| ring::read(kmem, ring_layout(), PRB, statics).await)
}

fn reasons(log: &KernelLog) -> Vec<String> {
    log.failed.iter().map(|f| f.reason.clone()).collect()
}

#[test]
fn records_in_seq_order_in_two_calls_or_three_for_a_ring_of_its_own() {
    let mut fake = Fake::new(MEMORY);
    let mut ring = Ring::new(&mut fake, 4, 10);
    ring.log(&mut fake, "Linux version 6.99", 5, 0);
    ring.log(&mut fake, "two\nlines", 6, 0);
    ring.log(&mut fake, "", 7, 0);
    ring.log(&mut fake, "from user space", 4, 1);
    let other = fake.alloc(u64::from(RING_SIZE));
    let (log, calls) = read_ring(&fake, &[other, ring.at]);
    assert_eq!(calls, 2);
    assert_eq!(reasons(&log), Vec::<String>::new());
    assert_eq!(log.records, ring.shown());
    let seqs: Vec<u64> = log.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    let r = &log.records[1];
    assert_eq!(
        (r.level, r.facility, r.caller()),
        (6, 0, Some(Caller::Cpu(1)))
    );
    assert_eq!(r.lines().collect::<Vec<_>>(), [&b"two"[..], b"lines"]);
    assert_eq!(r.time_stamp(), "[    0.001000]");
    // A ring that is neither static one: read where prb points.
    let (log, calls) = read_ring(&fake, &[other]);
    assert_eq!((log.records.len(), calls), (4, 3));
}

#[test]
fn text_that_wraps_to_the_rings_start_and_records_given_up_to_newer_ones() {
    let mut fake = Fake::new(MEMORY);
    // 8 descriptors, 256 bytes of text: both wrap many times.
    let mut ring = Ring::new(&mut fake, 3, 8);
    for i in 0..50 {
        let text = format!("record {i} {}", "x".repeat(i % 23));
        ring.log(&mut fake, &text, (i % 8) as u8, 0);
    }
    let (log, calls) = read_ring(&fake, &[ring.at]);
    assert_eq!(calls, 2);
    assert_eq!(reasons(&log), Vec::<String>::new());
    assert_eq!(log.records, ring.shown());
    assert_eq!(
        log.records.last().unwrap().text,
        format!("record 49 {}", "x".repeat(49 % 23)).as_bytes()
    );
    assert!(log.records.len() >= 3 && log.records[0].seq > 40);
    // A block that wrapped is among them: it starts at the ring's start.
    let wrapped = log.records.iter().any(|r| {
        let begin = u64::from_le_bytes(
            fake.bytes[(ring.desc(r.seq) + LPOS - DIRECT) as usize..][..8]
                .try_into()
                .unwrap(),
        );
        let next = u64::from_le_bytes(
            fake.bytes[(ring.desc(r.seq) + LPOS + 8 - DIRECT) as usize..][..8]
                .try_into()
                .unwrap(),
        );
        begin / 256 != next / 256
    });
    assert!(
        wrapped,
        "no record's text wrapped: the test does not show it"
    );
}

#[test]
fn records_overwritten_while_read_being_written_or_garbage_are_named_not_shown() {
    let mut fake = Fake::new(MEMORY);
    let mut ring = Ring::new(&mut fake, 4, 10);
    for i in 0..8 {
        ring.log(&mut fake, &format!("message {i}"), 6, 0);
    }
    let ids: Vec<u64> = ring.shown.keys().copied().collect();
    let mut want = ring.shown();
    // Record 1's descriptor taken by a newer record since the ring was
    // read (whose id wraps past the 62 bits of ids).
    let newer = (ids[1] + 16) & ID_MASK;
    fake.put(ring.desc(ids[1]) + STATE_VAR, FINALIZED << 62 | newer);
    // Record 3's text block holds another record's id.
    let begin = u64::from_le_bytes(
        fake.bytes[(ring.desc(ids[3]) + LPOS - DIRECT) as usize..][..8]
            .try_into()
            .unwrap(),
    );
    fake.put(ring.data + begin % 1024, ids[3] + 16);
    // Record 4's text longer than its block.
    fake.put_bytes(ring.info(ids[4]) + TEXT_LEN, &200u16.to_le_bytes());
    // Record 5's sequence number is another slot's.
    fake.put(ring.info(ids[5]) + SEQ, 1);
    // The newest is still being written.
    fake.put(ring.desc(ids[7]) + STATE_VAR, RESERVED << 62 | ids[7]);
    let (log, calls) = read_ring(&fake, &[ring.at]);
    assert_eq!(calls, 2);
    let seqs: Vec<u64> = log.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [0, 2, 6]);
    for seq in [7, 5, 4, 3, 1] {
        want.remove(seq);
    }
    assert_eq!(log.records, want);
    let why = reasons(&log);
    assert_eq!(why.len(), 5, "{why:#?}");
    let expect = [
        format!("log record {}: overwritten while read (its descriptor holds record {newer} now)", ids[1]),
        format!("log record {}: its text block belongs to record {}: overwritten while read, or garbage", ids[3], ids[3] + 16),
        format!("log record {}: its text of 200 bytes overruns its 16-byte block: garbage", ids[4]),
        format!("log record {}: its sequence number 1 does not belong at descriptor 5: garbage", ids[5]),
        format!("log record {}: being written (reserved): not shown", ids[7]),
    ];
    assert_eq!(why, expect);
    assert_eq!(log.failed[0].address, ring.desc(ids[1]));
}

#[test]
fn sizes_no_kernel_has_and_ends_too_far_apart_are_refused() {
    let mut fake = Fake::new(MEMORY);
    let mut ring = Ring::new(&mut fake, 3, 8);
    ring.log(&mut fake, "one", 6, 0);
    ring.log(&mut fake, "two", 6, 0);
    for (count_bits, size_bits) in [(40, 8), (3, 60), (3, 0), (20, 25)] {
        let mut bad = Fake::new(0);
        bad.bytes = fake.bytes.clone();
        bad.put_u32(ring.at + DESC_RING, count_bits);
        bad.put_u32(ring.at + DATA_RING, size_bits);
        let (log, calls) = read_ring(&bad, &[ring.at]);
        assert_eq!(
            (log.records.len(), calls),
            (0, 1),
            "{count_bits} {size_bits}"
        );
        assert_eq!(log.failed.len(), 1);
        let why = &log.failed[0].reason;
        assert!(
            why.contains("over the") || why.contains("more than the target's memory"),
            "{why}"
        );
    }
    // Descriptors at a user address.
    let mut bad = Fake::new(0);
    bad.bytes = fake.bytes.clone();
    bad.put(ring.at + DESC_RING + 8, 0x1000);
    let (log, _) = read_ring(&bad, &[ring.at]);
    assert_eq!(
        reasons(&log),
        ["the log's descriptors would be at 0x1000: not a kernel address"]
    );
    // A tail further from the head than the ring holds: the newest read.
    let mut bad = Fake::new(0);
    bad.bytes = fake.bytes.clone();
    bad.put(
        ring.at + DESC_RING + 32,
        ring.head.wrapping_sub(100) & ID_MASK,
    );
    let (log, calls) = read_ring(&bad, &[ring.at]);
    assert_eq!(calls, 2);
    assert_eq!(log.records, ring.shown());
    assert!(reasons(&log)[0].contains("further apart than its 8 descriptors"));
}

fn legacy_layout() -> LegacyLayout {
    let mut b = BtfBuilder::new();
    record_members(&mut b, "printk_log", LOG_HEADER as u32, false);
    let btf = Btf::parse(&b.finish()).unwrap();
    match LogLayout::from_btf(&btf).unwrap() {
        LogLayout::Legacy(layout) => layout,
        other => panic!("{other:?}"),
    }
}

/// A record of the old buffer at `buf + idx`: its header and text, `size`
/// bytes in all (0: the end marker).
fn put_legacy(fake: &mut Fake, at: u64, size: u16, text: &str, level: u8) {
    fake.put_bytes(at + SEQ, &size.to_le_bytes());
    if size == 0 {
        return;
    }
    fake.put_bytes(at + TEXT_LEN, &(text.len() as u16).to_le_bytes());
    fake.put_bytes(at + FACILITY, &[0, level << 5]);
    fake.put(at + TS_NSEC, 5_000_000_000 + u64::from(level));
    fake.put_bytes(at + LOG_HEADER, text.as_bytes());
}

#[test]
fn the_buffer_before_5_10_wraps_at_a_zero_length_and_is_cut_where_it_breaks() {
    let layout = legacy_layout();
    let mut fake = Fake::new(MEMORY);
    let buf = fake.alloc(256);
    // Two records at the end, the end marker, two at the start; the
    // oldest (first_idx) at 160.
    put_legacy(&mut fake, buf + 160, 40, "old one", 3);
    put_legacy(&mut fake, buf + 200, 32, "old 2", 4);
    put_legacy(&mut fake, buf + 232, 0, "", 0);
    put_legacy(&mut fake, buf, 48, "after the wrap", 5);
    put_legacy(&mut fake, buf + 48, 28, "last", 6);
    let vars = fake.alloc(64);
    let sym = Symbols::from([vars, vars + 8, vars + 16, vars + 24, vars + 32, vars + 40]);
    let set = |fake: &mut Fake, first: u64, next: u64, seqs: (u64, u64)| {
        fake.put(vars, buf);
        fake.put_u32(vars + 8, 256);
        fake.put_u32(vars + 16, first as u32);
        fake.put_u32(vars + 24, next as u32);
        fake.put(vars + 32, seqs.0);
        fake.put(vars + 40, seqs.1);
    };
    set(&mut fake, 160, 76, (10, 14));
    let (log, calls) = fake.read(async |kmem| legacy::read(kmem, &layout, &sym).await);
    assert_eq!(calls, 2);
    assert_eq!(reasons(&log), Vec::<String>::new());
    let got: Vec<(u64, &[u8], u8)> = log
        .records
        .iter()
        .map(|r| (r.seq, &r.text[..], r.level))
        .collect();
    assert_eq!(
        got,
        [
            (10, &b"old one"[..], 3),
            (11, b"old 2", 4),
            (12, b"after the wrap", 5),
            (13, b"last", 6)
        ]
    );
    assert_eq!(log.records[0].timestamp, 5_000_000_003);
    assert_eq!(log.records[0].caller_id, Some(0));
    // More records than the sequence numbers say: cut, and said.
    set(&mut fake, 160, 76, (10, 12));
    let (log, _) = fake.read(async |kmem| legacy::read(kmem, &layout, &sym).await);
    assert_eq!(log.records.len(), 2);
    assert!(reasons(&log)[0].contains("2 records read and the walk is not at log_next_idx"));
    // A length that runs past the buffer.
    set(&mut fake, 160, 76, (10, 14));
    put_legacy(&mut fake, buf + 48, 250, "last", 6);
    let (log, _) = fake.read(async |kmem| legacy::read(kmem, &layout, &sym).await);
    assert_eq!(log.records.len(), 3);
    assert!(reasons(&log)[0].contains("overruns the buffer"));
    // An end marker before log_next_idx (a loop back to the start).
    put_legacy(&mut fake, buf + 48, 0, "", 0);
    set(&mut fake, 160, 100, (10, 14));
    let (log, _) = fake.read(async |kmem| legacy::read(kmem, &layout, &sym).await);
    assert_eq!(log.records.len(), 3);
    assert!(reasons(&log)[0].contains("where none can end the buffer"));
    // A buffer length past the bound is not read.
    fake.put_u32(vars + 8, u32::MAX);
    let (log, calls) = fake.read(async |kmem| legacy::read(kmem, &layout, &sym).await);
    assert_eq!((log.records.len(), calls), (0, 1));
    assert!(reasons(&log)[0].contains("log_buf_len is 4294967295"));
}
