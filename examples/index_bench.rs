//! `cargo run --release --example index_bench -- DIR [ext,ext..]`: medians of 3 runs, as JSON.
//!
//! bare: the same listing (`scan`, same limits), each file read into one reused buffer and
//! tree-sitter-parsed with its grammar, nothing else. index: `Index::new` + a full `run`.
//! load: `Index::load` of the saved index, which re-lists the workspace (scan_ms of it).
//! Times are wall clock; the `*_cpu_ms` are this single-threaded process's CPU time, which a
//! machine loaded by others disturbs less.

// A benchmark whose product is the JSON it prints.
#![allow(clippy::print_stdout)]

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use metabob_index::{Index, IndexOptions, Lang, scan};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// User + system CPU time of this process in ms, from /proc (Linux, 100 ticks a second).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<f64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) * 10.0
}

/// Runs `f`, pushing its wall and CPU milliseconds.
fn timed<T>(wall: &mut Vec<f64>, cpu: &mut Vec<f64>, f: impl FnOnce() -> T) -> T {
    let (t, c) = (Instant::now(), cpu_ms());
    let out = f();
    wall.push(t.elapsed().as_secs_f64() * 1000.0);
    cpu.push(cpu_ms() - c);
    out
}

fn bare_parse(root: &Path, opts: &IndexOptions) -> Result<usize, Box<dyn std::error::Error>> {
    let listing = scan(root, opts)?;
    let mut parsers: Vec<Option<tree_sitter::Parser>> = (0..6).map(|_| None).collect();
    let mut buf = Vec::new();
    for f in &listing.files {
        let lang = Lang::from_ext(f.path.rsplit('.').next().unwrap_or("")).ok_or("extension")?;
        let slot = &mut parsers[lang as usize];
        if slot.is_none() {
            let mut p = tree_sitter::Parser::new();
            p.set_language(&lang.grammar())?;
            *slot = Some(p);
        }
        buf.clear();
        std::fs::File::open(root.join(&f.path))?.read_to_end(&mut buf)?;
        let parser = slot.as_mut().ok_or("parser")?;
        std::hint::black_box(parser.parse(&buf, None));
    }
    Ok(listing.files.len())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: index_bench DIR [ext,ext..]")?;
    let root = Path::new(&dir);
    let mut opts = IndexOptions::default();
    if let Some(exts) = args.next() {
        opts.include = exts.split(',').map(str::to_string).collect();
    }
    let cache = std::env::temp_dir().join(format!("index_bench_{}.bin", std::process::id()));
    let [
        mut bare,
        mut bare_cpu,
        mut full,
        mut full_cpu,
        mut load,
        mut load_cpu,
        mut sc,
        mut sc_cpu,
    ] = std::array::from_fn(|_| Vec::new());
    let mut files = 0;
    for _ in 0..3 {
        files = timed(&mut bare, &mut bare_cpu, || bare_parse(root, &opts))?;
        let index = timed(&mut full, &mut full_cpu, || {
            let mut index = Index::new(root);
            index.run(&opts, Duration::from_secs(3600)).map(|_| index)
        })?;
        assert!(index.is_complete());
        index.save(&cache)?;
        let loaded = timed(&mut load, &mut load_cpu, || {
            Index::load(&cache, root, &opts)
        });
        let loaded = loaded.map_err(|d| d.to_string())?;
        assert_eq!(loaded.stats().components, index.stats().components);
        timed(&mut sc, &mut sc_cpu, || scan(root, &opts))?;
    }
    let cache_bytes = std::fs::metadata(&cache).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&cache);
    let (b, i, bc, ic) = (
        median(bare),
        median(full),
        median(bare_cpu),
        median(full_cpu),
    );
    println!(
        "{{\"files\":{files},\"bare_parse_ms\":{b:.0},\"index_ms\":{i:.0},\"ratio\":{:.3},\
         \"load_ms\":{:.0},\"scan_ms\":{:.1},\"cache_bytes\":{cache_bytes},\
         \"bare_cpu_ms\":{bc:.0},\"index_cpu_ms\":{ic:.0},\"cpu_ratio\":{:.3}}}",
        i / b,
        median(load),
        median(sc),
        ic / bc
    );
    Ok(())
}
