//! Webhook endpoints and their subscriptions, always within one tenant.
use crate::repo::GenericClient;
use chrono::{DateTime, Utc};
use tokio_postgres::Row;

use crate::db::DbError;
use crate::domain::operational::Subject;
use crate::domain::{
    AwsRoleArn, DeadLetterLane, Destination, EndpointKind, EndpointUrl, EventTypePattern, SigningSecret,
};
use crate::ids::{EndpointId, SubscriptionId, TenantId};
use crate::repo::sql;

const ENDPOINT_COLUMNS: &str =
    "id, kind, destination, aws_role_arn, url, description, enabled, disabled_reason, rate_limit_per_sec,
     rate_limit_burst, max_in_flight, max_attempts, timeout_ms, retry_schedule_secs, created_at, updated_at,
     failing_since, last_success_at, last_failure_at, dead_letter_lane, circuit_open_until, circuit_hold_secs";

const INSERT_SUBSCRIPTION: &str =
    "INSERT INTO relayops.endpoint_subscriptions (id, tenant_id, endpoint_id, event_type_pattern)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (endpoint_id, event_type_pattern) DO NOTHING";

const LIST_SUBSCRIPTIONS: &str = "SELECT id, event_type_pattern, created_at FROM relayops.endpoint_subscriptions
     WHERE tenant_id = $1 AND endpoint_id = $2 ORDER BY event_type_pattern";

/// An endpoint as operators see it (the secret is fetched separately).
#[derive(Debug, Clone)]
pub struct EndpointRecord {
    pub id: EndpointId,
    pub kind: EndpointKind,
    /// How its deliveries leave: to `url` over HTTP, or to the SQS queue it names.
    pub destination: Destination,
    /// An AWS destination's role in the customer's account, if it names one.
    pub aws_role_arn: Option<String>,
    pub url: String,
    pub description: String,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub rate_limit_per_sec: Option<i32>,
    pub rate_limit_burst: Option<i32>,
    pub max_in_flight: Option<i32>,
    pub max_attempts: Option<i32>,
    pub timeout_ms: Option<i32>,
    pub retry_schedule_secs: Option<Vec<i32>>,
    /// What a dead letter does to its ordering lane.
    pub dead_letter_lane: DeadLetterLane,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub health: EndpointHealth,
    /// Its circuit ([`circuits`](super::circuits)): `None` while closed; open
    /// until then, half-open (probing) after.
    pub circuit_open_until: Option<DateTime<Utc>>,
    /// How long its parked deliveries are held while its circuit is open, at
    /// least (`None`: the retry policy alone decides when they die).
    pub circuit_hold_secs: Option<i32>,
}

/// An endpoint's health as recorded (see [`endpoint_health`](super::endpoint_health)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointHealth {
    /// Since when every attempt has failed; `None` while the last one succeeded
    /// (or none was made).
    pub failing_since: Option<DateTime<Utc>>,
    /// The last success and failure, each to within
    /// [`HEALTH_TIME_RESOLUTION_SECS`](super::endpoint_health::HEALTH_TIME_RESOLUTION_SECS).
    pub last_success_at: Option<DateTime<Utc>>,
    pub last_failure_at: Option<DateTime<Utc>>,
}

impl EndpointHealth {
    pub(crate) fn from_row(row: &Row) -> Self {
        Self {
            failing_since: row.get("failing_since"),
            last_success_at: row.get("last_success_at"),
            last_failure_at: row.get("last_failure_at"),
        }
    }
}

impl EndpointRecord {
    fn from_row(row: &Row) -> Self {
        Self {
            id: EndpointId::from_uuid(row.get("id")),
            kind: EndpointKind::from_stored(row.get("kind")),
            destination: Destination::from_stored(row.get("destination")),
            aws_role_arn: row.get("aws_role_arn"),
            url: row.get("url"),
            description: row.get("description"),
            enabled: row.get("enabled"),
            disabled_reason: row.get("disabled_reason"),
            rate_limit_per_sec: row.get("rate_limit_per_sec"),
            rate_limit_burst: row.get("rate_limit_burst"),
            max_in_flight: row.get("max_in_flight"),
            max_attempts: row.get("max_attempts"),
            timeout_ms: row.get("timeout_ms"),
            retry_schedule_secs: row.get("retry_schedule_secs"),
            dead_letter_lane: DeadLetterLane::from_stored(row.get("dead_letter_lane")),
            created_at: row.get("created_at"),
            updated_at: row.get("updated_at"),
            health: EndpointHealth::from_row(row),
            circuit_open_until: row.get("circuit_open_until"),
            circuit_hold_secs: row.get("circuit_hold_secs"),
        }
    }
}

pub struct NewEndpoint<'a> {
    pub kind: EndpointKind,
    pub destination: Destination,
    pub aws_role_arn: Option<&'a AwsRoleArn>,
    pub url: &'a EndpointUrl,
    pub description: &'a str,
    pub secret: &'a SigningSecret,
    pub enabled: bool,
    pub rate_limit_per_sec: Option<i32>,
    pub rate_limit_burst: Option<i32>,
    pub max_in_flight: Option<i32>,
    pub max_attempts: Option<i32>,
    pub timeout_ms: Option<i32>,
    pub retry_schedule_secs: Option<Vec<i32>>,
    pub dead_letter_lane: DeadLetterLane,
    pub circuit_hold_secs: Option<i32>,
}

pub async fn insert_endpoint(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: &NewEndpoint<'_>,
) -> Result<EndpointRecord, DbError> {
    let sql = format!(
        "INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, description, secret, enabled,
             rate_limit_per_sec, rate_limit_burst, max_in_flight, max_attempts, timeout_ms, retry_schedule_secs, kind,
             dead_letter_lane, circuit_hold_secs, destination, aws_role_arn)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
         RETURNING {ENDPOINT_COLUMNS}"
    );
    let row = sql::query_one(
        client,
        &sql,
        &[
            &EndpointId::new().as_uuid(),
            &tenant.as_uuid(),
            &endpoint.url.as_str(),
            &endpoint.description,
            &endpoint.secret.expose(),
            &endpoint.enabled,
            &endpoint.rate_limit_per_sec,
            &endpoint.rate_limit_burst,
            &endpoint.max_in_flight,
            &endpoint.max_attempts,
            &endpoint.timeout_ms,
            &endpoint.retry_schedule_secs,
            &endpoint.kind.as_str(),
            &endpoint.dead_letter_lane.as_str(),
            &endpoint.circuit_hold_secs,
            &endpoint.destination.as_str(),
            &endpoint.aws_role_arn.map(AwsRoleArn::as_str),
        ],
    )
    .await?;
    Ok(EndpointRecord::from_row(&row))
}

pub async fn get_endpoint(
    client: &impl GenericClient,
    tenant: TenantId,
    id: EndpointId,
) -> Result<Option<EndpointRecord>, DbError> {
    let sql = format!("SELECT {ENDPOINT_COLUMNS} FROM relayops.webhook_endpoints WHERE tenant_id = $1 AND id = $2");
    let row = sql::query_opt(client, &sql, &[&tenant.as_uuid(), &id.as_uuid()]).await?;
    Ok(row.as_ref().map(EndpointRecord::from_row))
}

pub async fn list_endpoints(
    client: &impl GenericClient,
    tenant: TenantId,
    limit: i64,
) -> Result<Vec<EndpointRecord>, DbError> {
    let sql = format!(
        "SELECT {ENDPOINT_COLUMNS} FROM relayops.webhook_endpoints WHERE tenant_id = $1
         ORDER BY created_at DESC, id DESC LIMIT $2"
    );
    let rows = sql::query(client, &sql, &[&tenant.as_uuid(), &limit]).await?;
    Ok(rows.iter().map(EndpointRecord::from_row).collect())
}

pub async fn get_secret(
    client: &impl GenericClient,
    tenant: TenantId,
    id: EndpointId,
) -> Result<Option<String>, DbError> {
    let row = sql::query_opt(
        client,
        "SELECT secret FROM relayops.webhook_endpoints WHERE tenant_id = $1 AND id = $2",
        &[&tenant.as_uuid(), &id.as_uuid()],
    )
    .await?;
    Ok(row.map(|row| row.get(0)))
}

#[derive(Debug, Clone)]
pub struct SubscriptionRecord {
    pub id: SubscriptionId,
    pub event_type_pattern: String,
    pub created_at: DateTime<Utc>,
}

/// Adds a subscription; subscribing twice to one pattern is a no-op.
pub async fn insert_subscription(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: EndpointId,
    pattern: &EventTypePattern,
) -> Result<(), DbError> {
    sql::execute(
        client,
        INSERT_SUBSCRIPTION,
        &[&SubscriptionId::new().as_uuid(), &tenant.as_uuid(), &endpoint.as_uuid(), &pattern.as_str()],
    )
    .await?;
    Ok(())
}

pub async fn list_subscriptions(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: EndpointId,
) -> Result<Vec<SubscriptionRecord>, DbError> {
    let rows = sql::query(client, LIST_SUBSCRIPTIONS, &[&tenant.as_uuid(), &endpoint.as_uuid()]).await?;
    Ok(rows
        .iter()
        .map(|row| SubscriptionRecord {
            id: SubscriptionId::from_uuid(row.get("id")),
            event_type_pattern: row.get("event_type_pattern"),
            created_at: row.get("created_at"),
        })
        .collect())
}

/// Disables endpoint `$2` of tenant `$1` with reason `$3` if it is enabled
/// (and the optional extra condition holds), returning what
/// [`disabled_from_row`] reads.
macro_rules! disable_if_enabled {
    ($($condition:literal)?) => {
        concat!(
            "UPDATE relayops.webhook_endpoints SET enabled = false, disabled_reason = $3, updated_at = now()
     WHERE tenant_id = $1 AND id = $2 AND enabled",
            $("
       AND ", $condition,)?
            "
     RETURNING id, kind, url, failing_since"
        )
    };
}
pub(crate) use disable_if_enabled;

const DISABLE: &str = disable_if_enabled!();

/// An endpoint that one of these calls just disabled (it was enabled).
#[derive(Debug, Clone)]
pub struct DisabledEndpoint {
    pub subject: Subject,
    pub failing_since: Option<DateTime<Utc>>,
}

pub(crate) fn disabled_from_row(row: &Row) -> DisabledEndpoint {
    DisabledEndpoint {
        subject: Subject {
            id: EndpointId::from_uuid(row.get("id")),
            kind: EndpointKind::from_stored(row.get("kind")),
            url: row.get("url"),
        },
        failing_since: row.get("failing_since"),
    }
}

/// Disables an endpoint (e.g. it answered 410 Gone); new events skip it, and
/// the worker settles its remaining deliveries as `failed` when they come up.
/// `None` when it was disabled already (or is gone).
pub async fn disable_endpoint(
    client: &impl GenericClient,
    tenant: TenantId,
    id: EndpointId,
    reason: &str,
) -> Result<Option<DisabledEndpoint>, DbError> {
    let row = sql::query_opt(client, DISABLE, &[&tenant.as_uuid(), &id.as_uuid(), &reason]).await?;
    Ok(row.as_ref().map(disabled_from_row))
}

const ROTATE_SECRET: &str = "UPDATE relayops.webhook_endpoints
     SET previous_secret = secret,
         previous_secret_expires_at = now() + $4::bigint * interval '1 second',
         secret = $3, updated_at = now()
     WHERE tenant_id = $1 AND id = $2";

/// Replaces the signing secret; the old one keeps signing (beside the new) for
/// `grace_secs`, so receivers can switch without rejecting anything.
pub async fn rotate_secret(
    client: &impl GenericClient,
    tenant: TenantId,
    id: EndpointId,
    new_secret: &SigningSecret,
    grace_secs: i64,
) -> Result<bool, DbError> {
    let updated =
        sql::execute(client, ROTATE_SECRET, &[&tenant.as_uuid(), &id.as_uuid(), &new_secret.expose(), &grace_secs])
            .await?;
    Ok(updated == 1)
}

/// Fields an operator may change; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub struct EndpointChanges<'a> {
    pub url: Option<&'a EndpointUrl>,
    pub description: Option<&'a str>,
    pub enabled: Option<bool>,
    pub rate_limit_per_sec: Option<Option<i32>>,
    pub rate_limit_burst: Option<Option<i32>>,
    pub max_in_flight: Option<Option<i32>>,
    pub max_attempts: Option<Option<i32>>,
    pub retry_schedule_secs: Option<Option<Vec<i32>>>,
    pub timeout_ms: Option<Option<i32>>,
    pub dead_letter_lane: Option<DeadLetterLane>,
    pub circuit_hold_secs: Option<Option<i32>>,
    /// An AWS destination's role (`Some(None)`: send as RelayOps itself).
    pub aws_role_arn: Option<Option<&'a AwsRoleArn>>,
}

/// An endpoint after a change, and whether the change enabled or disabled it.
#[derive(Debug, Clone)]
pub struct UpdatedEndpoint {
    pub endpoint: EndpointRecord,
    /// `Some(true)`: it was disabled and is now enabled; `Some(false)`: the reverse.
    pub switched: Option<bool>,
}

/// Applies the changes; re-enabling clears the disabled reason and the failing
/// state (so a re-enabled endpoint gets the whole window again); a new URL
/// closes the endpoint's circuit. One
/// statement that locks the row before reading its previous `enabled`, so two
/// concurrent PATCHes agree on which of them switched it.
pub async fn update_endpoint(
    client: &impl GenericClient,
    tenant: TenantId,
    id: EndpointId,
    changes: &EndpointChanges<'_>,
) -> Result<Option<UpdatedEndpoint>, DbError> {
    // `$n::bool` says whether the field is being changed; NULL values are real
    // values (e.g. "no rate limit"), so a flag is needed beside each. A new
    // URL is a new receiver: the old one's circuit and run of failures go
    // (its parked deliveries are released to the new URL).
    let moved = "($3 IS NOT NULL AND $3 IS DISTINCT FROM url)";
    let sql = format!(
        "UPDATE relayops.webhook_endpoints SET
             url = coalesce($3, url),
             description = coalesce($4, description),
             enabled = coalesce($5, enabled),
             disabled_reason = CASE WHEN $5 THEN NULL WHEN $5 = false THEN coalesce(disabled_reason, 'disabled by an operator') ELSE disabled_reason END,
             failing_since = CASE WHEN $5 AND NOT enabled THEN NULL ELSE failing_since END,
             rate_limit_per_sec = CASE WHEN $6 THEN $7 ELSE rate_limit_per_sec END,
             rate_limit_burst = CASE WHEN $8 THEN $9 ELSE rate_limit_burst END,
             max_in_flight = CASE WHEN $10 THEN $11 ELSE max_in_flight END,
             max_attempts = CASE WHEN $12 THEN $13 ELSE max_attempts END,
             retry_schedule_secs = CASE WHEN $14 THEN $15 ELSE retry_schedule_secs END,
             timeout_ms = CASE WHEN $16 THEN $17 ELSE timeout_ms END,
             dead_letter_lane = coalesce($18, dead_letter_lane),
             circuit_hold_secs = CASE WHEN $19 THEN $20 ELSE circuit_hold_secs END,
             aws_role_arn = CASE WHEN $21 THEN $22 ELSE aws_role_arn END,
             circuit_open_until = CASE WHEN {moved} THEN NULL ELSE circuit_open_until END,
             circuit_cooldown_ms = CASE WHEN {moved} THEN NULL ELSE circuit_cooldown_ms END,
             circuit_probe = CASE WHEN {moved} THEN NULL ELSE circuit_probe END,
             circuit_probe_at = CASE WHEN {moved} THEN NULL ELSE circuit_probe_at END,
             circuit_closed_at = CASE WHEN {moved} AND circuit_open_until IS NOT NULL THEN now()
                                      ELSE circuit_closed_at END,
             circuit_failures = CASE WHEN {moved} THEN 0 ELSE circuit_failures END,
             updated_at = now()
         FROM (SELECT enabled AS was_enabled FROM relayops.webhook_endpoints
               WHERE tenant_id = $1 AND id = $2
               FOR UPDATE) previous
         WHERE tenant_id = $1 AND id = $2
         RETURNING {ENDPOINT_COLUMNS}, previous.was_enabled"
    );
    let flag = |field: &Option<Option<i32>>| field.is_some();
    let value = |field: &Option<Option<i32>>| field.flatten();
    let schedule = changes.retry_schedule_secs.clone().flatten();
    let row = sql::query_opt(
        client,
        &sql,
        &[
            &tenant.as_uuid(),
            &id.as_uuid(),
            &changes.url.map(EndpointUrl::as_str),
            &changes.description,
            &changes.enabled,
            &flag(&changes.rate_limit_per_sec),
            &value(&changes.rate_limit_per_sec),
            &flag(&changes.rate_limit_burst),
            &value(&changes.rate_limit_burst),
            &flag(&changes.max_in_flight),
            &value(&changes.max_in_flight),
            &flag(&changes.max_attempts),
            &value(&changes.max_attempts),
            &changes.retry_schedule_secs.is_some(),
            &schedule,
            &flag(&changes.timeout_ms),
            &value(&changes.timeout_ms),
            &changes.dead_letter_lane.map(|policy| policy.as_str()),
            &flag(&changes.circuit_hold_secs),
            &value(&changes.circuit_hold_secs),
            &changes.aws_role_arn.is_some(),
            &changes.aws_role_arn.flatten().map(AwsRoleArn::as_str),
        ],
    )
    .await?;
    Ok(row.map(|row| {
        let was_enabled: bool = row.get("was_enabled");
        let endpoint = EndpointRecord::from_row(&row);
        UpdatedEndpoint { switched: (endpoint.enabled != was_enabled).then_some(endpoint.enabled), endpoint }
    }))
}
