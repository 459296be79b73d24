//! The outgoing guard against realistic input: credentials generated at test time, a fake
//! HOME and workspace holding real credential files, and placeholders that must pass.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use metabob_process::env::Env;
use metabob_process::guard::*;
use metabob_process::random::{random_hex, uuid_v4};
use serde_json::{Value, json};

fn rand_alnum(n: usize) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).expect("OS randomness");
    buf.iter()
        .map(|b| A[*b as usize % A.len()] as char)
        .collect()
}

/// A fake machine: HOME with ~/.netrc and ~/.aws/credentials, and a workspace with a .env.
struct Fixture {
    _root: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    aws_secret: String,
    netrc_password: String,
    dotenv_token: String,
}

impl Fixture {
    fn new() -> Fixture {
        let root = tempfile::Builder::new()
            .prefix("mbguard-")
            .tempdir()
            .expect("temp dir");
        let home = root.path().join("home");
        let ws = root.path().join("ws");
        std::fs::create_dir_all(home.join(".aws")).expect("mkdir .aws");
        std::fs::create_dir_all(&ws).expect("mkdir ws");
        let aws_secret = format!("{}/{}", rand_alnum(20), rand_alnum(19));
        let netrc_password = rand_alnum(24);
        let dotenv_token = rand_alnum(32);
        std::fs::write(
            home.join(".aws/credentials"),
            format!(
                "[default]\naws_access_key_id = AKIA{}\naws_secret_access_key = {aws_secret}\nregion = eu-west-1\n",
                rand_alnum(16).to_uppercase()
            ),
        )
        .expect("write credentials");
        std::fs::write(
            home.join(".netrc"),
            format!("machine git.internal\n  login deploy\n  password {netrc_password}\n"),
        )
        .expect("write netrc");
        std::fs::write(
            ws.join(".env"),
            format!(
                "# local dev\nSERVICE_TOKEN=\"{dotenv_token}\"\nMAX_TOKENS=4096\nCACHE_DIR=/var/cache/{}\n",
                rand_alnum(20)
            ),
        )
        .expect("write .env");
        Fixture {
            _root: root,
            home,
            ws,
            aws_secret,
            netrc_password,
            dotenv_token,
        }
    }

    fn env(&self, extra: &[(&str, &str)]) -> Env {
        let mut vars = vec![("HOME".to_string(), self.home.display().to_string())];
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Env::new(vars, &self.ws)
    }

    fn guard(&self, extra: &[(&str, &str)]) -> Guard {
        Guard::new(&self.env(extra), Some(&self.ws))
    }
}

/// Refuses with a secret of `kind` in `field`, and the line never holds `value`.
#[track_caller]
fn assert_secret(g: &Guard, args: Value, kind: &str, field: &str, value: &str) {
    match g.check_input("record_finding", &args) {
        Err(e @ GuardRefusal::Secret { .. }) => {
            let line = e.to_string();
            assert!(
                line.starts_with(&format!(
                    "record_finding: refused: outgoing_secret({kind}, {field})"
                )),
                "{line}"
            );
            assert!(
                !line.contains(value),
                "the refusal repeats the value: {line}"
            );
            assert!(line.contains("***"), "the refusal suggests masking: {line}");
        }
        other => panic!("expected a {kind} refusal in {field}, got {other:?}"),
    }
}

#[track_caller]
fn assert_passes(g: &Guard, args: Value) -> Guarded {
    match g.check_input("record_finding", &args) {
        Ok(ok) => ok,
        Err(e) => panic!("{args} was refused: {e}"),
    }
}

fn openssl_private_key(algorithm: &[&str]) -> String {
    let out = std::process::Command::new("openssl")
        .arg("genpkey")
        .args(algorithm)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl genpkey failed");
    String::from_utf8(out.stdout).expect("PEM is text")
}

fn jwt() -> String {
    let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = e.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = e.encode(format!(r#"{{"sub":"{}","iat":1700000000}}"#, uuid_v4()));
    let mut sig = [0u8; 32];
    getrandom::fill(&mut sig).expect("OS randomness");
    format!("{header}.{payload}.{}", e.encode(sig))
}

#[test]
fn refuses_real_secret_shapes() {
    let fx = Fixture::new();
    let attachment_key = format!("k{}", rand_alnum(15));
    let g = fx.guard(&[("METABOB_API_KEY", &attachment_key)]);

    let gh = format!("ghp_{}", rand_alnum(36));
    assert_secret(
        &g,
        json!({"summary": format!("push failed with {gh}")}),
        "github_token",
        "summary",
        &gh,
    );
    for algo in [
        &["-algorithm", "ed25519"][..],
        &["-algorithm", "rsa", "-pkeyopt", "rsa_keygen_bits:1024"][..],
    ] {
        let pem = openssl_private_key(algo);
        assert_secret(
            &g,
            json!({"details": format!("the deploy key is\n{pem}")}),
            "private_key",
            "details",
            pem.lines().nth(1).expect("a body line"),
        );
    }
    let token = jwt();
    assert_secret(
        &g,
        json!({"content": format!("session cookie decoded from {token}")}),
        "jwt",
        "content",
        &token,
    );
    assert_secret(
        &g,
        json!({"details": "repro: set DB_PASSWORD=hunter2 and run migrate"}),
        "config_assignment",
        "details",
        "hunter2",
    );
    assert_secret(
        &g,
        json!({"details": "connects to postgres://admin:s3cr3t@db/x"}),
        "url_credentials",
        "details",
        "s3cr3t",
    );
    let bearer = rand_alnum(40);
    assert_secret(
        &g,
        json!({"details": format!("curl -H \"Authorization: Bearer {bearer}\" …")}),
        "authorization_header",
        "details",
        &bearer,
    );
    // Known values: from ~/.aws/credentials, ~/.netrc, the workspace .env, the attachment key.
    for (value, field) in [
        (&fx.aws_secret, "summary"),
        (&fx.netrc_password, "goal"),
        (&fx.dotenv_token, "details"),
        (&attachment_key, "content"),
    ] {
        assert_secret(
            &g,
            json!({ field: format!("it failed because {value} expired") }),
            "known_secret",
            field,
            value,
        );
    }
}

#[test]
fn passes_placeholders_ids_and_masked_values() {
    let fx = Fixture::new();
    let g = fx.guard(&[]);
    for text in [
        "set API_KEY=YOUR_API_KEY in .env",
        "Authorization: Bearer <token>",
        "token=***",
        "GITHUB_TOKEN=${GITHUB_TOKEN}",
        "the docs use AKIAIOSFODNN7EXAMPLE as the key id",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "MAX_TOKENS=4096 and TOKEN_TTL=30s",
        "KEY_ROTATION_DAYS=90",
        // A listed placeholder literal: the conventional "change me" default, not a leak.
        "password=changeme",
        "postgres://admin:***@host/app",
        "the key: it is rotated nightly by the cron job",
    ] {
        assert_passes(&g, json!({ "details": text }));
    }
    let ids = json!({
        "commit": random_hex(20),
        "task_id": uuid_v4(),
        "finding_id": format!("agf_{}", random_hex(12)),
        "concept_id": format!("concept_{}", random_hex(12)),
        "summary": format!("fixed in {} (patch id {})", random_hex(20), random_hex(20)),
    });
    let out = assert_passes(&g, ids.clone());
    assert_eq!(out.value, ids, "nothing to rewrite");
    assert!(out.notes.is_empty());
}

#[test]
fn variables_named_for_locations_or_qualifiers_are_not_known() {
    let fx = Fixture::new();
    let path_like = rand_alnum(24);
    let tok = rand_alnum(24);
    let g = fx.guard(&[("SSH_KEY_PATH", &path_like), ("DEPLOY_TOKEN", &tok)]);
    assert_passes(&g, json!({ "summary": format!("see {path_like}") }));
    assert_secret(
        &g,
        json!({ "summary": format!("see {tok}") }),
        "known_secret",
        "summary",
        &tok,
    );
    let short = "Ab1!Ab1!";
    let g = fx.guard(&[("SHORT_SECRET", short)]);
    assert_passes(&g, json!({ "summary": format!("value {short}") }));
}

#[test]
fn home_paths_are_rewritten_in_prose_and_refused_where_acted_on() {
    let fx = Fixture::new();
    let g = fx.guard(&[]);
    let home = fx.home.display().to_string();
    let out = assert_passes(
        &g,
        json!({
            "summary": format!("crash in {home}/src/lib.rs"),
            "details": ["fine", "also seen at /home/alice/work/x.py and C:\\Users\\bob\\x"],
        }),
    );
    assert_eq!(out.value["summary"], "crash in ~/src/lib.rs");
    assert_eq!(out.value["details"][1], "also seen at ~/work/x.py and ~\\x");
    assert_eq!(out.notes.len(), 1);
    assert!(
        out.notes[0].contains("details[1]") && out.notes[0].contains("summary"),
        "{:?}",
        out.notes
    );

    let err = g
        .check_input(
            "claim_finding",
            &json!({"files": ["src/a.rs", format!("{home}/b.rs")]}),
        )
        .expect_err("an acted-on home path refuses");
    assert_eq!(
        err,
        GuardRefusal::LocalPath {
            tool: "claim_finding".into(),
            field: "files[1]".into()
        }
    );
    assert!(
        err.to_string()
            .starts_with("claim_finding: refused: outgoing_local_path(files[1])")
    );
}

#[test]
fn size_caps_per_field() {
    let fx = Fixture::new();
    let g = fx.guard(&[]);
    assert_passes(&g, json!({"summary": "a".repeat(2048)}));
    let err = g
        .check_input("record_finding", &json!({"summary": "a".repeat(2049)}))
        .expect_err("over the summary cap");
    assert!(
        err.to_string()
            .starts_with("record_finding: refused: outgoing_too_large(summary, 2049)"),
        "{err}"
    );
    assert_passes(&g, json!({"details": "a".repeat(16 * 1024)}));
    let err = g
        .check_input(
            "record_finding",
            &json!({"some_new_field": "a".repeat(4097)}),
        )
        .expect_err("an unlisted field is capped at 4 KB");
    assert!(matches!(
        err,
        GuardRefusal::TooLarge {
            bytes: 4097,
            cap: 4096,
            ..
        }
    ));
    let err = g
        .check_input("x", &json!({"ref": "r".repeat(201)}))
        .expect_err("refs are short");
    assert!(matches!(err, GuardRefusal::TooLarge { cap: 200, .. }));
}

#[test]
fn nested_fields_report_their_path_and_inherit_their_key() {
    let fx = Fixture::new();
    let g = fx.guard(&[]);
    assert_secret(
        &g,
        json!({"finding": {"summary": "ok", "details": ["ok", "DB_PASSWORD=hunter2"]}}),
        "config_assignment",
        "finding.details[1]",
        "hunter2",
    );
    // A nested `summary` keeps its 2 KB prose cap; array elements inherit `files`.
    let err = g
        .check_input("t", &json!({"items": [{"summary": "a".repeat(2049)}]}))
        .expect_err("nested cap");
    assert!(
        err.to_string()
            .contains("outgoing_too_large(items[0].summary, 2049)")
    );
    let out = assert_passes(&g, json!({"batch": [{"notes": "/home/eve/x"}]}));
    assert_eq!(out.value["batch"][0]["notes"], "~/x");
}

#[test]
fn a_changed_dotenv_is_read_again() {
    let fx = Fixture::new();
    let old = fx.dotenv_token.clone();
    let g = fx.guard(&[]);
    assert!(
        g.check_input("t", &json!({"summary": old.clone()}))
            .is_err()
    );

    // Same length, so only the modification time tells the versions apart.
    let new = rand_alnum(32);
    let path = fx.ws.join(".env");
    let text = std::fs::read_to_string(&path).expect("read .env");
    std::fs::write(&path, text.replace(&old, &new)).expect("rewrite .env");
    // Coarse filesystem clocks: move the modification time on explicitly.
    let f = std::fs::File::options()
        .write(true)
        .open(&path)
        .expect("open .env");
    f.set_modified(SystemTime::now() + Duration::from_secs(60))
        .expect("set mtime");
    drop(f);

    let g = fx.guard(&[]);
    assert_passes(&g, json!({"summary": old}));
    assert_secret(
        &g,
        json!({"summary": format!("now {new}")}),
        "known_secret",
        "summary",
        &new,
    );
}

#[test]
fn no_workspace_and_no_home_reads_no_files() {
    let fx = Fixture::new();
    let g = Guard::new(&Env::new(Vec::new(), Path::new("/")), None);
    assert_eq!(g.known_secret_count(), 0);
    assert_passes(&g, json!({"summary": fx.dotenv_token.clone()}));
}

#[test]
fn the_backstop_matches_only_exact_known_values() {
    let fx = Fixture::new();
    let key = format!("mb_live_{}", random_hex(16));
    let g = fx.guard(&[("METABOB_API_KEY", &key)]);

    let mut pointer = json!({
        "content": {"header": ["agent: x", format!("stamp {}", fx.aws_secret)]},
    });
    let err = g
        .check_pointer("finding_create_write", &mut pointer)
        .expect_err("a known value refuses");
    assert_eq!(
        err.to_string(),
        "outgoing_secret(known_secret, content.header[1]): the finding_create_write write was not sent"
    );
    assert!(!err.to_string().contains(&fx.aws_secret));

    let mut pointer = json!({"client_claim": {"operator": format!("op {key}")}});
    assert!(
        g.check_pointer("s", &mut pointer).is_err(),
        "the attachment key"
    );

    // Token-shaped ids and hashes that no one declared secret go through untouched.
    let mut pointer = json!({
        "id": format!("concept_{}", random_hex(12)),
        "hash": random_hex(32),
        "looks_like_a_token": format!("ghp_{}", rand_alnum(36)),
        "jwtish": jwt(),
        "n": 3,
    });
    let before = pointer.clone();
    assert_eq!(g.check_pointer("s", &mut pointer), Ok(Vec::new()));
    assert_eq!(pointer, before);

    // This user's home is shortened with a warning; another user's path is not ours to judge.
    let home = fx.home.display().to_string();
    let mut pointer = json!({
        "content": {"files": [format!("{home}/a.rs"), "/home/zed/b.rs"], "summary": format!("in {home}")},
    });
    let warnings = g
        .check_pointer("finding_create_write", &mut pointer)
        .expect("home paths do not refuse");
    assert_eq!(pointer["content"]["files"][0], "~/a.rs");
    assert_eq!(pointer["content"]["files"][1], "/home/zed/b.rs");
    assert_eq!(pointer["content"]["summary"], "in ~");
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with("finding_create_write:")
            && warnings[0].contains("content.files[0]")
            && warnings[0].contains("content.summary"),
        "{warnings:?}"
    );
}

#[test]
fn log_description_names_sizes_not_values() {
    let args = json!({"files": ["a", "b"], "force": true, "summary": "x".repeat(41)});
    let line = describe_args_for_log(&args);
    assert_eq!(line, "files=array(2) force=boolean summary=string(41)");
}

#[test]
fn debug_output_hides_known_values() {
    let fx = Fixture::new();
    let g = fx.guard(&[]);
    assert!(g.known_secret_count() >= 3);
    let dbg = format!("{g:?}");
    assert!(!dbg.contains(&fx.dotenv_token) && !dbg.contains(&fx.aws_secret));
}
