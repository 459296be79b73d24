//! Which workspace a session serves (roots, the plugin folder, init_workspace) and the index it
//! persists across restarts.

use std::time::Duration;

use serde_json::json;

use super::project;
use crate::support::mcp::{Client, Session};
use crate::support::{TestEnv, normalize};

#[tokio::test]
async fn the_workspace_comes_from_roots_and_the_plugin_folder_is_none() {
    let mut env = TestEnv::new();
    let plugin = env.path("plugin");
    let ws = env.path("proj");
    project(&env, &ws);
    std::fs::create_dir_all(&plugin).expect("plugin dir");
    env.set("PLUGIN_ROOT", plugin.display().to_string());

    let s = Session::start(&env, &plugin, Client::default()).await;
    let text = s.shown(&env, "get_problems", json!({})).await;
    insta::assert_snapshot!("roots_plugin_folder_get_problems", text);
    let text = s
        .shown(&env, "init_workspace", json!({"workspace_path": "."}))
        .await;
    insta::assert_snapshot!("roots_plugin_folder_init_workspace", text);
    s.ok(
        "init_workspace",
        json!({"workspace_path": ws.display().to_string()}),
    )
    .await;
    let ctx = s.shown(&env, "get_analysis_context", json!({})).await;
    insta::assert_snapshot!("roots_context_from_init_workspace", ctx);

    // A client that declares roots: its first file: root is the workspace, by real path.
    let link = env.path("link");
    std::os::unix::fs::symlink(&ws, &link).expect("symlink");
    let client = Client::with_roots(vec![
        "https://example.com/not-a-workspace".into(),
        format!("file://{}", link.display()),
    ]);
    let roots = client.roots.clone().expect("declared");
    let s = Session::start(&env, &plugin, client).await;
    let ctx = s.shown(&env, "get_analysis_context", json!({})).await;
    insta::assert_snapshot!("roots_context_from_first_root", ctx);

    // roots/list_changed moves the workspace, never the identity.
    let other = env.path("other");
    project(&env, &other);
    *roots.lock().expect("roots lock") = vec![format!("file://{}", other.display())];
    s.client
        .notify_roots_list_changed()
        .await
        .expect("notify roots changed");
    let real_other = std::fs::canonicalize(&other).expect("real path");
    let moved = format!(
        "Workspace: {} (from the client's first root)",
        real_other.display()
    );
    let mut ctx = String::new();
    for _ in 0..50 {
        ctx = s.ok("get_analysis_context", json!({})).await;
        if ctx.contains(&moved) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ctx.contains(&moved), "{ctx}");
    insta::assert_snapshot!("roots_context_after_roots_changed", normalize(&ctx, &env));
}

#[tokio::test]
async fn a_restarted_server_answers_from_the_persisted_index_until_a_file_changes() {
    let env = TestEnv::new();
    let ws = env.path("proj");
    project(&env, &ws);
    let s = Session::start(&env, &ws, Client::default()).await;
    s.ok("init_workspace", json!({})).await;
    drop(s);
    let s = Session::start(&env, &ws, Client::default()).await;
    let impact = s
        .ok("analyze_impact", json!({"changed_files": ["b.py"]}))
        .await;
    assert!(impact.contains("function run"), "{impact}");
    let again = s.shown(&env, "init_workspace", json!({})).await;
    insta::assert_snapshot!("persisted_index_reused", again);
    drop(s);
    std::fs::write(ws.join("c.py"), "def other():\n    return 5  # grown\n").expect("edit");
    let s = Session::start(&env, &ws, Client::default()).await;
    let text = s
        .shown(&env, "analyze_impact", json!({"changed_files": ["b.py"]}))
        .await;
    insta::assert_snapshot!("persisted_index_stale", text);
}

/// The code index an earlier release persisted as JSON is read once, rewritten in the binary
/// form and removed; the server answers from it without parsing anything.
#[tokio::test]
async fn an_index_an_earlier_release_left_as_json_is_migrated_on_first_use() {
    let env = TestEnv::new();
    let ws = env.path("proj");
    project(&env, &ws);
    let real = std::fs::canonicalize(&ws).expect("canonical");
    let opts = metabob_index::IndexOptions::default();
    let mut index = metabob_index::Index::new(&real);
    index.run(&opts, Duration::from_secs(60)).expect("index");
    let dir = env.home().join(".cache/metabob-mcp/index");
    let id = metabob_mcp_server::ctx::workspace_id(&real);
    let (json, bin) = (
        dir.join(format!("{id}.json")),
        dir.join(format!("{id}.bin")),
    );
    index.save_legacy_json(&json).expect("legacy json");

    let s = Session::start(&env, &ws, Client::default()).await;
    let impact = s
        .ok("analyze_impact", json!({"changed_files": ["b.py"]}))
        .await;
    assert!(impact.contains("function run"), "{impact}");
    assert!(!json.exists(), "the JSON index is gone once rewritten");
    let migrated = metabob_index::Index::load(&bin, &real, &opts).expect("the binary index");
    assert_eq!(migrated.stats().components, index.stats().components);
    let again = s.shown(&env, "init_workspace", json!({})).await;
    insta::assert_snapshot!("persisted_index_reused", again);
}
