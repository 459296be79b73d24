//! The board of a real `ledger serve`: `task list` and `/board` show the same fleet state as
//! real cells pull, fix and withdraw tasks; the page in a real headless Chromium shows a task
//! move from open to claimed to closed, and shows nothing with a wrong key; and Chromium,
//! driven over DevTools (tests/support/cdp.py), opens a task's history and clicks each of its
//! buttons, whose effect the ledger's own board judges. Its screenshot is docs/board.png.

use std::process::Command;

use serde_json::{Value, json};

use crate::support::{Ledger, TestEnv, snapshot};

/// What `/board` reads: `taskBoard` through `/resolve`.
fn board_data(l: &Ledger, key: &str) -> (u16, Value) {
    l.resolve(key, json!({ "type": "taskBoard" }))
}

/// The board without its read time, which differs between any two reads.
fn without_now(mut v: Value) -> Value {
    v.as_object_mut().unwrap().remove("now");
    v
}

fn admin_key(env: &TestEnv) -> String {
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(env.home().join(".substrate/config.json")).unwrap(),
    )
    .unwrap();
    config["metabob"]["apiKey"].as_str().unwrap().to_string()
}

/// The group of `task` on the board, if it is there.
fn group_of(board: &Value, task: &str) -> Option<String> {
    for repo in board["repositories"].as_array()? {
        for g in metabob_wire::board::GROUPS {
            if repo[g]
                .as_array()?
                .iter()
                .any(|t| t["task_id"].as_str() == Some(task))
            {
                return Some(g.to_string());
            }
        }
    }
    None
}

/// `/board` as a real headless Chromium renders it with `key`, after its first reads.
fn chromium_dom(l: &Ledger, key: &str) -> String {
    let url = format!("{}/board#key={key}", l.url);
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=5000",
            "--dump-dom",
            &url,
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("chromium could not run ({e}): install Debian's `chromium` package (scripts/test.sh does)")
        });
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `steps` in one tab of a real headless Chromium (tests/support/cdp.py): the value of
/// each step, or a panic naming the step that failed.
fn chromium_steps(steps: &Value) -> Vec<Value> {
    use std::io::Write;
    const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/cdp.py");
    let mut child = Command::new("python3")
        .arg(DRIVER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs the DevTools driver");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(steps.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("the driver ran");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON line per step"))
        .collect();
    assert!(
        out.status.success(),
        "chromium steps: {lines:#?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines.into_iter().map(|l| l["ok"].clone()).collect()
}

/// The `<li>` of `task` as the page drew it, with its group.
fn dom_group(dom: &str, task: &str) -> Option<String> {
    let at = dom.find(&format!("data-task=\"{task}\""))?;
    let li = &dom[dom[..at].rfind("<li")?..at];
    let g = li.split("data-group=\"").nth(1)?;
    Some(g[..g.find('"')?].to_string())
}

fn record_refused_ref(env: &TestEnv, url: &str) -> String {
    let v = env.record_task_with(
        url,
        "a.py",
        "work on a weird branch",
        "CRITICAL",
        "ref: -x;rm -rf",
    );
    v["finding_ids"][0].as_str().unwrap().to_string()
}

fn task_id(recorded: &Value) -> String {
    recorded["finding_ids"][0]
        .as_str()
        .expect("finding record names the id")
        .to_string()
}

#[test]
fn task_list_and_the_board_page_show_one_fleet_state() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let key = admin_key(&env);
    let (_, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    // A task whose ref the pull refuses: claimed, refused and parked.
    let weird = record_refused_ref(&env, &url);
    let out = env.task_pull(&url, "c0", &[]);
    assert_eq!(out.code, 5, "{out:?}");
    let fix = task_id(&env.record_task(&url, "a should return 2", "HIGH"));
    let later = task_id(&env.record_task(&url, "tidy b", "LOW"));

    let (status, b) = board_data(&ledger, &key);
    assert_eq!(status, 200, "{b}");
    assert_eq!(group_of(&b, &weird).as_deref(), Some("parked"), "{b}");
    assert_eq!(group_of(&b, &fix).as_deref(), Some("open"), "{b}");
    let dom = chromium_dom(&ledger, &key);
    assert_eq!(dom_group(&dom, &fix).as_deref(), Some("open"), "{dom}");
    assert_eq!(dom_group(&dom, &weird).as_deref(), Some("parked"), "{dom}");

    let out = env.task_pull(&url, "c1", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let (_, b) = board_data(&ledger, &key);
    assert_eq!(group_of(&b, &fix).as_deref(), Some("claimed"), "{b}");
    // Two cells have claimed: c0 (which parked its task) and c1, which holds the task now.
    let cells = b["cells"].as_array().unwrap();
    let holding = cells
        .iter()
        .filter(|c| c["holding"] == json!([fix]))
        .count();
    assert_eq!((cells.len(), holding), (2, 1), "{b}");
    let dom = chromium_dom(&ledger, &key);
    assert_eq!(dom_group(&dom, &fix).as_deref(), Some("claimed"), "{dom}");

    let out = env.fix_push_close("c1");
    assert_eq!(out.code, 0, "{out:?}");
    let dom = chromium_dom(&ledger, &key);
    assert_eq!(dom_group(&dom, &fix).as_deref(), Some("closed"), "{dom}");
    assert_eq!(dom_group(&dom, &later).as_deref(), Some("open"), "{dom}");

    // The two faces agree: `task list --json` is the board the page reads.
    let (_, page) = board_data(&ledger, &key);
    let listed = env.run(&["task", "list", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(without_now(listed), without_now(page.clone()));
    assert_eq!(group_of(&page, &fix).as_deref(), Some("closed"), "{page}");
    assert!(
        page["repositories"][0]["closed"][0]["fix_commit"].is_string(),
        "{page}"
    );

    let text = env.run(&["task", "list", "--origin", &url]);
    insta::assert_snapshot!("board_task_list_text", snapshot(&text, &env));

    // Another org's key sees its own org: an empty board.
    let (_, other) = ledger.create_key(&env, "other", "read");
    let (status, b) = board_data(&ledger, &other);
    assert_eq!((status, &b["repositories"]), (200, &json!([])), "{b}");
    let dom = chromium_dom(&ledger, &other);
    assert!(!dom.contains("data-task="), "{dom}");

    // A wrong key: the ledger refuses it and the page shows the rejection and no task.
    let (status, _) = board_data(&ledger, "mb_live_00000000000000000000000000000000");
    assert_eq!(status, 401);
    let dom = chromium_dom(&ledger, "mb_live_00000000000000000000000000000000");
    assert!(dom.contains("key rejected"), "{dom}");
    assert!(!dom.contains("data-task="), "{dom}");
    // And the page itself needs no key, nor does its script.
    let (status, _) = ledger.http("GET", "/board", None, "");
    assert_eq!(status, 200);
    let (status, script) = ledger.http("GET", "/board.js", None, "");
    assert_eq!(status, 200);
    assert!(script.contains("taskBoard"), "{script}");
}

#[test]
fn in_chromium_a_tasks_detail_shows_its_attempts_and_each_button_acts_through_the_ledger() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let key = admin_key(&env);
    let (_, read_only) = ledger.create_key(&env, "default", "read");
    let (_, url) = env.origin("app", &[("a.py", "def a():\n    return 1\n")]);
    let parked = record_refused_ref(&env, &url);
    assert_eq!(env.task_pull(&url, "c0", &[]).code, 5);
    let claimed = task_id(&env.record_task(&url, "a should return 2", "HIGH"));
    assert_eq!(env.task_pull(&url, "c1", &[]).code, 0);
    let open = task_id(&env.record_task(&url, "tidy b", "LOW"));
    let waits = format!("blocked-by: {open}");
    let blocked = task_id(&env.record_task_with(&url, "a.py", "use tidy b", "HIGH", &waits));
    let (_, b) = board_data(&ledger, &key);
    for (task, group) in [
        (&parked, "parked"),
        (&claimed, "claimed"),
        (&open, "open"),
        (&blocked, "blocked"),
    ] {
        assert_eq!(group_of(&b, task).as_deref(), Some(group), "{b}");
    }

    let li = |task: &str| format!("li.task[data-task=\"{task}\"]");
    let in_group = |task: &str, group: &str| {
        json!({ "wait": format!(
            "(document.querySelector('{}') || {{}}).dataset?.group === '{group}'",
            li(task)
        ) })
    };
    let detail_of = |task: &str| {
        json!({ "wait": format!(
            "!document.getElementById('detail').hidden && \
             document.getElementById('detail').dataset.task === '{task}'"
        ) })
    };
    let status_says = |text: &str| {
        json!({ "wait": format!(
            "document.getElementById('detail-status').textContent.includes('{text}')"
        ) })
    };
    let visible = "[...document.querySelectorAll('#actions button[data-action]')]\
                   .filter(b => !b.hidden).map(b => b.dataset.action).join(',')";
    let shot = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/board.png");
    let board = format!("{}/board#key={key}", ledger.url);
    let out = chromium_steps(&json!([
        { "goto": board },
        { "wait": format!("document.querySelector('{}')", li(&parked)) },
        // The parked task's detail: c0's attempt and why it was parked; Reopen and Cancel.
        { "click": li(&parked) },
        detail_of(&parked),
        { "wait": "document.querySelectorAll('#attempts li').length > 0" },
        { "eval": "document.getElementById('detail').innerText" },
        { "eval": visible },
        { "screenshot": shot.display().to_string() },
        { "type": ["#reason", "the ref is fixed upstream"] },
        { "click": "#act-reopen" },
        status_says("done: reopened"),
        in_group(&parked, "open"),
        // The claimed task: Release frees c1's claim.
        { "click": li(&claimed) },
        detail_of(&claimed),
        { "eval": visible },
        { "click": "#act-release" },
        status_says("done:"),
        in_group(&claimed, "open"),
        // Cancel needs a reason; given one, the task is closed for good and offers nothing.
        { "click": li(&open) },
        detail_of(&open),
        { "click": "#act-cancel" },
        status_says("Give a reason"),
        { "type": ["#reason", "superseded by the rewrite"] },
        { "click": "#act-cancel" },
        status_says("done:"),
        in_group(&open, "closed"),
        { "wait": "document.getElementById('detail').dataset.group === 'closed'" },
        { "eval": visible },
        // The key went in a header: the page set no cookie.
        { "eval": "document.cookie" },
        // The task that waits for the cancelled one says so on the board.
        { "wait": format!(
            "document.querySelector('{}').textContent.includes('blocked by cancelled {open}')",
            li(&blocked)
        ) },
    ]));
    let text = out[5].as_str().unwrap();
    // One attempt, by the cell that parked it, and the refusal that parked it.
    assert!(text.contains("Attempts (1)"), "{text}");
    assert!(
        text.contains("work on a weird branch (CRITICAL, parked)"),
        "{text}"
    );
    assert!(text.contains("refused"), "{text}");
    assert_eq!(out[6], "reopen,cancel");
    assert_eq!(out[14], "release,cancel");
    assert_eq!(out[27], "", "a closed task offers no action");
    assert_eq!(out[28], "", "no cookie");
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "docs/board.png is a PNG");

    // The ledger judges what the buttons did.
    let (_, b) = board_data(&ledger, &key);
    assert_eq!(group_of(&b, &parked).as_deref(), Some("open"), "{b}");
    assert_eq!(group_of(&b, &claimed).as_deref(), Some("open"), "{b}");
    assert_eq!(group_of(&b, &open).as_deref(), Some("closed"), "{b}");
    let shown = env.run(&["task", "show", &open]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(
        shown.stdout.contains("superseded by the rewrite"),
        "{shown:?}"
    );
    let reopened = env.run(&["task", "reopen", &open]);
    assert_eq!(
        reopened.code, 1,
        "a cancelled task stays closed: {reopened:?}"
    );

    // A read-only key sees the board, and its button is refused in the detail view alone.
    let board = format!("{}/board#key={read_only}", ledger.url);
    let out = chromium_steps(&json!([
        { "goto": board },
        { "wait": format!("document.querySelector('{}')", li(&claimed)) },
        { "click": li(&claimed) },
        detail_of(&claimed),
        { "type": ["#reason", "try"] },
        { "click": "#act-cancel" },
        status_says("may only read"),
        { "eval": "document.querySelectorAll('li.task').length" },
    ]));
    assert_eq!(out[7], 4, "the board stays");
    let (_, b) = board_data(&ledger, &key);
    assert_eq!(group_of(&b, &claimed).as_deref(), Some("open"), "{b}");
}

#[test]
fn the_board_page_and_its_files_send_the_security_headers_and_nothing_inline() {
    let env = TestEnv::new();
    let ledger = env.ledger("main", &[]);
    let policy = [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ];
    let mut bodies = Vec::new();
    for (path, content_type) in [
        ("/board", "text/html"),
        ("/board.js", "text/javascript"),
        ("/board.css", "text/css"),
    ] {
        let (status, headers, body) = ledger.http_with_headers("GET", path, None, "");
        assert_eq!(status, 200, "{path}: {body}");
        let header = |name: &str| {
            let found: Vec<&str> = headers
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(found.len(), 1, "{path}: one {name} header: {headers:?}");
            found[0].to_string()
        };
        assert!(
            header("content-type").starts_with(content_type),
            "{path}: {headers:?}"
        );
        let csp = header("content-security-policy");
        let directives: Vec<&str> = csp.split(';').map(str::trim).collect();
        assert_eq!(directives, policy, "{path}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
        bodies.push(body);
    }
    // Under that policy an inline script or style would not run: the page carries none, only
    // references to its own files.
    let html = bodies[0].to_ascii_lowercase();
    assert!(!html.contains("<style"), "{html}");
    assert!(!html.contains(" style="), "{html}");
    let handler = html.split(" on").skip(1).any(|rest| {
        let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
        !name.is_empty() && rest[name.len()..].starts_with('=')
    });
    assert!(!handler, "no inline event handler: {html}");
    let scripts: Vec<&str> = html.split("<script").skip(1).collect();
    assert_eq!(scripts.len(), 1, "{html}");
    assert!(
        scripts[0].starts_with(r#" src="/board.js"></script>"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<link rel="stylesheet" href="/board.css">"#),
        "{html}"
    );
    assert!(bodies[1].contains("fetch(\"/resolve\""), "{}", bodies[1]);
    assert!(bodies[2].contains(".groups"), "{}", bodies[2]);
}

#[test]
fn task_list_not_attached_exits_2() {
    // A fresh home with no ledger: nothing to attach to.
    let env = TestEnv::new();
    let out = env.run(&["task", "list"]);
    assert_eq!(out.code, 2, "{out:?}");
}
