//! The event, delivery or endpoint a request names, looked up as reads that
//! may lag are (`db::reads`): on the reader, then on the writer when the
//! reader has not replayed it yet, so an id a create returned is always
//! found. Each answers the connection that found it, for the reads that
//! follow, or a 404 naming what was not found.
use relayops_shared::api::ApiError;
use relayops_shared::db::{ReadClient, Reads};
use relayops_shared::found_on_reader_or_writer;
use relayops_shared::ids::{DeliveryId, EndpointId, EventId, TenantId};
use relayops_shared::repo::deliveries::{self, DeliveryRecord};
use relayops_shared::repo::endpoints::{self, EndpointRecord};
use relayops_shared::repo::events::{self, EventRecord};

pub async fn event(reads: &Reads, tenant: TenantId, id: EventId) -> Result<(ReadClient, EventRecord), ApiError> {
    found_on_reader_or_writer!(reads, |client| events::get_event(&*client, tenant, id).await?)
        .ok_or(ApiError::NotFound("event"))
}

pub async fn delivery(
    reads: &Reads,
    tenant: TenantId,
    id: DeliveryId,
) -> Result<(ReadClient, DeliveryRecord), ApiError> {
    found_on_reader_or_writer!(reads, |client| deliveries::get_delivery(&*client, tenant, id).await?)
        .ok_or(ApiError::NotFound("delivery"))
}

pub async fn endpoint(
    reads: &Reads,
    tenant: TenantId,
    id: EndpointId,
) -> Result<(ReadClient, EndpointRecord), ApiError> {
    found_on_reader_or_writer!(reads, |client| endpoints::get_endpoint(&*client, tenant, id).await?)
        .ok_or(ApiError::NotFound("endpoint"))
}
