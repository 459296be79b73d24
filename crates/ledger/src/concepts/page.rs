//! A page's bound in bytes: rows are answered while their texts fit, and a row no reader
//! accepts is named instead of read.

use serde_json::{Value, json};

use metabob_wire::row::{PAGE_BYTES, SKIPPED_KEY, max_row_bytes};

/// A row's stored texts in bytes, as [`RowTexts`](metabob_wire::row::RowTexts) counts them.
pub(super) const ROW_BYTES_SQL: &str = "CAST(octet_length(c.content) + octet_length(c.summary) \
     + COALESCE(octet_length(c.pointer), 0) + COALESCE(octet_length(c.client_claim), 0) \
     + octet_length(c.shape) + octet_length(c.source_type) AS BIGINT)";

/// What a page does with its next row.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Take {
    Read,
    /// Over what every reader accepts (an older row): answered by id and size alone.
    Skip,
    /// The page's bytes are spent: the page ends before this row.
    Stop,
}

/// A page's running count of rows and bytes (anchor: page-cut).
pub(super) struct Page {
    bytes: i64,
    read: usize,
    /// Rows the page answers (read or skipped).
    pub(super) taken: usize,
    pub(super) cut_short: bool,
}

impl Page {
    pub(super) fn new() -> Page {
        Page {
            bytes: 0,
            read: 0,
            taken: 0,
            cut_short: false,
        }
    }

    /// Rows are taken in order while their texts fit [`PAGE_BYTES`]: always the first row a
    /// reader accepts, never one it does not (that one is answered as skipped).
    pub(super) fn take(&mut self, size: i64) -> Take {
        let max_row = i64::try_from(max_row_bytes()).unwrap_or(i64::MAX);
        let budget = i64::try_from(PAGE_BYTES).unwrap_or(i64::MAX);
        let take = if size > max_row {
            Take::Skip
        } else if self.bytes + size > budget && self.read > 0 {
            self.cut_short = true;
            return Take::Stop;
        } else {
            self.bytes += size;
            self.read += 1;
            Take::Read
        };
        self.taken += 1;
        take
    }
}

/// A loaded concept's stored texts in bytes, as [`ROW_BYTES_SQL`] counts them.
pub(super) fn row_bytes(c: &Value) -> usize {
    let text = |k: &str| c.get(k).and_then(Value::as_str).map_or(0, str::len);
    let json = |k: &str| {
        c.get(k)
            .filter(|v| !v.is_null())
            .map_or(0, |v| v.to_string().len())
    };
    ["content", "summary", "shape", "source_type"]
        .into_iter()
        .map(text)
        .sum::<usize>()
        + json("pointer")
        + json("client_claim")
}

/// What a page answers in place of a row no reader accepts.
pub(super) fn skipped_row(id: &str, bytes: i64) -> Value {
    json!({
        "id": id,
        SKIPPED_KEY: format!("row_too_large: {bytes} bytes, over the {} a reader reads", max_row_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(sizes: &[i64]) -> (Vec<Take>, Page) {
        let mut page = Page::new();
        let mut takes = Vec::new();
        for &size in sizes {
            let take = page.take(size);
            let stop = take == Take::Stop;
            takes.push(take);
            if stop {
                break;
            }
        }
        (takes, page)
    }

    #[test]
    fn a_page_stops_at_its_bytes_and_names_a_row_no_reader_accepts() {
        let max = i64::try_from(max_row_bytes()).expect("small");
        let budget = i64::try_from(PAGE_BYTES).expect("small");
        // Rows at the bound: as many as fit the page's bytes, then the page ends.
        let (takes, page) = cut(&[max; 40]);
        let fit = usize::try_from(budget / max).expect("small");
        assert_eq!(takes.len(), fit + 1);
        assert_eq!(takes.last(), Some(&Take::Stop));
        assert_eq!((page.taken, page.cut_short), (fit, true));
        // An oversized row is skipped wherever it stands, the first included.
        let (takes, page) = cut(&[max + 5, 10, max + 1, 5]);
        assert_eq!(takes, [Take::Skip, Take::Read, Take::Skip, Take::Read]);
        assert_eq!((page.taken, page.cut_short), (4, false));
    }
}
