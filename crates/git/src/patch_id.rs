//! Patch ids: one id per change, the same for a cherry-pick of it.
//!
//! This follows `git patch-id --stable` over the patch git would print: per file, the header
//! lines (`diff --git`, mode lines, `---`/`+++`) and every hunk line (context, `-`, `+`) with all
//! whitespace removed and the `@@` line numbers and `index` lines left out, hashed; the files'
//! digests are summed, so file order does not matter. Hunks use three lines of context and
//! are joined when at most six unchanged lines sit between two changes, as git's xdiff does,
//! and the line diff applies git's slider heuristic. The digest is SHA-256 rather than git's
//! SHA-1, so ids group commits as git does without being byte-identical to git's.
//! Not emulated: `\ No newline at end of file` markers (not hashed), rename detection (none,
//! as plumbing diffs), and attributes that force a file binary or text.

use gix::bstr::ByteSlice;
use gix::diff::blob::{Algorithm, Diff, InternedInput, sources::byte_lines};
use gix::object::tree::diff::ChangeDetached;
use sha2::Digest;

use super::{GitError, read_err};

const CONTEXT: u32 = 3;

/// The id of a commit's changes, or `None` when they amount to nothing hashable.
pub(super) fn of_changes(
    repo: &gix::Repository,
    changes: &[ChangeDetached],
) -> Result<Option<String>, GitError> {
    let mut sum = [0u8; 32];
    let mut any = false;
    for change in changes {
        // Submodule (commit) entries show as a one-line "Subproject commit" diff in git; they
        // are rare in fixes and hash by their ids here.
        let digest = file_digest(repo, change)?;
        add_into(&mut sum, &digest);
        any = true;
    }
    Ok(any.then(|| metabob_wire::text::hex(&sum)))
}

/// Adds `digest` into `sum` as little-endian numbers with carry, the way git's --stable sums
/// per-file digests: commutative, so the order files are listed in does not matter.
fn add_into(sum: &mut [u8; 32], digest: &[u8]) {
    let mut carry = 0u16;
    for (s, d) in sum.iter_mut().zip(digest) {
        carry += u16::from(*s) + u16::from(*d);
        *s = carry as u8;
        carry >>= 8;
    }
}

/// Feeds one patch line with its whitespace removed, as `remove_space` in git's patch-id.
fn feed(h: &mut sha2::Sha256, line: &[u8]) {
    let kept: Vec<u8> = line
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace() && *b != 0x0b)
        .collect();
    h.update(&kept);
}

fn blob(repo: &gix::Repository, id: &gix::oid) -> Result<Vec<u8>, GitError> {
    if id.is_null() {
        return Ok(Vec::new());
    }
    let obj = repo.find_object(id).map_err(read_err)?;
    Ok(obj.detach().data)
}

/// git's binary test: a NUL byte among the first 8000 bytes.
fn is_binary(data: &[u8]) -> bool {
    data.iter().take(8000).any(|b| *b == 0)
}

fn mode_str(mode: gix::object::tree::EntryMode) -> String {
    format!("{:06o}", mode.value())
}

fn file_digest(repo: &gix::Repository, change: &ChangeDetached) -> Result<Vec<u8>, GitError> {
    use gix::object::tree::diff::ChangeDetached as C;
    let path = change.location().to_str_lossy().into_owned();
    let (old_mode, old_id) = change.source_entry_mode_and_id();
    let (new_mode, new_id) = change.entry_mode_and_id();
    let (added, deleted) = match change {
        C::Addition { .. } => (true, false),
        C::Deletion { .. } => (false, true),
        _ => (false, false),
    };
    let mut h = sha2::Sha256::new();
    feed(&mut h, format!("diff --git a/{path} b/{path}").as_bytes());
    if added {
        feed(
            &mut h,
            format!("new file mode {}", mode_str(new_mode)).as_bytes(),
        );
    } else if deleted {
        feed(
            &mut h,
            format!("deleted file mode {}", mode_str(old_mode)).as_bytes(),
        );
    } else if old_mode != new_mode {
        feed(
            &mut h,
            format!("old mode {}", mode_str(old_mode)).as_bytes(),
        );
        feed(
            &mut h,
            format!("new mode {}", mode_str(new_mode)).as_bytes(),
        );
    }
    if old_mode.is_commit() || new_mode.is_commit() {
        feed(&mut h, format!("{old_id} {new_id}").as_bytes());
        return Ok(h.finalize().to_vec());
    }
    let old = if added {
        Vec::new()
    } else {
        blob(repo, old_id)?
    };
    let new = if deleted {
        Vec::new()
    } else {
        blob(repo, new_id)?
    };
    if old == new {
        // A mode-only change or an empty new/deleted file: git prints headers only.
        return Ok(h.finalize().to_vec());
    }
    if is_binary(&old) || is_binary(&new) {
        // git hashes the two blob ids of a binary change (from its index line).
        feed(&mut h, format!("{old_id}{new_id}").as_bytes());
        return Ok(h.finalize().to_vec());
    }
    let minus = if added {
        "--- /dev/null".to_string()
    } else {
        format!("--- a/{path}")
    };
    let plus = if deleted {
        "+++ /dev/null".to_string()
    } else {
        format!("+++ b/{path}")
    };
    feed(&mut h, minus.as_bytes());
    feed(&mut h, plus.as_bytes());
    hash_hunks(&mut h, &old, &new);
    Ok(h.finalize().to_vec())
}

/// Hashes the unified diff's lines of `old` → `new` the way git would print them.
fn hash_hunks(h: &mut sha2::Sha256, old: &[u8], new: &[u8]) {
    let input = InternedInput::new(byte_lines(old), byte_lines(new));
    let mut diff = Diff::compute(Algorithm::Myers, &input);
    // git's default diff shifts ambiguous hunks with its indent heuristic; so does this.
    diff.postprocess_lines(&input);
    let hunks: Vec<_> = diff.hunks().collect();
    if hunks.is_empty() {
        return;
    }
    let before_len = input.before.len() as u32;
    let line = |tok: gix::diff::blob::Token| -> &[u8] { input.interner[tok] };

    // Group changes into printed hunks: a gap of more than 2 * CONTEXT unchanged lines
    // starts a new one.
    let mut groups: Vec<Vec<&gix::diff::blob::Hunk>> = Vec::new();
    for hunk in &hunks {
        match groups.last_mut() {
            Some(group)
                if hunk.before.start - group.last().expect("groups are never empty").before.end
                    <= 2 * CONTEXT =>
            {
                group.push(hunk)
            }
            _ => groups.push(vec![hunk]),
        }
    }
    for group in groups {
        let first = group.first().expect("groups are never empty");
        let last = group.last().expect("groups are never empty");
        let mut pos = first.before.start.saturating_sub(CONTEXT);
        for hunk in &group {
            while pos < hunk.before.start {
                feed_line(h, b' ', line(input.before[pos as usize]));
                pos += 1;
            }
            for i in hunk.before.clone() {
                feed_line(h, b'-', line(input.before[i as usize]));
            }
            for i in hunk.after.clone() {
                feed_line(h, b'+', line(input.after[i as usize]));
            }
            pos = hunk.before.end;
        }
        let end = (last.before.end + CONTEXT).min(before_len);
        while pos < end {
            feed_line(h, b' ', line(input.before[pos as usize]));
            pos += 1;
        }
    }
}

fn feed_line(h: &mut sha2::Sha256, sign: u8, content: &[u8]) {
    let mut l = Vec::with_capacity(content.len() + 1);
    l.push(sign);
    l.extend_from_slice(content);
    feed(h, &l);
}
