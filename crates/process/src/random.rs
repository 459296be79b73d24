//! Randomness, drawn from the OS in one place: ids, session ids, temp names and ports. The
//! formats they are written in are vocabulary (`metabob_wire::{text, finding}`).

use metabob_wire::text::hex;

/// `n` random bytes as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf)
        .expect("the OS random source is available on every supported platform");
    hex(&buf)
}

/// A row id's 24 hex digits for a row written at `now_ms`: the time's low 48 bits, then 6 random
/// bytes. Ids minted in time order land at the end of their unique index, where random ones
/// wrote a leaf page of it chosen at random on every insert, one page more for every commit to
/// write (and, once the index outgrows the page cache, to read first).
pub fn time_ordered_hex(now_ms: i64) -> String {
    format!(
        "{:012x}{}",
        (now_ms as u64) & 0xffff_ffff_ffff,
        random_hex(6)
    )
}

/// A version-4 UUID, for session ids.
pub fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source is available on every supported platform");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub fn random_u16() -> u16 {
    let mut b = [0u8; 2];
    getrandom::fill(&mut b).expect("the OS random source is available on every supported platform");
    u16::from_le_bytes(b)
}

/// A new finding id (`agf_` and 16 hex digits, [`metabob_wire::finding::finding_id`]) from 8
/// random bytes.
pub fn new_finding_id() -> String {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("the OS random source is available on every supported platform");
    metabob_wire::finding::finding_id(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_ordered_ids_are_24_hex_digits_that_sort_by_their_time() {
        let (earlier, later) = (
            time_ordered_hex(1_765_000_000_000),
            time_ordered_hex(1_765_000_000_001),
        );
        for id in [&earlier, &later] {
            assert_eq!(id.len(), 24);
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
        }
        assert!(earlier < later, "{earlier} !< {later}");
        assert_eq!(&earlier[..12], "019af232b200");
        assert_ne!(
            time_ordered_hex(0)[12..],
            time_ordered_hex(0)[12..],
            "the tail is random"
        );
    }
}
