//! The substrate's gap store as a cell sees it (SPEC.md §path_activity): rows, the whole-store
//! read and its cache, path mapping, and what is in flight on one path. Rendering is the tools'.

pub mod cache;
pub mod paths;
pub mod row;

use std::collections::BTreeMap;

pub use cache::{GapCache, Snapshot, Status};
pub use paths::{Layout, Mapped};
pub use row::{Gap, Hold, Lease, Relation};

/// A lease counts as lapsed only this long past its end, so a fast local clock never frees a
/// landing early.
pub const LEASE_GRACE_MS: i64 = 2 * 60 * 1000;

/// Where one gap stands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum State<'a> {
    /// A live landing lease: the system is landing it now.
    Landing(&'a Lease),
    Held(&'a Hold),
    /// Queued for the system; a lease it still carries is lapsed or records no end.
    Queued(Option<&'a Lease>),
}

impl<'a> State<'a> {
    /// anchor: gap_state
    pub fn of(gap: &'a Gap, now_ms: i64) -> State<'a> {
        match &gap.lease {
            Some(l) if l.until_ms.is_some_and(|u| now_ms <= u + LEASE_GRACE_MS) => {
                State::Landing(l)
            }
            lease => match &gap.hold {
                Some(h) => State::Held(h),
                None => State::Queued(lease.as_ref()),
            },
        }
    }

    fn rank(&self) -> u8 {
        match self {
            State::Landing(_) => 0,
            State::Held(_) => 1,
            State::Queued(_) => 2,
        }
    }
}

/// What is in flight on one store path (anchor: path_report).
#[derive(Debug, Default)]
pub struct PathReport<'a> {
    pub open: usize,
    pub landing: usize,
    pub held: usize,
    pub queued: usize,
    /// Every gap being landed, then up to the limit more: held, then queued; each group by
    /// relation, newest first.
    pub listed: Vec<(&'a Gap, State<'a>, Relation)>,
    /// Related gaps past the limit.
    pub rest: usize,
    /// With no related gap: open gaps with no edit site that could still concern the path, by
    /// category.
    pub unplaced: BTreeMap<&'a str, usize>,
}

impl<'a> PathReport<'a> {
    pub fn build(gaps: &'a [Gap], store_path: &str, limit: usize, now_ms: i64) -> PathReport<'a> {
        let mut related: Vec<(&Gap, State, Relation)> = gaps
            .iter()
            .filter_map(|g| g.relation(store_path).map(|r| (g, State::of(g, now_ms), r)))
            .collect();
        related.sort_by(|a, b| {
            (a.1.rank(), a.2, -a.0.updated_ms).cmp(&(b.1.rank(), b.2, -b.0.updated_ms))
        });
        let mut r = PathReport {
            open: related.len(),
            ..PathReport::default()
        };
        for (_, state, _) in &related {
            match state {
                State::Landing(_) => r.landing += 1,
                State::Held(_) => r.held += 1,
                State::Queued(_) => r.queued += 1,
            }
        }
        let shown = r.landing + limit.min(related.len() - r.landing);
        r.rest = related.len() - shown;
        related.truncate(shown);
        r.listed = related;
        if r.open == 0 {
            r.unplaced = unplaced(gaps, store_path);
        }
        r
    }
}

/// Open gaps with no edit site that do not name `store_path` but could concern it: for a
/// `repos/<v>/…` path those whose remedy names `v` or no vessel; for any other path those that
/// name no vessel (anchor: unplaced_gaps).
fn unplaced<'a>(gaps: &'a [Gap], store_path: &str) -> BTreeMap<&'a str, usize> {
    let vessel = Layout::vessel_of(store_path);
    let mut by_category = BTreeMap::new();
    for g in gaps.iter().filter(|g| g.edit_site.is_none()) {
        let concerns = match (vessel, g.remedy_vessel.as_deref()) {
            (_, None) => true,
            (Some(v), Some(r)) => v.eq_ignore_ascii_case(r),
            (None, Some(_)) => false,
        };
        if concerns {
            *by_category.entry(g.category.as_str()).or_insert(0) += 1;
        }
    }
    by_category
}

/// Whether any gap names the vessel `name` (its edit site or its text under `repos/<name>/`): a
/// vessel no gap names may not be mounted by this substrate, and "no gaps" would mislead.
pub fn names_vessel(gaps: &[Gap], name: &str) -> bool {
    let prefix = format!("repos/{name}/");
    gaps.iter().any(|g| {
        g.edit_site
            .as_deref()
            .is_some_and(|s| s.starts_with(&prefix))
            || g.text.contains(&prefix)
    })
}

/// Per file: the open gaps whose edit site it is, how many are being landed and how many held.
pub fn on_file<'a>(gaps: &'a [Gap], store_path: &str, now_ms: i64) -> (Vec<&'a Gap>, usize, usize) {
    let here: Vec<&Gap> = gaps
        .iter()
        .filter(|g| g.edit_site.as_deref() == Some(store_path))
        .collect();
    let count = |f: fn(&State) -> bool| here.iter().filter(|g| f(&State::of(g, now_ms))).count();
    let landing = count(|s| matches!(s, State::Landing(_)));
    let held = count(|s| matches!(s, State::Held(_)));
    (here, landing, held)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(id: &str, site: Option<&str>, updated_ms: i64) -> Gap {
        Gap {
            id: id.into(),
            category: "bug".into(),
            route: "auto".into(),
            edit_site: site.map(str::to_string),
            text: String::new(),
            remedy_vessel: None,
            updated_ms,
            hold: None,
            lease: None,
        }
    }

    #[test]
    fn a_lease_lapses_two_minutes_past_its_end_and_one_with_no_end_is_not_a_landing() {
        let now = 10_000_000;
        let mut g = gap("g", Some("p"), 0);
        g.lease = Some(Lease {
            holder: "h".into(),
            attempt: Some(1),
            until_ms: Some(now - LEASE_GRACE_MS),
        });
        assert!(matches!(State::of(&g, now), State::Landing(_)));
        g.lease = Some(Lease {
            holder: "h".into(),
            attempt: None,
            until_ms: Some(now - LEASE_GRACE_MS - 1),
        });
        assert!(matches!(State::of(&g, now), State::Queued(Some(_))));
        g.lease = Some(Lease {
            holder: "h".into(),
            attempt: None,
            until_ms: None,
        });
        assert!(matches!(State::of(&g, now), State::Queued(Some(_))));
    }

    #[test]
    fn landings_are_always_listed_then_held_then_queued_newest_first() {
        let now = 1_000;
        let mut gaps = vec![
            gap("q-old", Some("p"), 1),
            gap("q-new", Some("p"), 5),
            gap("q-mention", None, 9),
            gap("h", Some("p"), 2),
            gap("l1", Some("p"), 3),
            gap("l2", Some("p"), 4),
            gap("other", Some("x"), 6),
        ];
        gaps[2].text = "touches p".into();
        gaps[3].hold = Some(Hold {
            reason: "r".into(),
            review_by: None,
            lift: None,
        });
        for i in [4, 5] {
            gaps[i].lease = Some(Lease {
                holder: "h".into(),
                attempt: None,
                until_ms: Some(now),
            });
        }
        let r = PathReport::build(&gaps, "p", 2, now);
        let ids: Vec<&str> = r.listed.iter().map(|(g, _, _)| g.id.as_str()).collect();
        assert_eq!(ids, ["l2", "l1", "h", "q-new"]);
        assert_eq!(
            (r.open, r.landing, r.held, r.queued, r.rest),
            (6, 2, 1, 3, 2)
        );
        assert!(r.unplaced.is_empty());
    }

    #[test]
    fn unplaced_gaps_are_counted_only_when_none_names_the_path() {
        let mut gaps = vec![gap("a", None, 0), gap("b", None, 0), gap("c", None, 0)];
        gaps[1].remedy_vessel = Some("app".into());
        gaps[2].remedy_vessel = Some("other".into());
        let r = PathReport::build(&gaps, "repos/app/a.py", 10, 0);
        assert_eq!(r.unplaced.get("bug"), Some(&2));
        let r = PathReport::build(&gaps, "docs/x.md", 10, 0);
        assert_eq!(r.unplaced.get("bug"), Some(&1));
        assert!(names_vessel(&[gap("s", Some("repos/app/x"), 0)], "app"));
        assert!(!names_vessel(&gaps, "app"));
    }
}
