//! Repository identity (crates/wire/src/repo_identity.rs): remote URLs normalised, a
//! checkout's identity, and the aliases that map findings between a super-repo and its vessels.

use metabob_cell::ledger::repo_identity::repo_identity;
use metabob_wire::repo_identity::{
    Aliases, VesselDir, identity_of_origin, normalize_remote_url, vessel_aliases,
};

use crate::support::TestEnv;

use super::git;

#[test]
fn normalize_remote_url_table() {
    let table = [
        ("https://github.com/org/repo", "github.com/org/repo"),
        ("git@github.com:Org/Repo.git", "github.com/org/repo"),
        (
            "https://user:tok3n@GitHub.com:8443/Org/Repo.git/",
            "github.com/org/repo",
        ),
        (
            "ssh://git@host.example:2222/team/proj.git",
            "host.example/team/proj",
        ),
        ("ssh://host.example/team/proj", "host.example/team/proj"),
        ("git://127.0.0.1:9418/remote.git", "127.0.0.1/remote"),
        ("https://host/org/repo.git?ref=main#frag", "host/org/repo"),
        ("https://host/org/repo//", "host/org/repo"),
        ("https://host/org/repo.git/", "host/org/repo"),
        ("host.example:team/proj.git", "host.example/team/proj"),
        ("file:///srv/git/X.git", "srv/git/x"),
        ("/srv/git/X.git", "srv/git/x"),
        ("  https://HOST/A/B  ", "host/a/b"),
        ("https://[::1]:8080/org/repo", "[::1]/org/repo"),
    ];
    for (url, want) in table {
        assert_eq!(normalize_remote_url(url), want, "{url}");
    }
    assert_eq!(
        identity_of_origin("git@github.com:Org/Repo.git"),
        "github.com/org/repo"
    );
}

#[test]
fn repo_identity_of_subdirectory_and_non_repository() {
    let env = TestEnv::new();
    let mono = env.path("Mono");
    std::fs::create_dir_all(mono.join("packages/API")).unwrap();
    git(&env, &mono, &["init", "-q", "-b", "main"]);
    assert_eq!(repo_identity(&mono), "Mono", "no origin: the basename");
    git(
        &env,
        &mono,
        &["remote", "add", "origin", "git@github.com:Org/Mono.git"],
    );
    assert_eq!(repo_identity(&mono), "github.com/org/mono");
    assert_eq!(
        repo_identity(&mono.join("packages/API")),
        "github.com/org/mono/packages/api"
    );
    let plain = env.path("Plain-Dir");
    std::fs::create_dir_all(&plain).unwrap();
    assert_eq!(repo_identity(&plain), "Plain-Dir");
}

#[test]
fn aliases_map_findings_both_ways() {
    let env = TestEnv::new();
    let files = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    // The super-repo: repos/vessel-a is its own checkout with an origin, repos/vessel-b is not.
    let sup = env.path("super");
    std::fs::create_dir_all(sup.join("repos/vessel-b/src")).unwrap();
    std::fs::create_dir_all(sup.join("repos/vessel-a")).unwrap();
    git(&env, &sup, &["init", "-q", "-b", "main"]);
    git(
        &env,
        &sup,
        &["remote", "add", "origin", "https://host/org/super.git"],
    );
    let va = sup.join("repos/vessel-a");
    git(&env, &va, &["init", "-q", "-b", "main"]);
    git(
        &env,
        &va,
        &["remote", "add", "origin", "git@host:org/Vessel-A.git"],
    );
    let s = metabob_cell::ledger::repo_identity::aliases_for_workspace(&sup);
    assert_eq!(s.identity(), "host/org/super");
    assert_eq!(
        s.map_finding("HOST/org/super", &files(&["x.rs"])),
        Some(files(&["x.rs"])),
        "its own findings, case-insensitively"
    );
    assert_eq!(
        s.map_finding("super", &files(&["x.rs"])),
        Some(files(&["x.rs"])),
        "basename"
    );
    assert_eq!(
        s.map_finding("host/org/vessel-a", &files(&["lib.rs"])),
        Some(files(&["repos/vessel-a/lib.rs"])),
        "a vessel with its own checkout, by exact identity"
    );
    assert_eq!(
        s.map_finding("other/fork/vessel-a", &files(&["lib.rs"])),
        None,
        "same name, different identity: not this vessel"
    );
    assert_eq!(
        s.map_finding("anyhost/any/vessel-b", &files(&["src/m.rs"])),
        Some(files(&["repos/vessel-b/src/m.rs"])),
        "a vessel without its own checkout, by name"
    );
    assert_eq!(s.map_finding("host/org/unrelated", &files(&["x"])), None);

    // A vessel checkout reads the super-repo's findings under repos/<name>/.
    let vessel = env.path("checkouts/vessel-b");
    std::fs::create_dir_all(&vessel).unwrap();
    git(&env, &vessel, &["init", "-q", "-b", "main"]);
    git(
        &env,
        &vessel,
        &["remote", "add", "origin", "https://host/org/vessel-b"],
    );
    let v = metabob_cell::ledger::repo_identity::aliases_for_workspace(&vessel);
    assert_eq!(
        v.map_finding(
            "host/org/super",
            &files(&["repos/vessel-b/src/m.rs", "README.md"])
        ),
        Some(files(&["src/m.rs"])),
        "prefix removed, other files dropped"
    );
    assert_eq!(
        v.map_finding("elsewhere/another-super", &files(&["repos/Vessel-B/a.rs"])),
        Some(files(&["a.rs"])),
        "by vessel name, from any super-repo"
    );
    assert_eq!(
        v.map_finding("host/org/super", &files(&["repos/vessel-a/a.rs"])),
        None
    );
    assert_eq!(
        v.map_finding("host/org/vessel-b", &files(&["a.rs"])),
        Some(files(&["a.rs"]))
    );
    // repo_name is never consulted: a finding is matched on its repo: header only.
    assert!(!v.belongs("vessel-c", &files(&["a.rs"])));

    // Task pull: from the origin's identity alone.
    let t = vessel_aliases(&identity_of_origin("git@host:org/Vessel-B.git"));
    assert_eq!(
        t.map_finding("host/org/super", &files(&["repos/vessel-b/x.py"])),
        Some(files(&["x.py"]))
    );
    assert_eq!(
        t.map_finding("host/org/vessel-b", &files(&["x.py"])),
        Some(files(&["x.py"]))
    );
    assert_eq!(t.map_finding("host/org/super", &files(&["x.py"])), None);

    let explicit = Aliases::super_repo(
        "host/org/super",
        vec![VesselDir {
            name: "vessel-b".into(),
            identity: None,
        }],
    );
    assert_eq!(
        explicit.map_finding("a/b/vessel-b", &files(&["f"])),
        Some(files(&["repos/vessel-b/f"]))
    );
}
