//! Login sessions, kept server-side (migration 0025): a login starts one, a
//! login token names it ([`crate::auth::jwt::Claims::sid`]), and a request
//! with the token is let in only while the session is live — not ended by a
//! sign-out or "sign out everywhere", used within the idle timeout, younger
//! than its absolute lifetime — and its user and tenant still exist. Every
//! check reads Postgres, so an ended session is refused at once on every
//! replica and in every function; the idle clock is moved on at most once a
//! minute per session (a write per minute of use, not per request).
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::DbError;
use crate::ids::{TenantId, UserId};
use crate::repo::sql;
use crate::repo::users::UserPrincipal;
use crate::repo::GenericClient;

/// How often a session's last use is written.
const TOUCH_EVERY_SECS: i64 = 60;

const START: &str = "INSERT INTO relayops.login_sessions (id, tenant_id, user_id, expires_at)
     VALUES ($1, $2, $3, now() + $4::bigint * interval '1 millisecond')
     RETURNING expires_at";

/// The user's sessions that ended (revoked, expired or idle) over a day ago.
const FORGET_ENDED: &str = "DELETE FROM relayops.login_sessions
     WHERE tenant_id = $1 AND user_id = $2
       AND least(expires_at, coalesce(revoked_at, 'infinity'), last_seen_at + $3::bigint * interval '1 millisecond')
           < now() - interval '1 day'";

/// The live session's user, with the tenant limits requests are checked
/// against, and whether its last use is due to be written.
const LIVE_PRINCIPAL: &str = "SELECT u.role, t.ingest_rate_per_sec, t.ingest_burst,
            t.suspended_at IS NOT NULL AS tenant_suspended,
            s.last_seen_at < now() - $5::bigint * interval '1 second' AS touch_due
     FROM relayops.login_sessions s
     JOIN relayops.user_accounts u ON u.tenant_id = s.tenant_id AND u.id = s.user_id
     JOIN relayops.tenants t ON t.id = u.tenant_id
     WHERE s.id = $3 AND s.tenant_id = $1 AND s.user_id = $2
       AND s.revoked_at IS NULL AND s.expires_at > now()
       AND s.last_seen_at > now() - $4::bigint * interval '1 millisecond'";

const TOUCH: &str = "UPDATE relayops.login_sessions SET last_seen_at = now() WHERE id = $1 AND tenant_id = $2";

const END_ONE: &str = "UPDATE relayops.login_sessions SET revoked_at = now()
     WHERE id = $1 AND tenant_id = $2 AND user_id = $3 AND revoked_at IS NULL";

/// Every live session of a user but `$3` (none kept when it is NULL).
const END_ALL_BUT: &str = "UPDATE relayops.login_sessions SET revoked_at = now()
     WHERE tenant_id = $1 AND user_id = $2 AND id IS DISTINCT FROM $3 AND revoked_at IS NULL AND expires_at > now()";

/// How long sessions live: idle, and at most.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    pub idle: Duration,
    pub lifetime: Duration,
}

fn millis(duration: Duration) -> i64 {
    duration.as_millis().min(i64::MAX as u128) as i64
}

/// Starts a session for the user (deleting the user's sessions that ended
/// over a day ago); its id and when it ends at the latest.
pub async fn start(
    client: &impl GenericClient,
    tenant: TenantId,
    user: UserId,
    limits: SessionLimits,
) -> Result<(Uuid, DateTime<Utc>), DbError> {
    sql::execute(client, FORGET_ENDED, &[&tenant.as_uuid(), &user.as_uuid(), &millis(limits.idle)]).await?;
    let id = Uuid::new_v4();
    let row =
        sql::query_one(client, START, &[&id, &tenant.as_uuid(), &user.as_uuid(), &millis(limits.lifetime)]).await?;
    Ok((id, row.get("expires_at")))
}

/// The session's user if the session is live (see the module); moves its
/// idle clock on when due.
pub async fn live_principal(
    client: &impl GenericClient,
    tenant: TenantId,
    user: UserId,
    session: Uuid,
    idle: Duration,
) -> Result<Option<UserPrincipal>, DbError> {
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&tenant.as_uuid(), &user.as_uuid(), &session, &millis(idle), &TOUCH_EVERY_SECS];
    let Some(row) = sql::query_opt(client, LIVE_PRINCIPAL, &params).await? else { return Ok(None) };
    if row.get::<_, bool>("touch_due") {
        sql::execute(client, TOUCH, &[&session, &tenant.as_uuid()]).await?;
    }
    Ok(Some(UserPrincipal::from_row(&row)))
}

/// Ends one session of the user's (sign-out); whether it was live.
pub async fn end(client: &impl GenericClient, tenant: TenantId, user: UserId, session: Uuid) -> Result<bool, DbError> {
    Ok(sql::execute(client, END_ONE, &[&session, &tenant.as_uuid(), &user.as_uuid()]).await? > 0)
}

/// Ends every live session of the user's but `keep` (a password change
/// keeps the session it was made in); how many.
pub async fn end_all_but(
    client: &impl GenericClient,
    tenant: TenantId,
    user: UserId,
    keep: Uuid,
) -> Result<u64, DbError> {
    sql::execute(client, END_ALL_BUT, &[&tenant.as_uuid(), &user.as_uuid(), &Some(keep)]).await
}

/// Ends every live session of the user's ("sign out everywhere"); how many.
pub async fn end_all(client: &impl GenericClient, tenant: TenantId, user: UserId) -> Result<u64, DbError> {
    sql::execute(client, END_ALL_BUT, &[&tenant.as_uuid(), &user.as_uuid(), &None::<Uuid>]).await
}
