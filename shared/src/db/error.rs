//! The repository layer's error type. SQLSTATEs and constraint names are mapped
//! here and nowhere else.
use tokio_postgres::error::SqlState;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database configuration")]
    Config(#[source] tokio_postgres::Error),
    #[error("database pool: {0}")]
    Pool(String),
    /// The database could not be reached or is overloaded; worth retrying later.
    #[error("Postgres is unavailable")]
    Unavailable(#[source] tokio_postgres::Error),
    /// A unique constraint refused the write.
    #[error("unique constraint `{constraint}` violated")]
    UniqueViolation {
        constraint: String,
        #[source]
        source: tokio_postgres::Error,
    },
    /// A foreign key refused the write (the referenced row is gone).
    #[error("foreign key `{constraint}` violated")]
    ForeignKeyViolation {
        constraint: String,
        #[source]
        source: tokio_postgres::Error,
    },
    /// A history table has no partition for the row's time: partition
    /// maintenance (the publisher's) has not run for longer than the
    /// partitions it keeps ahead.
    #[error("history partitions missing: no partition covers the row; partition maintenance is not running")]
    NoPartition(#[source] tokio_postgres::Error),
    #[error("database query failed")]
    Query(#[source] tokio_postgres::Error),
    /// The URL or its TLS settings are unusable (bad `sslmode`, unreadable CA file).
    #[error("Postgres connection settings")]
    Target(#[source] crate::db::target::TargetError),
    /// An unnamed statement's parameter has a Rust type with no wire type we know.
    #[error("parameter ${position} has a type unnamed statements cannot send")]
    UnknownParameterType { position: usize },
    #[error("expected {expected} row, got {count}")]
    RowCount { expected: &'static str, count: usize },
    #[error("migration {version} failed: {message}")]
    Migration { version: String, message: String },
}

impl DbError {
    /// True when the failure is transient (connection, pool, overload).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Pool(_) | Self::Unavailable(_))
    }

    /// True when the statement named a table that does not exist (a history
    /// partition dropped since its name was read).
    pub fn is_undefined_table(&self) -> bool {
        matches!(self, Self::Query(source) if source.code() == Some(&SqlState::UNDEFINED_TABLE))
    }

    /// The constraint name, for unique/foreign-key violations.
    pub fn constraint(&self) -> Option<&str> {
        match self {
            Self::UniqueViolation { constraint, .. } | Self::ForeignKeyViolation { constraint, .. } => Some(constraint),
            _ => None,
        }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(source: tokio_postgres::Error) -> Self {
        let Some(db) = source.as_db_error() else {
            // No server error: the connection broke or could not be made.
            return if source.is_closed() || source.to_string().contains("connect") {
                Self::Unavailable(source)
            } else {
                Self::Query(source)
            };
        };
        let code = db.code().clone();
        let constraint = db.constraint().unwrap_or_default().to_owned();
        // Tuple routing's "no partition of relation … found for row" names
        // no constraint (a CHECK's violation always does); told apart that
        // way, not by its message, which `lc_messages` may translate.
        if code == SqlState::CHECK_VIOLATION && db.constraint().is_none() {
            Self::NoPartition(source)
        } else if code == SqlState::UNIQUE_VIOLATION {
            Self::UniqueViolation { constraint, source }
        } else if code == SqlState::FOREIGN_KEY_VIOLATION {
            Self::ForeignKeyViolation { constraint, source }
        } else if code == SqlState::TOO_MANY_CONNECTIONS
            || code == SqlState::ADMIN_SHUTDOWN
            || code == SqlState::CRASH_SHUTDOWN
            || code == SqlState::CANNOT_CONNECT_NOW
            // During a failover a connection may still reach the old primary,
            // now a read-only standby.
            || code == SqlState::READ_ONLY_SQL_TRANSACTION
            || code == SqlState::T_R_SERIALIZATION_FAILURE
            || code == SqlState::T_R_DEADLOCK_DETECTED
        {
            Self::Unavailable(source)
        } else {
            Self::Query(source)
        }
    }
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        match error {
            // Getting a connection failed while opening one: the database is
            // down, refusing connections, or out of slots.
            deadpool_postgres::PoolError::Backend(source) => Self::Unavailable(source),
            other => Self::Pool(other.to_string()),
        }
    }
}
