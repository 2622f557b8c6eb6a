//! The outbox as tests see it: the publisher deletes a row once the broker
//! confirmed its message, so what was published is read from the publisher's
//! own figures (`/metrics` of this test process, whose publisher runs
//! in-process), and a duplicate message is made the way recovery makes one.
use relayops_shared::broker::DeliveryTask;
use relayops_shared::ids::{DeliveryId, EndpointId, EventId, TenantId};
use relayops_shared::repo::outbox;

use crate::prometheus::{sample, scrape};
use crate::{eventually, TestEnv, WAIT};

impl TestEnv {
    /// Waits until every outbox row was published (and so deleted).
    pub async fn wait_for_outbox_drained(&self) {
        self.wait_for_sql("outbox drained", "SELECT count(*) = 0 FROM relayops.outbox_messages").await;
    }

    /// Sums `name` with `labels` on this process's `/metrics` (the in-process
    /// api role serves the figures of every role this env runs in-process).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        sample(&scrape(&self.http, &self.api_url).await, name, labels)
    }

    /// Waits until `name` with `labels` on this process's `/metrics`
    /// satisfies `holds`, and gives its value then.
    pub async fn wait_for_metric(&self, name: &str, labels: &[(&str, &str)], holds: impl Fn(f64) -> bool) -> f64 {
        eventually(WAIT, || async {
            let value = self.metric(name, labels).await;
            if holds(value) {
                Ok(value)
            } else {
                Err(format!("{name} {labels:?} is {value}"))
            }
        })
        .await
    }

    /// The receiver got `deliveries` requests, each for another delivery id.
    pub fn assert_each_request_once(&self, deliveries: usize) {
        let received = self.simulator.received();
        let distinct: std::collections::HashSet<_> = received.iter().map(|r| r.delivery_id.clone()).collect();
        assert_eq!(
            (received.len(), distinct.len()),
            (deliveries, deliveries),
            "each delivery sent once: {received:#?}"
        );
    }

    /// Messages the in-process publisher published (broker-confirmed).
    pub async fn messages_published(&self) -> f64 {
        self.metric("relayops_outbox_published_total", &[]).await
    }

    /// Waits until the in-process publisher has published exactly `expected`
    /// messages (the counter moves just after a batch's delete commits).
    pub async fn wait_for_messages_published(&self, expected: u32) {
        eventually(WAIT, || async {
            match self.messages_published().await {
                published if published == f64::from(expected) => Ok(()),
                published if published > f64::from(expected) => {
                    panic!("{published} messages published, expected {expected}")
                }
                published => Err(format!("{published} of {expected} messages published")),
            }
        })
        .await;
    }

    /// Writes another `delivery.v1` outbox row for a delivery (what a
    /// publisher dying between its confirm and its delete, or recovery,
    /// leaves): a duplicate message once published.
    pub async fn enqueue_duplicate(&self, delivery_id: &str) {
        let id = delivery_id.parse::<DeliveryId>().expect("a delivery id");
        let client = self.pool.get().await.expect("connection");
        let row = client
            .query_one(
                "SELECT tenant_id, event_id, endpoint_id FROM relayops.deliveries WHERE id = $1",
                &[&id.as_uuid()],
            )
            .await
            .expect("the delivery");
        let task = DeliveryTask {
            tenant_id: TenantId::from_uuid(row.get(0)),
            delivery_id: id,
            event_id: EventId::from_uuid(row.get(1)),
            endpoint_id: EndpointId::from_uuid(row.get(2)),
        };
        outbox::insert_delivery_messages(&client, &[task]).await.expect("outbox row");
        self.wakeup.notify_one();
    }
}
