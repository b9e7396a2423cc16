//! The store's one connection, on either backend: SQLite (a file) or PostgreSQL (a schema of its own in
//! a shared database). The per-table files write their SQL once, portably (`?N` parameters, `ON
//! CONFLICT`, `RETURNING`, `IS [NOT] DISTINCT FROM`), and call the few methods here, shaped like
//! rusqlite's: `execute`, `query_row`, `prepare(..).query_map`, `execute_batch`. For PostgreSQL the
//! `?N` become `$N`; values travel as [`Value`] and rows are read into [`Row`]s of them.

use crate::off_runtime::off_runtime;
use std::cell::RefCell;

/// A value as the store writes and reads it: integers are i64 everywhere (BIGINT on PostgreSQL),
/// booleans 0/1.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    I64(i64),
    F64(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl From<i64> for Value {
    fn from(n: i64) -> Value {
        Value::I64(n)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}

#[derive(Debug)]
pub enum Error {
    Sqlite(rusqlite::Error),
    Postgres(postgres::Error),
    /// `query_row` found no row (see [`OptionalExtension`]).
    NoRows,
    /// A column that does not hold the type asked for.
    Column {
        index: usize,
        message: String,
    },
    /// TLS to PostgreSQL cannot be set up (its CA file, the system's roots).
    Tls(String),
    /// A fenced write while the lease is another's (see [`Fence`]): nothing was written.
    Fenced(Fence),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Sqlite(e) => write!(f, "{e}"),
            // A server's error as it reports it (never the connection string: the driver has none).
            Error::Postgres(e) => match e.as_db_error() {
                Some(db) => write!(f, "{}: {} ({})", db.severity(), db.message(), db.code().code()),
                // With its cause ("error performing TLS handshake" says nothing of the certificate).
                None => match std::error::Error::source(e) {
                    Some(cause) => write!(f, "{e}: {cause}"),
                    None => write!(f, "{e}"),
                },
            },
            Error::NoRows => write!(f, "no row"),
            Error::Column { index, message } => write!(f, "column {index}: {message}"),
            Error::Tls(message) => write!(f, "TLS to the database: {message}"),
            Error::Fenced(fence) if fence.epoch == 0 => {
                write!(f, "lease {} is not {}'s (another replica holds it): nothing written", fence.name, fence.holder)
            }
            Error::Fenced(fence) => write!(
                f,
                "lease {} moved on from {} at epoch {} (another replica holds it): nothing written",
                fence.name, fence.holder, fence.epoch
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        match e {
            rusqlite::Error::QueryReturnedNoRows => Error::NoRows,
            e => Error::Sqlite(e),
        }
    }
}

impl From<super::pg_tls::TlsError> for Error {
    fn from(e: super::pg_tls::TlsError) -> Error {
        Error::Tls(e.0)
    }
}

impl From<postgres::Error> for Error {
    fn from(e: postgres::Error) -> Error {
        Error::Postgres(e)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// SQLite's "busy" or "locked" (another writer holds the file).
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Sqlite(e) if matches!(e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)))
    }
}

/// Wait for another SQLite writer in short sleeps, up to about 10 s. SQLite's own busy timeout
/// sleeps up to 100 ms a try, far longer than a write holds the lock: a burst of writers (the
/// service's creates) spent most of its time asleep with the lock free.
pub fn wait_while_busy(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    conn.busy_handler(Some(busy_wait))
}

/// Tries of 0.2 ms for the first 0.1 s, then of 2 ms, until about 10 s in all.
fn busy_wait(tries: i32) -> bool {
    const SHORT: u64 = 500;
    const LONG: u64 = 4950;
    let tries = u64::try_from(tries).unwrap_or(0);
    if tries >= SHORT + LONG {
        return false;
    }
    std::thread::sleep(std::time::Duration::from_micros(if tries < SHORT { 200 } else { 2000 }));
    true
}

/// `query_row(..).optional()`: no row is `None`, as with rusqlite.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// What a parameter can be: anything the store writes.
pub trait ToValue {
    fn to_value(&self) -> Value;
}

macro_rules! int_to_value {
    ($($t:ty),*) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> Value {
                // Every integer the store writes fits (ids, counts, Unix seconds).
                Value::I64(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_to_value!(i64, i32, u32, u16, u8, u64, usize);

impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::I64(i64::from(*self))
    }
}
impl ToValue for f64 {
    fn to_value(&self) -> Value {
        Value::F64(*self)
    }
}
impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_string())
    }
}
impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}
impl ToValue for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

/// A statement's parameters: `params![..]`, `[]` or [`params_from_iter`].
pub trait Params {
    fn values(self) -> Vec<Value>;
}
impl Params for &[&dyn ToValue] {
    fn values(self) -> Vec<Value> {
        self.iter().map(|p| p.to_value()).collect()
    }
}
impl Params for [&dyn ToValue; 0] {
    fn values(self) -> Vec<Value> {
        Vec::new()
    }
}
impl Params for Vec<Value> {
    fn values(self) -> Vec<Value> {
        self
    }
}

/// The marks of an `IN (...)` list of `n` parameters (`?,?,?`), whose values [`params_from_iter`] gives.
pub fn in_marks(n: usize) -> String {
    vec!["?"; n].join(",")
}

/// Parameters from an iterator (the `IN (?1, ?2, ...)` of a chunk of ids).
pub fn params_from_iter<I: IntoIterator>(iter: I) -> Vec<Value>
where
    I::Item: ToValue,
{
    iter.into_iter().map(|v| v.to_value()).collect()
}

/// rusqlite's `params!`, over [`ToValue`].
macro_rules! params {
    () => { &[] as &[&dyn $crate::store::sql::ToValue] };
    ($($p:expr),+ $(,)?) => { &[$(&$p as &dyn $crate::store::sql::ToValue),+] as &[&dyn $crate::store::sql::ToValue] };
}
pub(crate) use params;

/// What a column can be read as.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> std::result::Result<Self, String>;
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(v: &Value) -> std::result::Result<Self, String> {
                match v {
                    Value::I64(n) => <$t>::try_from(*n).map_err(|_| format!("{n} out of range")),
                    other => Err(format!("{other:?} is not an integer")),
                }
            }
        }
    )*};
}
int_from_value!(i64, i32, u32, u16, u8, u64, usize);

impl FromValue for bool {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        i64::from_value(v).map(|n| n != 0)
    }
}
impl FromValue for f64 {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::F64(x) => Ok(*x),
            Value::I64(n) => Ok(*n as f64),
            other => Err(format!("{other:?} is not a number")),
        }
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            other => Err(format!("{other:?} is not text")),
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            other => Err(format!("{other:?} is not a blob")),
        }
    }
}
impl FromValue for Value {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        Ok(v.clone())
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A column's index (rusqlite's `get::<_, T>(0)` shape).
pub trait RowIndex {
    fn index(self) -> usize;
}
impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

/// One row as read.
pub struct Row {
    values: Vec<Value>,
}

impl Row {
    pub fn get<I: RowIndex, T: FromValue>(&self, index: I) -> Result<T> {
        let index = index.index();
        let v = self.values.get(index).ok_or_else(|| Error::Column { index, message: "no such column".into() })?;
        T::from_value(v).map_err(|message| Error::Column { index, message })
    }
}

/// `?N` placeholders as PostgreSQL's `$N`, outside string literals, quoted identifiers and comments;
/// a bare `?` is numbered as SQLite numbers it (one more than the largest number before it).
pub fn to_dollar_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut largest = 0u32;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                // A doubled quote inside is an escaped one: the literal goes on, which this loop does.
                for d in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    digits.push(d);
                }
                let n = digits.parse().unwrap_or(largest + 1);
                largest = largest.max(n);
                out.push_str(&format!("${n}"));
            }
            c => out.push(c),
        }
    }
    out
}

/// The PostgreSQL half: a connection of its schema's while a statement or transaction runs (see
/// [`super::pg_links`]), and what this store wrote.
pub struct Pg {
    home: std::sync::Arc<super::pg_links::Home>,
    /// Held from a statement's or transaction's start to its end, then given back.
    link: Option<super::pg_links::Link>,
    in_transaction: bool,
    /// An error said the server is gone (it may not show in `is_closed`): the link is closed.
    lost: bool,
    /// Rows this connection has written (SQLite's `total_changes`).
    changes: u64,
    /// Rows written in the open transaction: its commit bumps the schema's change counter.
    dirty: bool,
    /// How many times this connection bumped the counter: the rest are other connections' commits.
    own_bumps: i64,
}

/// The advisory lock class of a schema's writes (its second key: a hash of the schema's name).
const WRITE_LOCK_CLASS: i32 = 0x7a05;

/// The one-row table whose counter every writing transaction bumps: PostgreSQL's `data_version`.
pub(super) const CHANGES_TABLE: &str = "tao_changes";

pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<RefCell<Pg>>),
}

/// The lease a connection's writes depend on: each is refused, in its own transaction, unless the
/// lease `name` is still `holder`'s at `epoch` (a replica that lost its lease writes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub name: String,
    pub holder: String,
    pub epoch: i64,
}

/// One connection to SQLite or PostgreSQL, and the fence its writes keep to, if any.
pub struct Conn {
    pub db: Db,
    fence: RefCell<Option<Fence>>,
    /// The fence was checked in the open transaction (which holds the write lock until it ends).
    fence_checked: std::cell::Cell<bool>,
    /// The open transaction's turn among this process's writers of the file (SQLite).
    turn: RefCell<Option<super::writer_turns::Turn>>,
}

/// A statement to run (rusqlite's `prepare` shape; PostgreSQL's is prepared when run, and cached).
pub struct Statement<'c> {
    conn: &'c Conn,
    sql: String,
}

impl Statement<'_> {
    pub fn execute(&mut self, params: impl Params) -> Result<usize> {
        self.conn.execute(&self.sql, params)
    }

    pub fn query_map<T>(
        &mut self,
        params: impl Params,
        f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<std::vec::IntoIter<Result<T>>> {
        Ok(self.conn.rows(&self.sql, params.values())?.iter().map(f).collect::<Vec<_>>().into_iter())
    }
}

fn pg_type(v: &Value) -> postgres::types::Type {
    use postgres::types::{Kind, Type};
    match v {
        Value::I64(_) => Type::INT8,
        Value::F64(_) => Type::FLOAT8,
        Value::Text(_) => Type::TEXT,
        Value::Blob(_) => Type::BYTEA,
        // Left to the server: the column or expression it meets says.
        Value::Null => Type::new("unspecified".into(), 0, Kind::Simple, "pg_catalog".into()),
    }
}

impl postgres::types::ToSql for Value {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> std::result::Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::{IsNull, Type};
        match (self, ty) {
            (Value::Null, _) => return Ok(IsNull::Yes),
            (Value::I64(n), &Type::INT4) => i32::try_from(*n)?.to_sql(ty, out)?,
            (Value::I64(n), &Type::INT2) => i16::try_from(*n)?.to_sql(ty, out)?,
            (Value::I64(n), &Type::BOOL) => (*n != 0).to_sql(ty, out)?,
            (Value::I64(n), &Type::FLOAT8) => (*n as f64).to_sql(ty, out)?,
            (Value::I64(n), _) => n.to_sql(ty, out)?,
            (Value::F64(x), _) => x.to_sql(ty, out)?,
            (Value::Text(s), _) => s.to_sql(ty, out)?,
            (Value::Blob(b), _) => b.to_sql(ty, out)?,
        };
        Ok(IsNull::No)
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// A PostgreSQL column of any type the store's queries produce, as a [`Value`].
struct PgCell(Value);

impl<'a> postgres::types::FromSql<'a> for PgCell {
    fn from_sql(
        ty: &postgres::types::Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::Type;
        Ok(PgCell(match *ty {
            Type::INT8 => Value::I64(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::I64(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::I64(i16::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::I64(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::F64(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::F64(f32::from_sql(ty, raw)?.into()),
            Type::BYTEA => Value::Blob(Vec::<u8>::from_sql(ty, raw)?),
            _ => Value::Text(String::from_sql(ty, raw)?),
        }))
    }

    fn from_sql_null(_: &postgres::types::Type) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgCell(Value::Null))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        use postgres::types::Type;
        matches!(
            *ty,
            Type::INT8
                | Type::INT4
                | Type::INT2
                | Type::BOOL
                | Type::FLOAT8
                | Type::FLOAT4
                | Type::BYTEA
                | Type::TEXT
                | Type::VARCHAR
                | Type::BPCHAR
                | Type::NAME
                | Type::UNKNOWN
        )
    }
}

impl Pg {
    pub(super) fn new(home: std::sync::Arc<super::pg_links::Home>) -> Pg {
        home.enter();
        Pg { home, link: None, in_transaction: false, lost: false, changes: 0, dirty: false, own_bumps: 0 }
    }

    /// The link of the statement or transaction under way, taken when there is none. Outside a
    /// transaction, a lost one (the server restarted, or was out of reach) is closed first and another
    /// taken; its prepared statements go with it. Within one, the error reaches the caller, which rolls
    /// back; the next transaction takes another.
    fn reconnect_if_closed(&mut self) -> Result<()> {
        if !self.in_transaction && (self.lost || self.link.as_ref().is_some_and(|l| l.client.is_closed())) {
            if let Some(link) = self.link.take() {
                self.home.close(link, true);
                tracing::info!("reconnecting to PostgreSQL");
            }
            self.lost = false;
        }
        if self.link.is_none() {
            self.link = Some(self.home.take().map_err(|e| self.note(e))?);
        }
        Ok(())
    }

    /// Give the link back once no transaction needs it (closed if it was lost).
    fn release(&mut self) {
        if self.in_transaction {
            return;
        }
        if let Some(link) = self.link.take() {
            if self.lost {
                self.home.close(link, true);
                self.lost = false;
            } else {
                self.home.give_back(link);
            }
        }
    }

    /// An error of the client, remembered when it says the connection is gone: a reset socket or
    /// an administrator's shutdown leaves `is_closed` false until the next call fails too.
    fn note(&mut self, e: postgres::Error) -> Error {
        if connection_lost(&e) {
            self.lost = true;
        }
        Error::Postgres(e)
    }

    /// Run `f` once more on a new connection when the old one turned out to be gone before `f`
    /// could do anything: only for what is safe to repeat (a read, or a `BEGIN`), never inside a
    /// transaction.
    fn again_if_lost<T>(&mut self, mut f: impl FnMut(&mut Pg) -> Result<T>) -> Result<T> {
        match f(self) {
            Err(Error::Postgres(e)) if !self.in_transaction && connection_lost(&e) => {
                self.lost = true;
                f(self)
            }
            done => done,
        }
    }

    fn statement(&mut self, sql: &str, values: &[Value]) -> Result<postgres::Statement> {
        self.reconnect_if_closed()?;
        let types: Vec<postgres::types::Type> = values.iter().map(pg_type).collect();
        let key = (sql.to_string(), types.iter().map(|t| t.oid()).collect::<Vec<_>>());
        let link = self.link.as_mut().expect("taken above");
        if let Some(st) = link.statements.get(&key) {
            return Ok(st.clone());
        }
        let prepared = link.client.prepare_typed(&to_dollar_params(sql), &types);
        let st = prepared.map_err(|e| self.note(e))?;
        self.link.as_mut().expect("taken above").statements.insert(key, st.clone());
        Ok(st)
    }

    fn execute(&mut self, sql: &str, values: Vec<Value>) -> Result<usize> {
        let done = self.execute_here(sql, values);
        self.release();
        done
    }

    fn execute_here(&mut self, sql: &str, values: Vec<Value>) -> Result<usize> {
        let st = self.statement(sql, &values)?;
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = values.iter().map(|v| v as _).collect();
        let n = self.client().execute(&st, &refs).map_err(|e| self.note(e))?;
        self.wrote(n)?;
        Ok(n as usize)
    }

    /// Statements without parameters, one after another.
    pub(super) fn batch(&mut self, sql: &str) -> Result<()> {
        let done = self.reconnect_if_closed().and_then(|()| self.client().batch_execute(sql).map_err(|e| self.note(e)));
        self.release();
        done
    }

    fn rows(&mut self, sql: &str, values: Vec<Value>) -> Result<Vec<Row>> {
        let done = self.rows_here(sql, values);
        self.release();
        done
    }

    fn rows_here(&mut self, sql: &str, values: Vec<Value>) -> Result<Vec<Row>> {
        let select = sql.trim_start().get(..6).is_some_and(|w| w.eq_ignore_ascii_case("select"));
        let query = |pg: &mut Pg| {
            let st = pg.statement(sql, &values)?;
            let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = values.iter().map(|v| v as _).collect();
            pg.client().query(&st, &refs).map_err(|e| pg.note(e))
        };
        // A read is asked again on a new connection; a write is not (it may have been done).
        let rows = if select { self.again_if_lost(query)? } else { query(self)? };
        // A query that writes (INSERT .. RETURNING) counts its rows as written.
        if !select {
            self.wrote(rows.len() as u64)?;
        }
        rows.iter()
            .map(|r| {
                let values = (0..r.len()).map(|i| r.try_get::<_, PgCell>(i).map(|c| c.0)).collect::<Result<_, _>>()?;
                Ok(Row { values })
            })
            .collect()
    }

    /// `n` rows written: outside a transaction the change counter moves at once, inside at commit.
    fn wrote(&mut self, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.changes += n;
        if self.in_transaction {
            self.dirty = true;
            Ok(())
        } else {
            self.bump()
        }
    }

    fn bump(&mut self) -> Result<()> {
        self.client().batch_execute(&format!("UPDATE {CHANGES_TABLE} SET n = n + 1")).map_err(|e| self.note(e))?;
        self.own_bumps += 1;
        Ok(())
    }

    /// Begin a transaction that holds this schema's write lock until it ends: writers take turns, as
    /// SQLite's `BEGIN IMMEDIATE` makes them (a read-then-write sees no other writer in between).
    pub(super) fn begin(&mut self) -> Result<()> {
        let began = self.again_if_lost(|pg| {
            pg.reconnect_if_closed()?;
            pg.client().batch_execute("BEGIN").map_err(|e| pg.note(e))
        });
        if let Err(e) = began {
            self.release();
            return Err(e);
        }
        self.in_transaction = true;
        self.dirty = false;
        let key = self.home.lock_key;
        let locked = self.client().execute("SELECT pg_advisory_xact_lock($1, $2)", &[&WRITE_LOCK_CLASS, &key]);
        if let Err(e) = locked {
            let e = self.note(e);
            self.rollback();
            return Err(e);
        }
        Ok(())
    }

    pub(super) fn commit(&mut self) -> Result<()> {
        if self.dirty {
            if let Err(e) = self.bump() {
                self.rollback();
                return Err(e);
            }
        }
        let done = self.client().batch_execute("COMMIT").map_err(|e| self.note(e));
        self.in_transaction = false;
        self.dirty = false;
        self.release();
        done
    }

    pub(super) fn rollback(&mut self) {
        if let Some(link) = self.link.as_mut() {
            let _ = link.client.batch_execute("ROLLBACK");
        }
        self.in_transaction = false;
        self.dirty = false;
        self.release();
    }

    /// The connection of the statement or transaction under way (the schema's migrations run inside
    /// [`Pg::begin`]'s transaction).
    pub(super) fn client(&mut self) -> &mut postgres::Client {
        &mut self.link.as_mut().expect("a link is taken before it is used").client
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            // Mid-transaction (a panic): closing it makes the server roll the transaction back.
            if self.in_transaction || self.lost {
                self.home.close(link, self.lost);
            } else {
                self.home.give_back(link);
            }
        }
        self.home.leave();
    }
}

/// Whether an error means the connection is gone: closed, a socket error, a connection failure
/// (SQLSTATE class 08), or the server ending the session (57P01-57P03: shutdown, crash, cannot connect now).
fn connection_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

impl Conn {
    pub fn sqlite(c: rusqlite::Connection) -> Conn {
        Conn::new(Db::Sqlite(c))
    }

    pub fn postgres(pg: Pg) -> Conn {
        Conn::new(Db::Postgres(Box::new(RefCell::new(pg))))
    }

    fn new(db: Db) -> Conn {
        Conn { db, fence: RefCell::new(None), fence_checked: std::cell::Cell::new(false), turn: RefCell::new(None) }
    }

    /// Keep every write of this connection to `fence` from now on (None: no fence).
    pub fn set_fence(&self, fence: Option<Fence>) {
        *self.fence.borrow_mut() = fence;
    }

    /// Whether this is a PostgreSQL connection.
    #[cfg(test)]
    pub fn is_postgres(&self) -> bool {
        matches!(self.db, Db::Postgres(_))
    }

    /// Keep every write to `fence` unless a fence is kept already.
    pub fn fence_if_none(&self, fence: Fence) {
        self.fence.borrow_mut().get_or_insert(fence);
    }

    /// Run `f` without the fence (the lease's own statements: its holder takes and renews it).
    pub fn unfenced<T>(&self, f: impl FnOnce() -> T) -> T {
        let fence = self.fence.borrow_mut().take();
        let out = f();
        *self.fence.borrow_mut() = fence;
        out
    }

    /// A write under the fence: in a transaction (one of its own when none is open) that holds the
    /// database's write lock (SQLite's `BEGIN IMMEDIATE`, the schema's advisory lock on PostgreSQL;
    /// a lease is taken under it too), after a check that the lease is still the fence's: the lease
    /// cannot change hands between the check and the write's commit.
    fn fenced<T>(&self, write: impl FnOnce() -> Result<T>) -> Result<T> {
        let Some(fence) = self.fence.borrow().clone() else { return write() };
        if !self.is_autocommit() {
            if !self.fence_checked.get() {
                self.check_fence(&fence)?;
                self.fence_checked.set(true);
            }
            return write();
        }
        self.begin()?;
        match self.check_fence(&fence).and_then(|()| write()) {
            Ok(v) => {
                self.commit()?;
                Ok(v)
            }
            Err(e) => {
                self.rollback();
                Err(e)
            }
        }
    }

    /// Whether the fence, if any, still holds now (a read: the lease may still move on before a write,
    /// which checks again).
    pub fn fence_holds(&self) -> Result<()> {
        match self.fence.borrow().clone() {
            Some(fence) => self.check_fence(&fence),
            None => Ok(()),
        }
    }

    fn check_fence(&self, fence: &Fence) -> Result<()> {
        let sql = "SELECT COUNT(*) FROM leases WHERE name = ?1 AND holder = ?2 AND epoch = ?3";
        let rows =
            self.rows_unfenced(sql, vec![fence.name.clone().into(), fence.holder.clone().into(), fence.epoch.into()])?;
        match rows.first().map(|r| r.get::<_, i64>(0)).transpose()? {
            Some(n) if n > 0 => Ok(()),
            _ => Err(Error::Fenced(fence.clone())),
        }
    }

    pub fn execute(&self, sql: &str, params: impl Params) -> Result<usize> {
        let values = params.values();
        self.fenced(|| self.execute_unfenced(sql, values))
    }

    fn execute_unfenced(&self, sql: &str, values: Vec<Value>) -> Result<usize> {
        match &self.db {
            Db::Sqlite(c) => {
                Ok(c.prepare_cached(sql)?.execute(rusqlite::params_from_iter(values.iter().map(sqlite_value)))?)
            }
            Db::Postgres(pg) => {
                let mut pg = pg.borrow_mut();
                let pg: &mut Pg = &mut pg;
                off_runtime(move || pg.execute(sql, values))
            }
        }
    }

    pub fn query_row<T>(&self, sql: &str, params: impl Params, f: impl FnOnce(&Row) -> Result<T>) -> Result<T> {
        let rows = self.rows(sql, params.values())?;
        f(rows.first().ok_or(Error::NoRows)?)
    }

    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        Ok(Statement { conn: self, sql: sql.to_string() })
    }

    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        self.prepare(sql)
    }

    /// Statements without parameters, one after another.
    #[allow(dead_code)] // the service database's (next)
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        self.fenced(|| self.execute_batch_unfenced(sql))
    }

    fn execute_batch_unfenced(&self, sql: &str) -> Result<()> {
        match &self.db {
            Db::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Db::Postgres(pg) => {
                let mut guard = pg.borrow_mut();
                let pg: &mut Pg = &mut guard;
                off_runtime(move || pg.batch(sql))
            }
        }
    }

    /// A query's rows; one that writes (INSERT .. RETURNING) keeps to the fence.
    fn rows(&self, sql: &str, values: Vec<Value>) -> Result<Vec<Row>> {
        if sql.trim_start().get(..6).is_some_and(|w| w.eq_ignore_ascii_case("select")) {
            return self.rows_unfenced(sql, values);
        }
        self.fenced(|| self.rows_unfenced(sql, values))
    }

    fn rows_unfenced(&self, sql: &str, values: Vec<Value>) -> Result<Vec<Row>> {
        match &self.db {
            Db::Sqlite(c) => {
                let mut st = c.prepare_cached(sql)?;
                let n = st.column_count();
                let rows = st.query_map(rusqlite::params_from_iter(values.iter().map(sqlite_value)), |r| {
                    let values: rusqlite::Result<Vec<Value>> =
                        (0..n).map(|i| r.get::<_, rusqlite::types::Value>(i).map(from_sqlite)).collect();
                    values.map(|values| Row { values })
                })?;
                Ok(rows.collect::<Result<_, _>>()?)
            }
            Db::Postgres(pg) => {
                let mut pg = pg.borrow_mut();
                let pg: &mut Pg = &mut pg;
                off_runtime(move || pg.rows(sql, values))
            }
        }
    }

    /// Whether no transaction is open.
    pub fn is_autocommit(&self) -> bool {
        match &self.db {
            Db::Sqlite(c) => c.is_autocommit(),
            Db::Postgres(pg) => !pg.borrow().in_transaction,
        }
    }

    /// `items` written in one transaction by `write`, each as if in a savepoint of its own: one whose
    /// write fails is undone alone and the others stand (on PostgreSQL too, where a failed statement
    /// would otherwise abort the whole transaction). Each item's result, once the transaction
    /// committed; an error of the transaction itself (its begin, a savepoint, its commit) when it did
    /// not. `write` may run more than once for an item (only its writes here count).
    ///
    /// The items are first written with no savepoint (on PostgreSQL each savepoint and its release
    /// are two more round trips per item); when one fails, that transaction is rolled back and the
    /// items are written again, each in a savepoint.
    pub fn each_in_savepoint<I, T, E>(
        &self,
        items: Vec<I>,
        mut write: impl FnMut(&I) -> std::result::Result<T, E>,
    ) -> Result<Vec<std::result::Result<T, E>>> {
        self.begin()?;
        let mut results = Vec::with_capacity(items.len());
        for item in &items {
            match write(item) {
                Ok(t) => results.push(Ok(t)),
                // One item alone: undoing the transaction undoes just it.
                Err(e) if items.len() == 1 => {
                    self.rollback();
                    return Ok(vec![Err(e)]);
                }
                Err(_) => {
                    self.rollback();
                    return self.each_in_own_savepoint(&items, write);
                }
            }
        }
        if let Err(e) = self.commit() {
            self.rollback_if_open();
            return Err(e);
        }
        Ok(results)
    }

    /// Roll back the transaction an error left open, if it did (a failed commit may have ended it).
    fn rollback_if_open(&self) {
        if !self.is_autocommit() {
            self.rollback();
        }
    }

    /// [`Conn::each_in_savepoint`], each item in a savepoint from the start.
    fn each_in_own_savepoint<I, T, E>(
        &self,
        items: &[I],
        mut write: impl FnMut(&I) -> std::result::Result<T, E>,
    ) -> Result<Vec<std::result::Result<T, E>>> {
        let mut results = Vec::with_capacity(items.len());
        let mut run = || -> Result<()> {
            self.begin()?;
            for item in items {
                self.execute_unfenced("SAVEPOINT tao_write", Vec::new())?;
                let result = write(item);
                if result.is_err() {
                    self.execute_unfenced("ROLLBACK TO tao_write", Vec::new())?;
                }
                self.execute_unfenced("RELEASE tao_write", Vec::new())?;
                results.push(result);
            }
            self.commit()
        };
        match run() {
            Ok(()) => Ok(results),
            Err(e) => {
                self.rollback_if_open();
                Err(e)
            }
        }
    }

    /// Begin a writing transaction (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: see [`Pg::begin`]).
    pub fn begin(&self) -> Result<()> {
        self.fence_checked.set(false);
        match &self.db {
            Db::Sqlite(c) => {
                let turn = super::writer_turns::take(c.path().unwrap_or_default(), super::writer_turns::WAIT);
                c.execute_batch("BEGIN IMMEDIATE")?;
                *self.turn.borrow_mut() = turn;
                Ok(())
            }
            Db::Postgres(pg) => {
                let mut pg = pg.borrow_mut();
                let pg: &mut Pg = &mut pg;
                off_runtime(move || pg.begin())
            }
        }
    }

    pub fn commit(&self) -> Result<()> {
        self.fence_checked.set(false);
        match &self.db {
            Db::Sqlite(c) => {
                let done = c.execute_batch("COMMIT");
                if c.is_autocommit() {
                    self.turn.borrow_mut().take();
                }
                Ok(done?)
            }
            Db::Postgres(pg) => {
                let mut pg = pg.borrow_mut();
                let pg: &mut Pg = &mut pg;
                off_runtime(move || pg.commit())
            }
        }
    }

    pub fn rollback(&self) {
        self.fence_checked.set(false);
        match &self.db {
            Db::Sqlite(c) => {
                let _ = c.execute_batch("ROLLBACK");
                self.turn.borrow_mut().take();
            }
            Db::Postgres(pg) => {
                let mut pg = pg.borrow_mut();
                let pg: &mut Pg = &mut pg;
                off_runtime(move || pg.rollback())
            }
        }
    }

    /// A number that changes when another connection commits (SQLite's `data_version`; on
    /// PostgreSQL the schema's change counter less this connection's own bumps).
    pub fn data_version(&self) -> Result<i64> {
        match &self.db {
            Db::Sqlite(c) => Ok(c.pragma_query_value(None, "data_version", |r| r.get(0))?),
            Db::Postgres(pg) => {
                let n: i64 = self.query_row(&format!("SELECT n FROM {CHANGES_TABLE}"), [], |r| r.get(0))?;
                Ok(n - pg.borrow().own_bumps)
            }
        }
    }

    /// Rows this connection has written.
    pub fn total_changes(&self) -> u64 {
        match &self.db {
            Db::Sqlite(c) => c.total_changes(),
            Db::Postgres(pg) => pg.borrow().changes,
        }
    }
}

fn sqlite_value(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Null => rusqlite::types::Value::Null,
        Value::I64(n) => rusqlite::types::Value::Integer(*n),
        Value::F64(x) => rusqlite::types::Value::Real(*x),
        Value::Text(s) => rusqlite::types::Value::Text(s.clone()),
        Value::Blob(b) => rusqlite::types::Value::Blob(b.clone()),
    }
}

fn from_sqlite(v: rusqlite::types::Value) -> Value {
    match v {
        rusqlite::types::Value::Null => Value::Null,
        rusqlite::types::Value::Integer(n) => Value::I64(n),
        rusqlite::types::Value::Real(x) => Value::F64(x),
        rusqlite::types::Value::Text(s) => Value::Text(s),
        rusqlite::types::Value::Blob(b) => Value::Blob(b),
    }
}

/// A database URL as it may be shown: without its password (`postgresql://user:secret@host/db` ->
/// `postgresql://user@host/db`; `password=secret` in a key=value string -> `password=***`).
pub fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        let authority = match authority.rsplit_once('@') {
            Some((userinfo, host)) => format!("{}@{host}", userinfo.split(':').next().unwrap_or("")),
            None => authority.to_string(),
        };
        let tail = regex::Regex::new(r"(?i)(password=)[^&]*").expect("valid").replace_all(tail, "${1}***");
        return format!("{scheme}://{authority}{tail}");
    }
    regex::Regex::new(r"(?i)(password\s*=\s*)('[^']*'|\S+)").expect("valid").replace_all(url, "${1}***").into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_marks_become_dollars_outside_literals_and_comments() {
        assert_eq!(
            to_dollar_params("SELECT a FROM t WHERE b = ?1 AND c IN (?2, ?10)"),
            "SELECT a FROM t WHERE b = $1 AND c IN ($2, $10)"
        );
        assert_eq!(
            to_dollar_params("SELECT '?1', 'it''s ?2', \"?3\" FROM t WHERE x = ?4"),
            "SELECT '?1', 'it''s ?2', \"?3\" FROM t WHERE x = $4"
        );
        assert_eq!(to_dollar_params("-- what ?1 means\nSELECT ?1"), "-- what ?1 means\nSELECT $1");
        assert_eq!(
            to_dollar_params("SELECT a FROM t WHERE b > ? AND c IN (?, ?) LIMIT ?"),
            "SELECT a FROM t WHERE b > $1 AND c IN ($2, $3) LIMIT $4"
        );
        assert_eq!(to_dollar_params("SELECT ?2, ?"), "SELECT $2, $3", "as SQLite numbers a bare one");
    }

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redact_url("postgresql://u:s3cret@db:5432/tao?sslmode=require"),
            "postgresql://u@db:5432/tao?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://u:p@h/d?password=x&application_name=a"),
            "postgres://u@h/d?password=***&application_name=a"
        );
        assert_eq!(redact_url("host=h user=u password=s3cret dbname=d"), "host=h user=u password=*** dbname=d");
        assert_eq!(redact_url("postgresql://u@h/d"), "postgresql://u@h/d");
        for shown in [redact_url("postgresql://u:s3cret@h/d"), redact_url("password='s3cret' host=h")] {
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }
}
