//! `writes`: the ledger under many concurrent writers, each a keep-alive connection posting
//! back to back, beside the disk's own ceiling (raw SQLite, raw PostgreSQL commits).

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{sleep_until, timeout};

use super::{
    Bench, Errors, Ledgers, Opts, REQUEST_LIMIT, Res, Store, WARMUP, clock_ticks, cpu_sum, ms, pg,
    quantile_ms, server_cpu, server_cpu_between, step,
};

pub async fn writes(bench: &Bench, opts: &Opts, deadline: Instant) -> Res<()> {
    let seconds = opts.seconds_or(5.0);
    let secs = Duration::from_secs_f64(seconds);
    // A store column (and the PostgreSQL server's CPU) only when more than SQLite is measured,
    // so a default run prints what it always has.
    let show_store = opts.stores != [Store::Sqlite];
    let any_pg = opts.stores.iter().any(|s| matches!(s, Store::Pg { .. }));
    let mut sqlite_raw = None;
    if opts.stores.contains(&Store::Sqlite) {
        let raw_dir = bench.root.join("raw-sqlite");
        std::fs::create_dir_all(&raw_dir).map_err(|e| format!("{}: {e}", raw_dir.display()))?;
        eprintln!("fleet: raw SQLite, 1 and 32 rows per commit, {secs:?} each");
        let one = {
            let dir = raw_dir.clone();
            tokio::task::spawn_blocking(move || raw_sqlite(&dir.join("one.db"), 1, secs))
                .await
                .map_err(|e| format!("raw SQLite: {e}"))??
        };
        let batch = {
            let dir = raw_dir.clone();
            tokio::task::spawn_blocking(move || raw_sqlite(&dir.join("batch.db"), 32, secs))
                .await
                .map_err(|e| format!("raw SQLite: {e}"))??
        };
        sqlite_raw = Some((one, batch));
    }
    let mut pg_raw = None;
    if any_pg {
        eprintln!("fleet: raw PostgreSQL, 1 and 32 rows per commit, {secs:?} each");
        let cluster = bench.cluster()?;
        let mut rates = Vec::new();
        for rows in [1, 32] {
            let url = tokio::task::block_in_place(|| cluster.fresh_database())?;
            rates.push(
                tokio::task::spawn_blocking(move || pg::raw_commits(&url, rows, secs))
                    .await
                    .map_err(|e| format!("raw PostgreSQL: {e}"))??,
            );
        }
        let batch = rates.pop().ok_or("raw PostgreSQL: no rate")?;
        let one = rates.pop().ok_or("raw PostgreSQL: no rate")?;
        pg_raw = Some((one, batch));
    }
    // Each store against its own ceiling: one durable single-row commit after another.
    let ceiling = |store: Store| {
        let raw = match store {
            Store::Sqlite => &sqlite_raw,
            Store::Pg { .. } => &pg_raw,
        };
        raw.as_ref().map_or(0.0, |(one, _)| one.commits_per_s())
    };

    let ticks = clock_ticks();
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    // Clients outside, stores inside: the stores of one client count run back to back, so a
    // disturbance on the shared machine lands on neighbours that are compared.
    for &n in &opts.clients {
        for &store in &opts.stores {
            let label = if show_store {
                format!("{} with {n} clients", store.name())
            } else {
                format!("{n} clients")
            };
            // A run needs warm-up + window + drain; one that cannot finish before the deadline
            // is not started, so what is printed is whole runs only.
            if Instant::now() + WARMUP + secs + REQUEST_LIMIT > deadline {
                notes.push(format!("- {label}: not run, the deadline would pass"));
                continue;
            }
            eprintln!(
                "fleet: {} store, {n} concurrent writers, {secs:?}",
                store.name()
            );
            let r = ledger_writes(bench, store, n, secs, ticks).await?;
            notes.extend(r.errors.notes(&label));
            rows.push(r);
        }
    }

    for (what, raw) in [
        (
            "Raw SQLite on the same filesystem (WAL, synchronous=FULL, one connection",
            &sqlite_raw,
        ),
        (
            "Raw PostgreSQL on the same filesystem (the bench's cluster, fsync and \
             synchronous_commit on, one connection, one INSERT per autocommit transaction or 32 \
             in one transaction",
            &pg_raw,
        ),
    ] {
        let Some((one, batch)) = raw else { continue };
        println!("{what}, {seconds:.1} s each):");
        println!();
        println!("| rows per commit | commits | commits/s | rows/s | writer CPU ms / row |");
        println!("|---|---|---|---|---|");
        for r in [one, batch] {
            let rows = r.commits as f64 * r.rows_per_commit as f64;
            println!(
                "| {} | {} | {:.0} | {:.0} | {} |",
                r.rows_per_commit,
                r.commits,
                r.commits_per_s(),
                r.commits_per_s() * r.rows_per_commit as f64,
                r.cpu
                    .map_or("-".into(), |c| format!("{:.4}", c * 1000.0 / rows.max(1.0)))
            );
        }
        println!();
    }
    println!(
        "`concept_create_write` from N concurrent keep-alive connections, each back to back, a \
         fresh ledger per row, {:.1} s counted after {:.1} s warm-up; CPU is the ledger \
         process's over the counted window:",
        seconds,
        WARMUP.as_secs_f64()
    );
    println!();
    let (lead, lead_rule) = if show_store {
        ("| store ", "|---")
    } else {
        ("", "")
    };
    let (tail, tail_rule) = if any_pg {
        (" PostgreSQL server CPU s / 1k writes |", "---|")
    } else {
        ("", "")
    };
    let ratio = if show_store {
        "x own store's raw 1-row commits/s"
    } else {
        "x raw 1-row commits/s"
    };
    println!(
        "{lead}| clients | writes (201) | errors | writes/s | {ratio} | p50 ms | p99 ms \
         | ledger user CPU s / 1k writes | ledger sys CPU s / 1k writes | sys share of ledger CPU |{tail}"
    );
    println!("{lead_rule}|---|---|---|---|---|---|---|---|---|---|{tail_rule}");
    for r in &rows {
        let per_k = |s: f64| {
            if r.ok == 0 {
                "-".to_string()
            } else {
                format!("{:.3}", s / (r.ok as f64 / 1000.0))
            }
        };
        let total = r.user + r.sys;
        let share = if total > 0.0 {
            format!("{:.0}%", 100.0 * r.sys / total)
        } else {
            "-".into()
        };
        let lead = if show_store {
            format!("| {} ", r.store.name())
        } else {
            String::new()
        };
        let tail = if any_pg {
            format!(" {} |", r.pg_cpu.map_or("-".into(), per_k))
        } else {
            String::new()
        };
        let ceiling = ceiling(r.store);
        println!(
            "{lead}| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |{tail}",
            r.clients,
            r.ok,
            r.window_errors,
            r.writes_per_s,
            if ceiling > 0.0 {
                format!("{:.2}", r.writes_per_s / ceiling)
            } else {
                "-".into()
            },
            ms(r.p50),
            ms(r.p99),
            per_k(r.user),
            per_k(r.sys),
            share
        );
    }
    if show_store {
        println!();
        println!(
            "Ledger CPU is summed over the replicas; PostgreSQL server CPU is the postmaster's \
             and every process it forked (backends, WAL writer, checkpointer) over the same \
             window."
        );
    }
    if !notes.is_empty() {
        println!();
        println!("Errors (whole run, warm-up included) and skipped runs:");
        println!();
        for n in notes {
            println!("{n}");
        }
    }
    Ok(())
}

pub struct RawRate {
    pub rows_per_commit: usize,
    pub commits: u64,
    pub elapsed: Duration,
    /// User + sys CPU seconds of the thread that wrote, where the writer is this process's own
    /// (raw SQLite's, to set beside the ledger's CPU per write).
    pub cpu: Option<f64>,
}

impl RawRate {
    fn commits_per_s(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }
}

/// The disk's ceiling for what the ledger does per commit: one WAL append and its fsync. The
/// table is shaped like a small concept row so the page writes are of the same order.
fn raw_sqlite(path: &Path, rows_per_commit: usize, secs: Duration) -> Res<RawRate> {
    let db = |e: rusqlite::Error| format!("{}: {e}", path.display());
    let conn = rusqlite::Connection::open(path).map_err(db)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(db)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(db)?;
    conn.execute_batch(
        "CREATE TABLE concepts (id TEXT PRIMARY KEY, content TEXT NOT NULL, created_at INTEGER NOT NULL)",
    )
    .map_err(db)?;
    let mut insert = conn
        .prepare("INSERT INTO concepts (id, content, created_at) VALUES (?1, ?2, ?3)")
        .map_err(db)?;
    // This blocking-pool thread does all the writing, so its own times are the raw cost.
    let thread_cpu = || super::cpu_seconds("thread-self", super::clock_ticks()).map(|(u, s)| u + s);
    let cpu_before = thread_cpu()?;
    let start = Instant::now();
    let (mut commits, mut i) = (0u64, 0u64);
    while start.elapsed() < secs {
        // One row outside a transaction is its own commit; more need an explicit one.
        if rows_per_commit > 1 {
            conn.execute_batch("BEGIN").map_err(db)?;
        }
        for _ in 0..rows_per_commit {
            i += 1;
            let content = format!("finding {i}: null check missing in handler {}", i % 37);
            insert
                .execute(rusqlite::params![
                    format!("concept_{i:016x}"),
                    content,
                    i as i64
                ])
                .map_err(db)?;
        }
        if rows_per_commit > 1 {
            conn.execute_batch("COMMIT").map_err(db)?;
        }
        commits += 1;
    }
    Ok(RawRate {
        rows_per_commit,
        commits,
        elapsed: start.elapsed(),
        cpu: Some(thread_cpu()? - cpu_before),
    })
}

struct WritesRun {
    store: Store,
    clients: usize,
    ok: u64,
    window_errors: u64,
    writes_per_s: f64,
    p50: Option<f64>,
    p99: Option<f64>,
    /// Summed over the replicas.
    user: f64,
    sys: f64,
    /// The PostgreSQL server's user + sys CPU seconds over the window, on a pg store.
    pg_cpu: Option<f64>,
    errors: Errors,
}

/// What one client saw.
#[derive(Default)]
struct Tally {
    ok: u64,
    window_errors: u64,
    /// Latencies of the 201s counted in the window.
    latencies: Vec<Duration>,
    errors: Errors,
}

async fn ledger_writes(
    bench: &Bench,
    store: Store,
    n: usize,
    secs: Duration,
    ticks: f64,
) -> Res<WritesRun> {
    let h = bench.fresh(&format!("writes-{}-{n}", store.name()))?;
    let ledgers = Ledgers::start(bench, &h, store, &[]).await?;
    // A cell's key (read,write), not the first-start admin key.
    let mut args = vec!["ledger", "key", "create"];
    args.extend(ledgers.store_args.iter().map(String::as_str));
    args.extend_from_slice(&["--org", "default", "--scopes", "read,write", "--json"]);
    let created = step(h.bin_cmd(&args), "ledger key create").await?;
    let key: serde_json::Value =
        serde_json::from_str(&created).map_err(|e| format!("key create output: {e}"))?;
    let key = key["key"]
        .as_str()
        .ok_or("key create printed no key")?
        .to_string();
    let pids = ledgers.pids()?;
    let server = match store {
        Store::Sqlite => None,
        Store::Pg { .. } => Some(bench.cluster()?),
    };

    // One keep-alive connection per task: every task is one cell with its own connection, so
    // exactly N requests are in flight on N sockets. Opened before the clock starts. With
    // replicas, the writers alternate between them.
    let addrs: Vec<String> = ledgers
        .urls()
        .iter()
        .map(|u| u.trim_start_matches("http://").to_string())
        .collect();
    let mut clients = Vec::with_capacity(n);
    for c in 0..n {
        clients.push(Conn::open(&addrs[c % addrs.len()]).await?);
    }
    let start = Instant::now();
    let counting = start + WARMUP;
    let end = counting + secs;
    let auth = format!("ApiKey {key}");
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| tokio::spawn(writer(c, client, auth.clone(), counting, end)))
        .collect();

    // The counted window is [counting, end]: a write counts when its answer arrives in it, so
    // the rate is what the ledger completed in the window, the same window the CPU is read over.
    sleep_until(counting.into()).await;
    let (u0, s0) = cpu_sum(&pids, ticks)?;
    let pg0 = server.map(|c| server_cpu(c, ticks));
    sleep_until(end.into()).await;
    let (u1, s1) = cpu_sum(&pids, ticks)?;
    let pg1 = server.map(|c| server_cpu(c, ticks));

    let mut total = Tally::default();
    let drain = tokio::time::Instant::from(end) + REQUEST_LIMIT + Duration::from_secs(5);
    for t in tasks {
        // Each writer stops at `end` and its last request is bounded by REQUEST_LIMIT; this is
        // the bound should one still hang.
        let abort = t.abort_handle();
        match tokio::time::timeout_at(drain, t).await {
            Ok(Ok(tally)) => {
                total.ok += tally.ok;
                total.window_errors += tally.window_errors;
                total.latencies.extend(tally.latencies);
                total.errors.merge(tally.errors);
            }
            Ok(Err(e)) => total.errors.add(format!("writer task failed: {e}")),
            Err(_) => {
                abort.abort();
                total.errors.add("writer did not stop in time".into());
            }
        }
    }
    drop(ledgers);
    total.latencies.sort_unstable();
    let pg_cpu = pg0
        .zip(pg1)
        .map(|(before, after)| server_cpu_between(&before, &after));
    Ok(WritesRun {
        store,
        clients: n,
        ok: total.ok,
        window_errors: total.window_errors,
        writes_per_s: total.ok as f64 / secs.as_secs_f64(),
        p50: quantile_ms(&total.latencies, 0.50),
        p99: quantile_ms(&total.latencies, 0.99),
        user: u1 - u0,
        sys: s1 - s0,
        pg_cpu,
        errors: total.errors,
    })
}

/// One keep-alive HTTP/1.1 connection, spoken by hand. The load generator shares the two cores
/// with the ledger it measures, so it should cost as little as it can: a general client's
/// machinery per request (pools, header maps, timers) would be measured as if it were the
/// ledger's. Enough of HTTP/1.1 for the ledger's answers: a status line, headers, and a body
/// of `Content-Length` bytes.
struct Conn {
    stream: BufReader<tokio::net::TcpStream>,
    host: String,
}

impl Conn {
    async fn open(addr: &str) -> Res<Conn> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream: BufReader::new(stream),
            host: addr.to_string(),
        })
    }

    /// Posts `body` to `/resolve`; the status and the body of the answer.
    async fn resolve(&mut self, auth: &str, body: &str) -> Res<(u16, Vec<u8>)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = format!(
            "POST /resolve HTTP/1.1\r\nHost: {}\r\nAuthorization: {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        let io = async {
            self.stream.get_mut().write_all(request.as_bytes()).await?;
            let mut line = String::new();
            self.stream.read_line(&mut line).await?;
            let status: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| std::io::Error::other(format!("status line {line:?}")))?;
            let mut length = 0usize;
            loop {
                line.clear();
                if self.stream.read_line(&mut line).await? == 0 {
                    return Err(std::io::Error::other("the connection closed mid-answer"));
                }
                let header = line.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().map_err(std::io::Error::other)?;
                }
            }
            let mut answer = vec![0; length.min(1 << 20)];
            self.stream.read_exact(&mut answer).await?;
            Ok((status, answer))
        };
        match timeout(REQUEST_LIMIT, io).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(e)) => Err(format!("request: {e}")),
            Err(_) => Err(format!("no answer within {REQUEST_LIMIT:?}")),
        }
    }
}

/// One connection posting `concept_create_write` back to back until `end`.
async fn writer(c: usize, mut conn: Conn, auth: String, counting: Instant, end: Instant) -> Tally {
    let mut t = Tally::default();
    let mut i = 0u64;
    while Instant::now() < end {
        i += 1;
        // Distinct content per write, shaped like a finding the cells record.
        let body = serde_json::json!({ "pointer": {
            "type": "concept_create_write",
            "conceptData": {
                "content": format!("finding {c}-{i}: null check missing in handler {}", i % 37),
                "summary": format!("[HIGH][bug] h{c}_{i}.py: null check"),
                "shape": "code_finding",
                "source_type": "metabob_annotation",
            }
        }});
        let sent = Instant::now();
        let outcome = match conn.resolve(&auth, &body.to_string()).await {
            Ok((201, _)) => Ok(()),
            Ok((status, b)) => Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&b[..b.len().min(160)])
            )),
            Err(e) => Err(e),
        };
        let done = Instant::now();
        let in_window = done >= counting && done <= end;
        match outcome {
            Ok(()) if in_window => {
                t.ok += 1;
                t.latencies.push(done - sent);
            }
            Ok(()) => {}
            Err(e) => {
                if in_window {
                    t.window_errors += 1;
                }
                t.errors.add(e);
                // A failed connection is not reused: a fresh one, after a pause so that a
                // refused connection cannot make this spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                match Conn::open(&conn.host).await {
                    Ok(fresh) => conn = fresh,
                    Err(e) => t.errors.add(e),
                }
            }
        }
    }
    t
}
