//! Clone and fetch over every transport a cell meets: file://, git:// (daemon), ssh (the
//! `ssh` program) and http(s): gix's smart-HTTP protocol over a reqwest client that trusts
//! and proxies as the one HTTP path does (`http` below).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use gix::bstr::ByteSlice;
use gix::remote::Direction;

use super::{Cause, GitError, Repo};
use metabob_net::NetClient;
use metabob_process::guard::redact_url_credentials;
use metabob_wire::report::Hint;

/// This crate's own words for why a clone or fetch failed, where gix has none or says it in
/// a way that hides the cause; the cause of a [`GitError::Clone`] or [`GitError::Fetch`].
#[derive(Debug, thiserror::Error)]
enum Own {
    #[error(
        "destination {} is not empty; a clone needs an empty or missing directory",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error("cannot read {}", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {}", .path.display())]
    Uncreatable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the remote has no commits to check out")]
    NoCommits,
    #[error("checking out {tag} failed")]
    CheckOutTag {
        tag: String,
        #[source]
        source: Cause,
    },
    #[error("the clone succeeded but writing {name} failed")]
    RemoteHead {
        name: String,
        #[source]
        source: Cause,
    },
    #[error("no such remote")]
    NoSuchRemote(#[source] gix::remote::find::existing::Error),
    #[error("cannot set git's fallback identity")]
    Identity(#[source] Cause),
    #[error("the fetch stopped unexpectedly")]
    Panicked,
    #[error(transparent)]
    Login(#[from] Login),
}

/// A missing or refused login, said plainly: gix reports it as its credential helpers'
/// failure, in lines that never say the server asked for one, so gix's error is not kept
/// under it (its words would follow these on the line and contradict them).
#[derive(Debug, thiserror::Error)]
enum Login {
    #[error("the server refused the login in the URL (HTTP 401)")]
    UrlRefused,
    #[error("the server wants a login (HTTP 401) and none was given")]
    Missing,
    #[error("the server refused the login a git credential helper gave (HTTP 401)")]
    HelperRefused,
}

impl Hint for Login {
    fn hint(&self) -> Option<String> {
        match self {
            Login::UrlRefused => Some("check its user and password".into()),
            Login::Missing => Some(
                "put it in the URL, as in https://user:password@host/repo.git, or set up a git \
                 credential helper"
                    .into(),
            ),
            Login::HelperRefused => None,
        }
    }
}

/// The advice of the first cause in `e`'s chain that has its own (a login, a redirect), for
/// the clone's or fetch's hint to lead with.
pub(crate) fn hint_in(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(login) = e.downcast_ref::<Login>() {
            return login.hint();
        }
        if let Some(hint) = http::hint_of(e) {
            return Some(hint);
        }
        next = e.source();
    }
    None
}

/// gix builds its own https transport (and its rustls config, from the process-wide crypto
/// provider) when it connects, before `http::connect_through` replaces it; the crate carries
/// ring only (no aws-lc), so name it first. Installing twice is harmless: the second attempt
/// reports the existing provider and is ignored.
fn ensure_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// `git clone [--branch <name>] <url> <dest>`: the work tree checked out, `origin` set up
/// with the standard refspec, `refs/remotes/origin/*` and `origin/HEAD` written. `branch`
/// `None` checks out the remote's default branch. `progress` prints each stage on stderr
/// (the caller decides, by whether stderr is a terminal). `dest` must be empty or missing;
/// a failed clone removes what it created. Returns the repository and the checked-out sha.
///
/// An http(s) remote is reached with `net`'s trust and proxy choice, as every other request
/// of the process is. The call blocks: run it where blocking is allowed (a plain thread or
/// `spawn_blocking`), not on an async task.
///
/// `branch` is looked up the way `git clone --branch` looks it up: the remote's
/// `refs/heads/<name>`, else its `refs/tags/<name>` (checked out on a detached HEAD), else
/// `RefNotFound`. It is never read as a revision or a partial ref name: `@` is the branch
/// named `@`, not HEAD, and `refs/heads/x` is the branch `refs/heads/refs/heads/x`.
pub fn clone_at(
    url: &str,
    dest: &Path,
    branch: Option<&str>,
    progress: bool,
    net: &NetClient,
) -> Result<(Repo, String), GitError> {
    let fail = |own: Own| GitError::Clone {
        url: redact_url_credentials(url),
        source: Box::new(own),
        lasting: true,
    };
    match std::fs::read_dir(dest) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(fail(Own::NotEmpty(dest.to_path_buf())));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(fail(Own::Unreadable {
                path: dest.to_path_buf(),
                source,
            }));
        }
    }
    // gix creates the destination itself but not its parents; a cell's /work may be nested.
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| {
            fail(Own::Uncreatable {
                path: parent.to_path_buf(),
                source,
            })
        })?;
    }
    ensure_tls_provider();
    if progress {
        let shown = redact_url_credentials(url);
        metabob_process::errln!("Cloning {shown} into {}…", dest.display());
    }
    let attempt = |wanted| fetch_and_check_out(url, dest, wanted, progress, net);
    let cloned = match branch {
        None => attempt(Wanted::RemoteHead)?,
        Some(name) => match attempt(Wanted::Branch(name))? {
            Some(done) => Some(done),
            // gix decides a named ref only after listing the remote's refs, and a failed
            // attempt removes what it created; so a tag costs a second handshake, which is
            // cheaper than listing the refs up front for every branch.
            None => attempt(Wanted::Tag(name))?,
        },
    };
    let (repo, head) = cloned.ok_or_else(|| GitError::RefNotFound {
        name: branch.unwrap_or("HEAD").to_string(),
    })?;
    if progress {
        metabob_process::errln!("Checked out {head}.");
    }
    Ok((repo, head))
}

/// What a clone checks out.
#[derive(Clone, Copy)]
enum Wanted<'a> {
    /// The branch the remote's HEAD names.
    RemoteHead,
    /// The remote's `refs/heads/<name>`, and nothing else.
    Branch(&'a str),
    /// The remote's `refs/tags/<name>`, and nothing else.
    Tag(&'a str),
}

impl Wanted<'_> {
    /// The exact ref on the remote: a full name, so gix neither expands it as a partial name
    /// nor reads `@` in it as HEAD.
    fn full_name(self) -> Option<String> {
        match self {
            Wanted::RemoteHead => None,
            Wanted::Branch(name) => Some(format!("refs/heads/{name}")),
            Wanted::Tag(name) => Some(format!("refs/tags/{name}")),
        }
    }
}

/// Why an origin has no form git clones from (anchor: BadOrigin).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--origin {origin:?} {fault}")]
pub struct BadOrigin {
    /// The origin as given, its credentials masked.
    pub origin: String,
    pub fault: OriginFault,
}

/// What is wrong with the form of an origin.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OriginFault {
    #[error("is empty")]
    Empty,
    #[error("holds a control character")]
    ControlCharacter,
    #[error("has the scheme {scheme:?}, which git does not clone over")]
    Scheme { scheme: String },
    #[error("names no host or path")]
    NoHostOrPath,
    #[error("is neither a URL nor a path that exists")]
    Unrecognized,
}

impl Hint for BadOrigin {
    fn hint(&self) -> Option<String> {
        Some(
            "give the repository's clone URL (https://host/org/repo.git, ssh://…, git://…, \
             file:///path, user@host:org/repo) or its local path"
                .into(),
        )
    }
}

/// Whether `origin` has a form git clones from (anchor: check_origin): a `http(s)://`,
/// `ssh://`, `git://` or `file://` URL with something after the scheme, an scp-like
/// `[user@]host:path`, or a local path (absolute, explicitly relative, or one that exists).
/// Checked before the ledger is asked, so a mistyped origin is named rather than answered with
/// "no open task" for a repository nobody has.
pub fn check_origin(origin: &str) -> Result<(), BadOrigin> {
    let refuse = |fault: OriginFault| {
        Err(BadOrigin {
            origin: redact_url_credentials(origin),
            fault,
        })
    };
    let o = origin.trim();
    if o.is_empty() {
        return refuse(OriginFault::Empty);
    }
    if o.chars().any(char::is_control) {
        return refuse(OriginFault::ControlCharacter);
    }
    if let Some((scheme, rest)) = o.split_once("://") {
        let known = ["http", "https", "ssh", "git", "file"];
        if !known.contains(&scheme.to_ascii_lowercase().as_str()) {
            return refuse(OriginFault::Scheme {
                scheme: scheme.to_string(),
            });
        }
        if rest.trim_matches('/').is_empty() {
            return refuse(OriginFault::NoHostOrPath);
        }
        return Ok(());
    }
    let local = o.starts_with('/') || o.starts_with("./") || o.starts_with("../");
    let scp = o
        .split_once(':')
        .is_some_and(|(host, path)| host.len() > 1 && !host.contains('/') && !path.is_empty());
    if local || scp || Path::new(o).exists() {
        Ok(())
    } else {
        refuse(OriginFault::Unrecognized)
    }
}

/// One clone attempt; `Ok(None)` when the remote has no ref `wanted` names, with nothing
/// left behind in `dest`.
fn fetch_and_check_out(
    url: &str,
    dest: &Path,
    wanted: Wanted<'_>,
    progress: bool,
    net: &NetClient,
) -> Result<Option<(Repo, String)>, GitError> {
    let fail = |source: Cause| GitError::Clone {
        url: redact_url_credentials(url),
        source,
        lasting: true,
    };
    // What the remote or the network did: lasting only when it was a refusal.
    let failed = |source: Cause| GitError::Clone {
        url: redact_url_credentials(url),
        lasting: http::refused_for_good(source.as_ref()),
        source,
    };
    let interrupt = AtomicBool::new(false);
    let net = net.clone();
    let prepare = gix::prepare_clone(url, dest)
        .map_err(|e| fail(Box::new(e)))?
        // gix connects on its own (per attempt, and twice for a shallow clone); each
        // connection to an http(s) remote gets our transport before its first request. (One
        // connection gix 0.87 makes skips this hook: its retry when the remote has a branch
        // literally named `HEAD`, which then goes out on gix's own transport.)
        .configure_connection(move |connection| {
            let (url, version) = connection
                .remote()
                .sanitized_url_and_version(Direction::Fetch)?;
            if let Some(ours) = http::connect_through(&net, url, version)? {
                *connection.transport_mut() = ours;
            }
            Ok(())
        });
    let full_name = wanted.full_name();
    let mut prepare = match full_name.as_deref() {
        Some(full) => match prepare.with_ref_name(Some(full)) {
            Ok(p) => p,
            // Not a valid ref name, so no ref on any remote has it.
            Err(_) => return Ok(None),
        },
        None => prepare,
    };
    let (mut checkout, outcome) =
        match prepare.fetch_then_checkout(gix::progress::Discard, &interrupt) {
            Ok(done) => done,
            Err(gix::clone::fetch::Error::RefNameMissing { .. }) if full_name.is_some() => {
                return Ok(None);
            }
            Err(gix::clone::fetch::Error::RefNameMissing { wanted }) => {
                return Err(GitError::RefNotFound {
                    name: wanted.as_ref().as_bstr().to_str_lossy().into_owned(),
                });
            }
            Err(gix::clone::fetch::Error::PrepareFetch(e)) => {
                let url_login = metabob_net::Url::parse(url).is_ok_and(|u| u.has_credentials());
                return Err(match login_failure(&e, url_login) {
                    Some(login) => fail(Box::new(Own::Login(login))),
                    None => failed(Box::new(e)),
                });
            }
            Err(other) => return Err(failed(Box::new(other))),
        };
    // gix points HEAD at whatever ref it was given; git clone --branch <tag> detaches instead,
    // so a commit made in the cell never moves a tag.
    if let (Wanted::Tag(_), Some(tag)) = (wanted, full_name.as_deref()) {
        detach_head_at(checkout.repo(), tag).map_err(|source| {
            fail(Box::new(Own::CheckOutTag {
                tag: tag.to_string(),
                source,
            }))
        })?;
    }
    if progress {
        metabob_process::errln!("Checking out files…");
    }
    let (repo, _) = checkout
        .main_worktree(gix::progress::Discard, &interrupt)
        .map_err(|e| fail(Box::new(e)))?;

    // gix's clone does not record the remote's HEAD under refs/remotes/origin/HEAD, which
    // `git clone` does and the "fix on task branches awaits its merge into the default branch"
    // rule reads. Write it from the symbolic HEAD the remote advertised.
    write_remote_head(&repo, "origin", &outcome.ref_map.remote_refs)
        .map_err(|(name, source)| fail(Box::new(Own::RemoteHead { name, source })))?;

    let repo = Repo::wrap(repo);
    let head = repo.head()?.ok_or_else(|| fail(Box::new(Own::NoCommits)))?;
    Ok(Some((repo, head)))
}

/// Points HEAD straight at the commit the fetched `tag` (a full name) leads to. The cause is
/// gix's, of whichever step failed (reading the tag, peeling it, writing HEAD).
fn detach_head_at(repo: &gix::Repository, tag: &str) -> Result<(), Cause> {
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    let commit = repo.find_reference(tag)?.peel_to_commit()?.id;
    repo.edit_reference(RefEdit {
        change: Change::Update {
            log: LogChange {
                mode: RefLog::AndReference,
                force_create_reflog: false,
                message: format!("clone: checkout {tag}").into(),
            },
            expected: PreviousValue::Any,
            new: gix::refs::Target::Object(commit),
        },
        name: "HEAD".try_into()?,
        deref: false,
    })?;
    Ok(())
}

/// Writes `refs/remotes/<remote>/HEAD`; on failure, the ref that was being read or written
/// and gix's cause.
fn write_remote_head(
    repo: &gix::Repository,
    remote: &str,
    remote_refs: &[gix::protocol::handshake::Ref],
) -> Result<(), (String, Cause)> {
    use gix::protocol::handshake::Ref;
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    let target = remote_refs.iter().find_map(|r| match r {
        Ref::Symbolic {
            full_ref_name,
            target,
            ..
        } if full_ref_name == "HEAD" => Some(target.to_str_lossy().into_owned()),
        _ => None,
    });
    let Some(branch) = target
        .as_deref()
        .and_then(|t| t.strip_prefix("refs/heads/"))
    else {
        // A remote with a detached or unborn HEAD has no default branch to point at.
        return Ok(());
    };
    let tracking = format!("refs/remotes/{remote}/{branch}");
    let found = repo.try_find_reference(tracking.as_str());
    if found.map_err(|e| (tracking.clone(), e.into()))?.is_none() {
        return Ok(());
    }
    let name = format!("refs/remotes/{remote}/HEAD");
    let at = |e: Cause| (name.clone(), e);
    let symbolic: gix::refs::FullName = tracking
        .as_str()
        .try_into()
        .map_err(|e: gix::validate::reference::name::Error| (tracking.clone(), e.into()))?;
    let full: gix::refs::FullName = name
        .as_str()
        .try_into()
        .map_err(|e: gix::validate::reference::name::Error| at(e.into()))?;
    repo.edit_reference(RefEdit {
        change: Change::Update {
            log: LogChange {
                mode: RefLog::AndReference,
                force_create_reflog: false,
                message: "clone: remote HEAD".into(),
            },
            expected: PreviousValue::Any,
            new: gix::refs::Target::Symbolic(symbolic),
        },
        name: full,
        deref: false,
    })
    .map_err(|e| at(e.into()))?;
    Ok(())
}

/// Fetches with the remote's configured refspecs; the ref updates are one transaction
/// applied only after the pack arrived, so a failed fetch changes no ref. An http(s) remote
/// is reached with `net`'s trust and proxy choice.
pub(super) fn fetch(repo: &gix::Repository, remote: &str, net: &NetClient) -> Result<(), GitError> {
    let fail = |source: Cause| GitError::Fetch {
        remote: remote.to_string(),
        source,
    };
    // reqwest's blocking client must not run on an async runtime's thread, and `finding close`
    // fetches from one; so the fetch runs on a thread of its own. A gix repository stays on
    // the thread that opened it, so that thread opens its own.
    let git_dir = repo.git_dir().to_path_buf();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut repo = gix::open(&git_dir).map_err(|e| fail(Box::new(e)))?;
            reflog_identity(&mut repo).map_err(|e| fail(Box::new(Own::Identity(e))))?;
            fetch_here(&repo, remote, net)
        })
        .join()
        .unwrap_or_else(|_| Err(fail(Box::new(Own::Panicked))))
    })
}

/// Gives `repo` git's own fallback identity when none is configured (anchor: reflog_identity).
/// A fetch writes reflog entries, and gix refuses to write one without a committer, where git
/// falls back to the login name at the host name; so a machine with no `user.name` (a fresh CI
/// runner, a new container) fetches with us as it does with git. A configured identity, or
/// `GIT_COMMITTER_NAME`/`EMAIL`, still wins: the fallback keys are read last.
fn reflog_identity(repo: &mut gix::Repository) -> Result<(), Cause> {
    use gix::config::tree::gitoxide::Committer;
    if repo.committer().is_some() {
        return Ok(());
    }
    let login = ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let mut fallback = gix::config::File::new(gix::config::file::Metadata::api());
    for (key, value) in [
        (&Committer::NAME_FALLBACK, login.clone()),
        (&Committer::EMAIL_FALLBACK, format!("{login}@{host}")),
    ] {
        fallback.set_raw_value(key, value.as_str())?;
    }
    repo.config_snapshot_mut().append(fallback)?;
    Ok(())
}

/// One fetch on this thread: a failure of the remote or the way to it is [`GitError::Fetch`],
/// one of this side's store [`GitError::FetchStore`].
fn fetch_here(repo: &gix::Repository, remote: &str, net: &NetClient) -> Result<(), GitError> {
    use gix::remote::fetch::Error as Receive;
    let remote_err = |source: Cause| GitError::Fetch {
        remote: remote.to_string(),
        source,
    };
    ensure_tls_provider();
    let r = repo
        .find_remote(remote)
        .map_err(|e| remote_err(Box::new(Own::NoSuchRemote(e))))?;
    let interrupt = AtomicBool::new(false);
    let (url, version) = r
        .sanitized_url_and_version(Direction::Fetch)
        .map_err(|e| remote_err(Box::new(e)))?;
    let url_login = url.user().is_some() && url.password().is_some();
    let ours = http::connect_through(net, url, version).map_err(|e| remote_err(Box::new(e)))?;
    let connection = match ours {
        Some(ours) => r.to_connection_with_transport(ours),
        None => r
            .connect(Direction::Fetch)
            .map_err(|e| remote_err(Box::new(e)))?,
    };
    connection
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| match login_failure(&e, url_login) {
            Some(login) => remote_err(Box::new(Own::Login(login))),
            None => remote_err(Box::new(e)),
        })?
        .receive(gix::progress::Discard, &interrupt)
        .map_err(|e| match e {
            Receive::UpdateRefs(_) | Receive::RemovePackKeepFile { .. } => GitError::FetchStore {
                remote: remote.to_string(),
                source: Box::new(e),
            },
            e => remote_err(Box::new(e)),
        })?;
    Ok(())
}

/// A missing or refused login, said plainly (see [`Login`]). `url_login`: the URL carries a
/// user and password, which gix sent first.
fn login_failure(e: &gix::remote::fetch::prepare::Error, url_login: bool) -> Option<Login> {
    use gix::protocol::handshake::Error as Handshake;
    use gix::remote::{fetch::prepare::Error as Prepare, ref_map::Error as RefMap};
    let Prepare::RefMap(RefMap::Handshake(handshake)) = e else {
        return None;
    };
    Some(match handshake {
        // gix offers the URL's own login to the credential helpers' retry, so a wrong one
        // comes back as either kind.
        Handshake::Credentials(_)
        | Handshake::EmptyCredentials
        | Handshake::InvalidCredentials { .. }
            if url_login =>
        {
            Login::UrlRefused
        }
        Handshake::Credentials(_) | Handshake::EmptyCredentials => Login::Missing,
        Handshake::InvalidCredentials { .. } => Login::HelperRefused,
        _ => return None,
    })
}

/// Smart HTTP for clone and fetch with the process's trust and proxies.
///
/// gix's own http(s) transport builds its reqwest client inside gix, with the platform's
/// roots and the proxies of the process environment, and takes neither a TLS config nor a
/// proxy from outside: its `http::Options` carry `sslCAInfo` and `proxy`, but its reqwest
/// backend reads neither. So NODE_EXTRA_CA_CERTS and METABOB_NO_SYSTEM_CA, which every other
/// request honours, never reached a clone. Here gix keeps the protocol (`Transport::new_http`
/// speaks smart HTTP and sends the URL's credentials) and the requests go through a reqwest
/// client built from `NetClient`: its rustls config (the same roots and verifier) and its
/// proxy choice (HTTPS_PROXY, HTTP_PROXY, NO_PROXY, loopback direct). git's own
/// `http.sslCAInfo`, `http.sslVerify` and `http.proxy` are not read, as for every request.
mod http;
