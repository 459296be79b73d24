//! The one way the ledger's code talks to its store, whichever it is (anchor: sql-handle): a
//! statement is written once, with `?N` placeholders, and runs on SQLite as written and on
//! PostgreSQL with the placeholders renumbered as `$N`. What the two dialects do not share
//! (full-text search, the holder lock, the clock, the schema) has a method here or its own text
//! per store, so the callers stay one function each.

mod pg;

pub use pg::PgConn;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};

use super::errors::ApiError;

/// One bound value. A null keeps its column's kind, since PostgreSQL types every parameter.
#[derive(Clone, Debug)]
pub enum Arg {
    Int(i64),
    Real(f64),
    /// A text parameter bound to a statement: data, not an error's words.
    Text(String),
    NullInt,
    NullReal,
    NullText,
}

/// A value that binds as one [`Arg`]; by reference, so `args!` borrows what it is given.
pub trait IntoArg {
    fn arg(&self) -> Arg;
}

impl<T: IntoArg + ?Sized> IntoArg for &T {
    fn arg(&self) -> Arg {
        (**self).arg()
    }
}
impl IntoArg for i64 {
    fn arg(&self) -> Arg {
        Arg::Int(*self)
    }
}
impl IntoArg for f64 {
    fn arg(&self) -> Arg {
        Arg::Real(*self)
    }
}
impl IntoArg for str {
    fn arg(&self) -> Arg {
        Arg::Text(self.to_string())
    }
}
impl IntoArg for String {
    fn arg(&self) -> Arg {
        Arg::Text(self.clone())
    }
}
/// A null keeps the kind of what it stands for.
macro_rules! optional_arg {
    ($($t:ty => $null:ident),*) => {$(
        impl IntoArg for Option<$t> {
            fn arg(&self) -> Arg {
                self.as_ref().map_or(Arg::$null, IntoArg::arg)
            }
        }
    )*};
}
optional_arg!(i64 => NullInt, f64 => NullReal, String => NullText, &str => NullText, &String => NullText);

impl<T: IntoArg + ?Sized> From<&T> for Arg {
    fn from(v: &T) -> Self {
        v.arg()
    }
}

/// `args![a, b, …]`: the values of one statement, in placeholder order, borrowed.
macro_rules! args {
    ($($v:expr),* $(,)?) => { &[$($crate::sql::IntoArg::arg(&$v)),*][..] };
}
pub(crate) use args;

impl Arg {
    fn pg_type(&self) -> Type {
        match self {
            Arg::Int(_) | Arg::NullInt => Type::INT8,
            Arg::Real(_) | Arg::NullReal => Type::FLOAT8,
            Arg::Text(_) | Arg::NullText => Type::TEXT,
        }
    }

    fn pg(&self) -> &(dyn ToSql + Sync) {
        const NO_INT: Option<i64> = None;
        const NO_REAL: Option<f64> = None;
        const NO_TEXT: Option<String> = None;
        match self {
            Arg::Int(v) => v,
            Arg::Real(v) => v,
            Arg::Text(v) => v,
            Arg::NullInt => &NO_INT,
            Arg::NullReal => &NO_REAL,
            Arg::NullText => &NO_TEXT,
        }
    }
}

impl rusqlite::ToSql for Arg {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Arg::Int(v) => ValueRef::Integer(*v),
            Arg::Real(v) => ValueRef::Real(*v),
            Arg::Text(v) => ValueRef::Text(v.as_bytes()),
            Arg::NullInt | Arg::NullReal | Arg::NullText => ValueRef::Null,
        }))
    }
}

/// Which store a handle talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// `?N` and bare `?` placeholders as PostgreSQL's `$N`, leaving quoted text alone. A bare `?`
/// takes the number after the largest seen so far, as SQLite numbers it.
fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    let mut largest = 0usize;
    while let Some(ch) = chars.next() {
        if let Some(q) = quote {
            out.push(ch);
            if ch == q {
                quote = None;
            }
            continue;
        }
        match ch {
            '\'' | '"' => {
                quote = Some(ch);
                out.push(ch);
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n = digits.parse().unwrap_or(largest + 1);
                largest = largest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(ch),
        }
    }
    out
}

/// A row of an answer, read by column number.
pub enum Row<'r> {
    Lite(&'r rusqlite::Row<'r>),
    Pg(&'r tokio_postgres::Row),
}

/// A value a column can be read as.
pub trait Column: Sized {
    fn lite(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Self>;
    fn pg(r: &tokio_postgres::Row, i: usize) -> Result<Self, tokio_postgres::Error>;
}

macro_rules! column {
    ($($t:ty),*) => {$(
        impl Column for $t {
            fn lite(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Self> {
                r.get(i)
            }
            fn pg(r: &tokio_postgres::Row, i: usize) -> Result<Self, tokio_postgres::Error> {
                r.try_get(i)
            }
        }
    )*};
}
column!(i64, f64, String, Option<i64>, Option<f64>, Option<String>);

impl Row<'_> {
    pub fn get<T: Column>(&self, i: usize) -> Result<T, ApiError> {
        match self {
            Row::Lite(r) => Ok(T::lite(r, i)?),
            Row::Pg(r) => Ok(T::pg(r, i)?),
        }
    }
}

/// A handle on one connection of either store, for the length of one piece of work.
#[derive(Clone, Copy)]
pub enum Sql<'c> {
    Lite(&'c rusqlite::Connection),
    Pg(&'c PgConn),
}

impl<'c> Sql<'c> {
    pub fn dialect(self) -> Dialect {
        match self {
            Sql::Lite(_) => Dialect::Sqlite,
            Sql::Pg(_) => Dialect::Postgres,
        }
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute(self, sql: &str, args: &[Arg]) -> Result<usize, ApiError> {
        match self {
            Sql::Lite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(args))?),
            Sql::Pg(c) => Ok(usize::try_from(c.execute(sql, args)?).unwrap_or(usize::MAX)),
        }
    }

    /// Every row of one query, each through `f`.
    pub fn query<T>(
        self,
        sql: &str,
        args: &[Arg],
        mut f: impl FnMut(&Row<'_>) -> Result<T, ApiError>,
    ) -> Result<Vec<T>, ApiError> {
        match self {
            Sql::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    out.push(f(&Row::Lite(r))?);
                }
                Ok(out)
            }
            Sql::Pg(c) => c.query(sql, args, f),
        }
    }

    /// The rows of one query through `f` until it answers `false` (anchor: query_until): the
    /// rest are never stepped to on SQLite, and never kept on PostgreSQL; a column `f` does not
    /// read is not copied out.
    pub fn query_until(
        self,
        sql: &str,
        args: &[Arg],
        mut f: impl FnMut(&Row<'_>) -> Result<bool, ApiError>,
    ) -> Result<(), ApiError> {
        match self {
            Sql::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
                while let Some(r) = rows.next()? {
                    if !f(&Row::Lite(r))? {
                        break;
                    }
                }
                Ok(())
            }
            Sql::Pg(c) => c.query_until(sql, args, f),
        }
    }

    /// The first row of one query, if any.
    pub fn query_opt<T>(
        self,
        sql: &str,
        args: &[Arg],
        f: impl FnOnce(&Row<'_>) -> Result<T, ApiError>,
    ) -> Result<Option<T>, ApiError> {
        match self {
            Sql::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
                match rows.next()? {
                    Some(r) => f(&Row::Lite(r)).map(Some),
                    None => Ok(None),
                }
            }
            Sql::Pg(c) => {
                // The first row is the answer, as on SQLite, however many there are.
                let mut f = Some(f);
                let mut first = None;
                c.query_until(sql, args, |r| {
                    first = f.take().map(|f| f(r));
                    Ok(false)
                })?;
                first.transpose()
            }
        }
    }

    /// The one value of a query that always answers a row (an aggregate).
    pub fn value<T: Column>(self, sql: &str, args: &[Arg]) -> Result<T, ApiError> {
        self.query_opt(sql, args, |r| r.get(0))?
            .ok_or_else(|| ApiError::Internal("an aggregate answered no row".into()))
    }

    /// Runs `f` in one transaction, committed when it returns `Ok`, undone otherwise.
    pub fn transaction<T>(
        self,
        f: impl FnOnce(Sql<'c>) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let begin = match self {
            Sql::Lite(_) => "BEGIN IMMEDIATE",
            Sql::Pg(_) => "BEGIN",
        };
        self.execute_batch(begin)?;
        match f(self) {
            Ok(v) => {
                self.execute_batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                let _ = self.rollback();
                Err(e)
            }
        }
    }

    /// Ends the open transaction undone (on PostgreSQL, dropping what was still queued for it).
    pub fn rollback(self) -> Result<(), ApiError> {
        match self {
            Sql::Lite(c) => Ok(c.execute_batch("ROLLBACK")?),
            Sql::Pg(c) => c.rollback(),
        }
    }

    /// Runs one statement whose answer the caller does not read (anchor: execute_deferred): on
    /// PostgreSQL it goes out with the next statement that is read, or with the `COMMIT`, in the
    /// same round trip, and if it fails that statement answers its error and the transaction is
    /// undone; on SQLite, in the same process, it runs at once. For the rows a write adds after
    /// it has decided what to write, never for one whose count decides anything.
    pub fn execute_deferred(self, sql: &str, args: &[Arg]) -> Result<(), ApiError> {
        match self {
            Sql::Lite(_) => self.execute(sql, args).map(drop),
            Sql::Pg(c) => c.execute_deferred(sql, args),
        }
    }

    /// Whether `sql` answers any row: for a `SELECT 1 … LIMIT 1` that reads no column.
    pub fn exists(self, sql: &str, args: &[Arg]) -> Result<bool, ApiError> {
        Ok(self.query_opt(sql, args, |_| Ok(()))?.is_some())
    }

    /// Statements with no parameters, run as one (transaction control, the schema).
    pub fn execute_batch(self, sql: &str) -> Result<(), ApiError> {
        match self {
            Sql::Lite(c) => Ok(c.execute_batch(sql)?),
            Sql::Pg(c) => c.batch(sql),
        }
    }

    /// A filter on the concepts table (aliased `alias`) that keeps rows whose text holds any of
    /// the words of `text`, each word as a phrase, with its values numbered from `first`; `None`
    /// when nothing searchable remains. SQLite asks its FTS5 index, PostgreSQL its `tsvector`
    /// column; both split words at punctuation and ignore case.
    // anchor: fts-filter
    pub fn fts_filter(self, alias: &str, first: usize, text: &str) -> Option<(String, Vec<Arg>)> {
        let words: Vec<&str> = super::concepts::query_terms(text).collect();
        if words.is_empty() {
            return None;
        }
        Some(match self {
            Sql::Lite(_) => {
                let expr = words
                    .iter()
                    .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
                    .collect::<Vec<_>>()
                    .join(" OR ");
                (
                    format!(
                        "{alias}seq IN (SELECT rowid FROM concepts_fts WHERE concepts_fts MATCH ?{first})"
                    ),
                    vec![Arg::Text(expr)],
                )
            }
            Sql::Pg(_) => {
                let phrases: Vec<String> = (0..words.len())
                    .map(|i| format!("phraseto_tsquery('simple', ?{})", first + i))
                    .collect();
                (
                    format!("{alias}fts @@ ({})", phrases.join(" || ")),
                    words.iter().map(|w| Arg::from(*w)).collect(),
                )
            }
        })
    }

    /// Holds, until this transaction ends, the right to decide who holds each of `ids` in
    /// `org`, then reads the database's clock (anchor: holder-lock): on PostgreSQL a
    /// transaction-scoped advisory lock per id, taken in one order so two writers rarely wait on
    /// each other in a cycle (one that does is refused and run again), and the clock read once
    /// they are all held, both in one statement: the CTE is materialized, so the clock is read
    /// only after its count has taken every lock. SQLite has one writer, which already
    /// serializes every decision, and no clock to share: `None`.
    pub fn lock_holders_then_clock(
        self,
        org: &str,
        ids: &[String],
    ) -> Result<Option<i64>, ApiError> {
        let Sql::Pg(_) = self else {
            return Ok(None);
        };
        let mut keys: Vec<String> = ids.iter().map(|id| holder_key(org, id)).collect();
        keys.sort();
        keys.dedup();
        let locks = if keys.is_empty() {
            "SELECT 0 AS n".to_string()
        } else {
            let values: Vec<String> = (1..=keys.len()).map(|i| format!("(?{i})")).collect();
            format!(
                "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) AS n FROM (VALUES {}) AS u(k)",
                values.join(", ")
            )
        };
        let args: Vec<Arg> = keys.into_iter().map(Arg::Text).collect();
        self.query_opt(
            &format!(
                "WITH l AS MATERIALIZED ({locks})
                 SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM l"
            ),
            &args,
            |r| r.get(0),
        )
    }

    /// [`Sql::lock_holders_then_clock`]'s lock for one id, without waiting: `false` when another writer is
    /// deciding that id's holder right now (and so it is not free for this one).
    pub fn try_lock_holder(self, org: &str, id: &str) -> Result<bool, ApiError> {
        match self {
            Sql::Lite(_) => Ok(true),
            Sql::Pg(_) => Ok(self
                .query_opt(
                    "SELECT (CASE WHEN pg_try_advisory_xact_lock(hashtextextended(?1, 0)) THEN 1 ELSE 0 END)::bigint",
                    args![holder_key(org, id)],
                    |r| r.get::<i64>(0),
                )?
                .unwrap_or(0)
                == 1),
        }
    }
}

/// SQLite table DDL in PostgreSQL's words (anchor: pg_ddl): integers are 64-bit and reals double
/// there as SQLite stores them, and an autoincrement key is a `BIGSERIAL`. Only whole words are
/// changed; the schema's texts use nothing else PostgreSQL lacks.
pub fn pg_ddl(sqlite: &str) -> String {
    let text = sqlite.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY");
    let mut out = String::with_capacity(text.len() + 64);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(match word.as_str() {
            "INTEGER" => "BIGINT",
            "REAL" => "DOUBLE PRECISION",
            w => w,
        });
        word.clear();
    };
    for ch in text.chars() {
        if ch.is_ascii_alphanumeric() || ch == '_' {
            word.push(ch);
        } else {
            flush(&mut word, &mut out);
            out.push(ch);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The advisory lock's key text: one org's id, so orgs never contend.
fn holder_key(org: &str, id: &str) -> String {
    format!("{org}\n{id}")
}

/// A text column read as JSON, `None` when it is absent or not JSON.
pub fn json_text(text: Option<String>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_ddl_reads_as_postgresql_ddl() {
        assert_eq!(
            pg_ddl(
                "CREATE TABLE t (\n    seq INTEGER PRIMARY KEY AUTOINCREMENT,\n    n INTEGER NOT NULL,\n    \
                 w REAL,\n    realm TEXT,\n    integer_ms INTEGER\n);"
            ),
            "CREATE TABLE t (\n    seq BIGSERIAL PRIMARY KEY,\n    n BIGINT NOT NULL,\n    \
             w DOUBLE PRECISION,\n    realm TEXT,\n    integer_ms BIGINT\n);"
        );
    }

    #[test]
    fn placeholders_are_renumbered_outside_quotes() {
        assert_eq!(
            dollar_placeholders("a = ?1 AND b = ? AND c = '?2' AND d = ?3 AND e = ?"),
            "a = $1 AND b = $2 AND c = '?2' AND d = $3 AND e = $4"
        );
        assert_eq!(dollar_placeholders("x = ?2 OR y = ?1"), "x = $2 OR y = $1");
    }
}
