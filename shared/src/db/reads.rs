//! Where a read goes: list and search reads to a Postgres reader
//! (`RELAYOPS_DATABASE_READ_URL`: an RDS/Aurora reader endpoint, a streaming
//! standby) when one is configured, everything else to the writer.
//!
//! A reader lags the writer by its replication delay, so only reads that may
//! lag use it ([`Reads::for_list`]); a read that must see a write just made
//! (ingest, claims, replay, idempotency, a session's check) takes the writer.
//! A GET by id that the reader does not find asks the writer before
//! answering 404 ([`ReadClient::on_reader`] tells the caller when to), so an
//! id returned by a create is always found.
//!
//! A reader that cannot be reached, or fails a read as unavailable (its
//! connection broke, a hot-standby conflict), costs that one attempt per
//! [`READER_RETRY`]: the read is run again on the writer and reads go there
//! meanwhile (one WARN when that starts and one when the reader is back;
//! `relayops_db_reads_total` counts reads by the pool that served them). The
//! macros [`read_may_lag!`](crate::read_may_lag) and
//! [`found_on_reader_or_writer!`](crate::found_on_reader_or_writer) put
//! these rules around a handler's reads.
use std::ops::Deref;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool};

use super::DbError;
use crate::observe::names;

/// After the reader failed to give a connection, how long reads go to the
/// writer before the reader is tried again.
pub const READER_RETRY: Duration = Duration::from_secs(5);

/// The writer's pool and, when configured, the reader's; cheap to clone.
#[derive(Clone)]
pub struct Reads {
    writer: Pool,
    reader: Option<Reader>,
}

#[derive(Clone)]
struct Reader {
    pool: Pool,
    /// `Some(t)`: the reader failed; reads go to the writer until `t`.
    skip_until: std::sync::Arc<Mutex<Option<Instant>>>,
}

/// A connection from the reader or the writer.
pub struct ReadClient {
    client: Object,
    on_reader: bool,
}

impl ReadClient {
    /// Whether it is the reader's: a row it does not find may be a row the
    /// reader has not replayed yet.
    pub fn on_reader(&self) -> bool {
        self.on_reader
    }
}

impl Deref for ReadClient {
    type Target = Object;

    fn deref(&self) -> &Object {
        &self.client
    }
}

/// Runs `$read` (an expression on `$client` that may `.await?` repository
/// calls) on a connection for reads that may lag: the reader's when it
/// answers, else the writer's. When the reader fails the read as
/// unavailable, runs it again on the writer. Yields the read's value; an
/// error leaves through `?` as the handler's.
#[macro_export]
macro_rules! read_may_lag {
    ($reads:expr, |$client:ident| $read:expr) => {{
        let reads: &$crate::db::Reads = &$reads;
        let $client = reads.for_list().await?;
        let first: Result<_, $crate::db::DbError> = async { Ok($read) }.await;
        match first {
            Err(error) if error.is_unavailable() && $client.on_reader() => {
                reads.reader_failed(&error);
                let $client = reads.for_own_writes().await?;
                $read
            }
            other => other?,
        }
    }};
}

/// As [`read_may_lag!`](crate::read_may_lag) for a lookup by id (`$find`
/// yields `Option<row>`): a row the reader does not have (younger than its
/// replay) is looked up on the writer before anyone says 404. Yields
/// `Some((client, row))` — the connection that found it, for the reads that
/// follow — or `None` when neither has it.
#[macro_export]
macro_rules! found_on_reader_or_writer {
    ($reads:expr, |$client:ident| $find:expr) => {{
        let reads: &$crate::db::Reads = &$reads;
        let $client = reads.for_list().await?;
        let first: Result<_, $crate::db::DbError> = async { Ok($find) }.await;
        match first {
            Ok(Some(row)) => Some(($client, row)),
            Ok(None) if !$client.on_reader() => None,
            Err(error) if !(error.is_unavailable() && $client.on_reader()) => return Err(error.into()),
            outcome => {
                if let Err(error) = &outcome {
                    reads.reader_failed(error);
                }
                let $client = reads.for_own_writes().await?;
                $find.map(|row| ($client, row))
            }
        }
    }};
}

impl Reads {
    /// Every read on the writer.
    pub fn writer_only(writer: Pool) -> Self {
        Self { writer, reader: None }
    }

    /// List and search reads on `reader`.
    pub fn with_reader(writer: Pool, reader: Pool) -> Self {
        Self { writer, reader: Some(Reader { pool: reader, skip_until: Default::default() }) }
    }

    /// A connection for a read that may lag: the reader's, or the writer's
    /// when there is no reader or it cannot be reached now.
    pub async fn for_list(&self) -> Result<ReadClient, DbError> {
        if let Some(reader) = &self.reader {
            if let Some(client) = reader.connection().await {
                metrics::counter!(names::DB_READS, "pool" => "reader").increment(1);
                return Ok(ReadClient { client, on_reader: true });
            }
        }
        self.for_own_writes().await
    }

    /// The reader failed a read as unavailable: reads go to the writer for
    /// [`READER_RETRY`].
    pub fn reader_failed(&self, error: &DbError) {
        if let Some(reader) = &self.reader {
            reader.failed(error);
        }
    }

    /// A connection to the writer, for a read that must see every write made
    /// so far (e.g. a GET by id the reader did not find).
    pub async fn for_own_writes(&self) -> Result<ReadClient, DbError> {
        let client = self.writer.get().await?;
        metrics::counter!(names::DB_READS, "pool" => "writer").increment(1);
        Ok(ReadClient { client, on_reader: false })
    }
}

impl Reader {
    fn skip_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.skip_until.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A connection, unless the reader failed within [`READER_RETRY`] or
    /// fails now.
    async fn connection(&self) -> Option<Object> {
        if self.skip_until().is_some_and(|until| Instant::now() < until) {
            return None;
        }
        match self.pool.get().await {
            Ok(client) => {
                if self.skip_until().take().is_some() {
                    tracing::warn!("the Postgres reader answers again; list reads go to it");
                }
                Some(client)
            }
            Err(error) => {
                self.failed(&DbError::from(error));
                None
            }
        }
    }

    fn failed(&self, error: &DbError) {
        if self.skip_until().replace(Instant::now() + READER_RETRY).is_none() {
            tracing::warn!(
                error = %crate::telemetry::error_chain(error),
                retry_secs = READER_RETRY.as_secs(),
                "the Postgres reader cannot be used; list reads go to the writer"
            );
        }
    }
}
